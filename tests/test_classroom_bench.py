"""bench/classroom.py against a real server started here (no GPU): three students open
links and move knobs through Streamlit's websocket protocol, with no error; and against a
server with a stand-in GPU whose warm-up is slow, the latency still reaches the page."""
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import classroom  # bench/classroom.py (pytest's pythonpath)
import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(script: Path, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(script), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1"],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            if urllib.request.urlopen(f"{url}/_stcore/health", timeout=2).read() == b"ok":
                break
        except OSError:
            pass
        assert time.time() < deadline, "the server did not start"
        time.sleep(0.3)
    return server, url


@pytest.fixture(scope="module")
def server_url():
    server, url = start_server(ROOT / "app" / "main.py")
    yield url, server.pid
    server.terminate()
    server.wait(30)


def test_three_students_move_knobs_without_errors(server_url):
    url, pid = server_url
    report = classroom.run(url, students=3, seconds=20, think=2.0, want_latency=False, server_pid=pid)
    assert report["errors"] == []
    assert report["open_to_code"]["n"] == 3
    assert report["moves"] >= 6 and report["knob_to_code"]["n"] + report["refused"] == report["moves"]
    assert any(s["queue"] == "0 running, 0 waiting" for s in report["samples"])  # the observer read the Device page
    assert all(s["rss_mib"] > 0 for s in report["samples"])
    text = classroom.describe(report)
    assert "| knob → code |" in text and "0 errors" in text


def test_latency_reaches_the_page_after_a_slow_warm_up(tmp_path):
    # The page polls through fragment reruns while the GPU warms up; the load generator
    # must keep polling as a browser does, and the app must show the latency at the end.
    shutil.copytree(ROOT / "app", tmp_path / "app")
    shutil.copy(ROOT / "tests" / "stand_in_gpu_app.py", tmp_path / "app")
    server, url = start_server(tmp_path / "app" / "stand_in_gpu_app.py",
                               {"STAND_IN_WARM_UP_S": "8",
                                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"),
                                                                            os.environ.get("PYTHONPATH")]))})
    try:
        report = classroom.run(url, students=1, seconds=30, think=2.0, want_latency=True, server_pid=server.pid,
                               revisit_every=2)
    finally:
        server.terminate()
        server.wait(30)
    assert report["errors"] == []
    assert report["open_to_latency"]["n"] == 1 and report["open_to_latency"]["p50"] >= 8
    assert report["knob_to_latency"]["n"] >= 2 and report["moves_without_latency"] == 0
    assert report["knob_to_latency_revisit"]["n"] >= 1  # every second move went back to a measured setting


def test_overlapping_runs_are_counted_from_the_log(tmp_path):
    log = tmp_path / "runs.log"
    log.write_text("1 100 200 a x\n1 200 300 a x\n1 250 400 a x\n1 50 60 a x\n")
    assert classroom.overlapping_runs(str(log), since_ns=100) == (3, 1)


def test_percentiles_by_hand():
    p = classroom.percentiles([0.1, 0.2, 0.3, 0.4, 1.0])
    assert (p["n"], p["p50"], p["max"]) == (5, 0.3, 1.0)
    assert p["p95"] == 1.0


def test_goals_say_by_how_much_they_were_missed():
    report = {"knob_to_code": {"p95": 1.25}, "knob_to_latency": {"p95": None}, "open_to_code": {"p50": 0.5}}
    rows = classroom.goal_rows(report, {"knob_to_code.p95": 1.0, "knob_to_latency.p95": 3.0, "open_to_code.p50": 1})
    assert rows[2] == "| knob to code p95 ≤ 1 s | 1.250 s | **missed by 0.250 s** |"
    assert rows[3].endswith("| — | not measured |") and rows[4].endswith("| 0.500 s | met |")
