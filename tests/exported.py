"""Loading an exported script (or any generated file) as a module, for the export tests."""
import importlib.util
import sys


def load(path, name="snippet"):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # TVMScript's parser reads the source of the module it is called from
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[name]
    return module


# Runs a script (its path is the first argument) as ``python script.py`` would, after telling
# ``inspect``'s file -> module cache that the frames of the import machinery, of runpy and of
# this code have no module, as explorer/schedules/tensor_intrinsics.py does before it imports
# TVM's tensor-core intrinsics: a script that imports them then starts in seconds, not tens.
RUN_SCRIPT = """\
import inspect, os, runpy, sys
for name in ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>", "<frozen runpy>", "<string>"):
    inspect.modulesbyfile.setdefault(os.path.normcase(os.path.abspath(name)), "")
runpy.run_path(sys.argv[1], run_name="__main__")
"""
