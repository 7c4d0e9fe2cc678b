"""The app's handle on the class server (explorer/server/api.py): one ``Server`` per app process
(``st.cache_resource``), shared by all its sessions, started on the first page view; builds and
measurements computed once each, the GPU warmed up in the background. Per-session state is
session.py's."""
from __future__ import annotations

import logging
import os
import sys

# Whole before any page runs: Plotly and Streamlit look pandas up in sys.modules, and a page that
# did so while another session's first page was importing it got a half-made module
# ("partially initialized module 'pandas' has no attribute 'Series'").
import pandas  # noqa: F401
import streamlit as st

from explorer.build import Build, Spec
from explorer.cuda_env import SOURCE_ONLY
from explorer.errors import ExplorerError
from explorer.lessons import first_lesson_specs, lesson_specs
from explorer.presets import default_spec
from explorer.server.api import Server, open_server


@st.cache_resource(show_spinner=False, on_release=lambda server: server.close())
def server() -> Server:
    """The app process's one server, started on the first script run of the first session."""
    # This process lowers and generates CUDA source (and runs the analyses); the one binary
    # compile of a kernel happens in the compile processes or the measuring worker.
    os.environ[SOURCE_ONLY] = "1"
    log_to_stderr()
    # An app process of a server of several measures through the server's measuring service.
    started = open_server()
    started.start(default_spec(), build_ahead=lesson_specs(), measure_ahead=first_lesson_specs() + lesson_specs())
    return started


def stop() -> None:
    """End the server's processes (build, compile, diagnosing) and threads once Streamlit has
    stopped; without this the interpreter's exit waits for the work they are doing."""
    server.clear()


class _Stderr(logging.StreamHandler):
    """A line to the process's standard error as it is when the line is written (a handler keeps the
    stream it was made with: under a test's capture that stream is closed once the test ends, while the
    server the test started still writes)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def log_to_stderr() -> None:
    """The library's notes (when each warm-up step ended) in the server's log."""
    logger = logging.getLogger("explorer")
    if not logger.handlers:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("%(asctime)s %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def build(spec: Spec, target: str) -> Build:
    """``spec`` built for ``target`` once for the whole server (raises ExplorerError)."""
    return server().build(spec, target)


def board_measure(spec: Spec, *, target: str = "auto", remote=None, on_wait=None):
    """A leaderboard submission, measured through the server's one queue (a setting just
    measured for the Explorer is not timed again)."""
    return server().measure_now(spec, target, remote, on_wait=on_wait)


def board_pytorch(workload) -> float | None:
    """PyTorch's µs for a board, measured once for the whole server; None where PyTorch
    cannot run the workload."""
    try:
        result = server().baseline_now(workload)
    except ExplorerError:
        return None
    return result.median_us if result.check.correct else None
