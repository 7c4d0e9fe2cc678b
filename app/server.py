"""What one app server shares between all its sessions (``st.cache_resource``): builds and
measurements computed once each (explorer/live.py), the GPU warmed up in the background
from the first page view. Per-session state is session.py's."""
from __future__ import annotations

import logging
import os

# Whole before any page runs: Plotly and Streamlit look pandas up in sys.modules, and a page that
# did so while another session's first page was importing it got a half-made module
# ("partially initialized module 'pandas' has no attribute 'Series'").
import pandas  # noqa: F401
import streamlit as st

from explorer.build import Build, Spec
from explorer.cuda_env import SOURCE_ONLY
from explorer.errors import ExplorerError
from explorer.lessons import first_lesson_specs, lesson_specs
from explorer.live import Live
from explorer.measuring import shared_live
from explorer.presets import default_spec


@st.cache_resource(show_spinner=False, on_release=lambda live: live.close())
def live() -> Live:
    """The server's one Live, started on the first script run of the first session."""
    # This process lowers and generates CUDA source (and runs the analyses); the one binary
    # compile of a kernel happens in the measuring worker.
    os.environ[SOURCE_ONLY] = "1"
    log_to_stderr()
    # An app process of a multi-process server measures through the server's measuring service.
    service = shared_live() or Live()
    service.start(default_spec(), build_ahead=lesson_specs(), measure_ahead=first_lesson_specs() + lesson_specs())
    return service


def stop() -> None:
    """End the server's processes (build, compile, diagnosing) once Streamlit has
    stopped; without this the interpreter's exit waits for the work they are doing."""
    live.clear()


def log_to_stderr() -> None:
    """The library's notes (when each warm-up step ended) in the server's log."""
    logger = logging.getLogger("explorer")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def build(spec: Spec, target: str) -> Build:
    """``spec`` built for ``target`` once for the whole server (raises ExplorerError)."""
    return live().builds.build(spec, target)


def board_measure(spec: Spec, *, target: str = "auto", remote=None, on_wait=None):
    """A leaderboard submission, measured through the server's one queue (a setting just
    measured for the Explorer is not timed again)."""
    return live().measure_now(spec, target, remote, on_wait=on_wait)


def board_pytorch(workload) -> float | None:
    """PyTorch's µs for a board, measured once for the whole server; None where PyTorch
    cannot run the workload."""
    try:
        result = live().baseline_now(workload)
    except ExplorerError:
        return None
    return result.median_us if result.check.correct else None
