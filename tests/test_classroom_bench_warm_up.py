"""bench/classroom.py against a server with a stand-in GPU whose warm-up is slow: the page polls
through fragment reruns while the GPU warms up, and the latency still reaches it."""
import os
import shutil

import classroom  # bench/ (pytest's pythonpath)
import pytest
from test_classroom_bench import ROOT, start_server, stop_server

WARM_UP_S = 3  # the stand-in GPU's warm-up: the page polls through it for a few seconds
pytestmark = pytest.mark.waits


def test_latency_reaches_the_page_after_a_slow_warm_up(tmp_path):
    # The page polls through fragment reruns while the GPU warms up; the load generator
    # must keep polling as a browser does, and the app must show the latency at the end.
    shutil.copytree(ROOT / "app", tmp_path / "app")
    shutil.copy(ROOT / "tests" / "stand_in_gpu_app.py", tmp_path / "app")
    server, url = start_server(tmp_path / "app" / "stand_in_gpu_app.py",
                               {"STAND_IN_WARM_UP_S": str(WARM_UP_S),
                                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"),
                                                                            os.environ.get("PYTHONPATH")]))},
                               build_processes=False)  # the warm-up and the page's polling are what is tested
    try:
        # The latency after the warm-up (3.5 s in), then a move every 0.25-0.75 s, each waiting for its latency:
        # 6 moves in the 8 s (also with three busy loops on the two cores), three times the 2 the claims need.
        report = classroom.run(url, students=1, seconds=8, think=0.5, want_latency=True, server_pid=server.pid,
                               revisit_every=2)
    finally:
        stop_server(server)
    assert report["errors"] == []
    assert report["open_to_latency"]["n"] == 1 and report["open_to_latency"]["p50"] >= WARM_UP_S
    assert report["knob_to_latency"]["n"] >= 2 and report["moves_without_latency"] == 0
    assert report["knob_to_latency_revisit"]["n"] >= 1  # every second move went back to a measured setting
