"""Run by Python at the start of every process of a test run (tests/conftest.py puts this folder first on
PYTHONPATH): the test processes and what they start (servers, build and compile pools, RPC sessions,
scripts). Their garbage collector takes the test processes' thresholds (``EXPLORER_TESTS_GC``, set by
conftest.py): importing TVM, Streamlit and the explorer, which each such process does first, ran it hundreds
of times over the objects just made (0.1 CPU-s of a process's 1.25 for those imports)."""
import gc
import importlib.machinery
import importlib.util
import os
import sys

if os.environ.get("EXPLORER_TESTS_GC"):
    gc.set_threshold(*(int(n) for n in os.environ["EXPLORER_TESTS_GC"].split(",")))

# A sitecustomize of the environment, further down the path, still runs.
_here = os.path.dirname(os.path.abspath(__file__))
_theirs = importlib.machinery.PathFinder.find_spec(
    "sitecustomize", [p for p in sys.path if os.path.abspath(p or os.curdir) != _here])
if _theirs is not None and _theirs.loader is not None:
    _theirs.loader.exec_module(importlib.util.module_from_spec(_theirs))
