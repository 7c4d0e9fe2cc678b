"""bench/classroom.py against the class server started here as a teacher starts it (``python -m
explorer serve``, no GPU): three students open links and move knobs through Streamlit's
websocket protocol, with no error; the launcher serves once warm and the server stops with it
(tests/test_classroom_bench_warm_up.py: a server with a stand-in GPU)."""
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import classroom  # bench/classroom.py (pytest's pythonpath)
import pytest

from explorer import serve

ROOT = Path(__file__).resolve().parent.parent
# A real server and a class in real time: handed out between the others (conftest.py), so that its waits
# overlap other tests.
pytestmark = pytest.mark.waits


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_environment(extra: dict | None = None) -> dict:
    """The environment of a server these tests start: this process's, but with the class server's build
    processes (the app tests' own server builds in the test process: conftest.py)."""
    env = {**os.environ, **(extra or {})}
    env.pop("EXPLORER_BUILD_WORKERS", None)
    return env


def start_server(script: Path, env: dict | None = None) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen(
        # The class server's command (`python -m explorer serve`): a stopped server ends its processes at
        # once, and no page run walks the loaded modules for a file watcher.
        serve.streamlit_command(port, "127.0.0.1", [], script),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=server_environment(env))
    url = f"http://127.0.0.1:{port}"
    serve.wait_healthy(url, server, timeout_s=60)
    return server, url


def stop_server(server: subprocess.Popen) -> None:
    """Cleanup: SIGTERM, and SIGKILL after 30 s (on a machine loaded by other tests a page still building
    can hold Streamlit's stop longer; the last test of this file checks the stop itself)."""
    server.terminate()
    try:
        server.wait(30)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait(10)


@pytest.fixture(scope="module")
def class_server():
    """The class server as a teacher starts it, ``python -m explorer serve``, once the launcher has said
    that it serves (after the first page ran inside it): (URL, the launcher, what it said)."""
    port = free_port()
    launcher = subprocess.Popen([sys.executable, "-m", "explorer", "serve", "--port", str(port), "--address",
                                 "127.0.0.1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=server_environment({"PYTHONUNBUFFERED": "1"}))
    said = ""
    while not said.startswith("Serving") and launcher.poll() is None:  # streamlit's own lines come first
        said = launcher.stdout.readline()
    try:
        yield f"http://127.0.0.1:{port}", launcher, said
    finally:
        stop_server(launcher)


@pytest.fixture(scope="module")
def server_url(class_server):
    """The server's URL and its app process (the launcher's child)."""
    url, _, said = class_server
    assert "the first page ran in" in said, said
    return url, classroom.server_process(url).pid


def test_three_students_move_knobs_without_errors(server_url):
    url, pid = server_url
    # A move a second or so: each student moves several times in 8 s.
    report = classroom.run(url, students=3, seconds=8, think=1.0, want_latency=False, server_pid=pid)
    assert report["errors"] == []
    assert report["open_to_code"]["n"] == 3
    assert report["moves"] >= 6 and report["knob_to_code"]["n"] + report["refused"] == report["moves"]
    assert any(s["queue"] == "0 running, 0 waiting" for s in report["samples"])  # the observer read the Device page
    assert all(s["rss_mib"] > 0 for s in report["samples"])
    text = classroom.describe(report)
    assert "| knob → code |" in text and "0 errors" in text


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


def test_a_class_opening_the_same_link_at_once_is_its_own_phase(server_url):
    url, pid = server_url
    # The students open the link together after classroom.CONNECT_S and their processes' start (9 s);
    # the rest is the time to open it.
    report = classroom.run(url, students=4, seconds=15, think=2.0, want_latency=False, links=("dw-blog-final-96",),
                           same_link=True, processes=2)  # two processes of two students each
    assert report["errors"] == [] and report["same_link"] == "dw-blog-final-96"
    assert report["open_to_code"]["n"] == 4
    assert classroom.describe(report).startswith("All 4 students opened `dw-blog-final-96` at the same moment")
    assert report["limited_by"]  # the observer sampled the server's processes
    assert any(s["page_cpu"] and s["page_cpu"].endswith(" ms") for s in report["samples"])


def test_the_server_is_found_by_its_port_or_below_a_wrapper(server_url):
    url, pid = server_url
    assert classroom.server_process(url).pid == pid
    assert classroom.server_process(url, os.getpid()).pid == pid  # this test process started it: a wrapper


def test_lessons_and_links_choose_the_steps_students_open():
    assert classroom.chosen_links([], None) == classroom.LINKS
    assert classroom.chosen_links(["conv2d_modern"], "dw-blog-final-96")[0] == "dw-blog-final-96"
    assert "conv2d-modern-async" in classroom.chosen_links(["conv2d_modern"], None)
    with pytest.raises(classroom.ExplorerError, match="No lesson named 'nope'"):
        classroom.chosen_links(["nope"], None)


def test_gpu_busy_and_what_limited_the_class():
    assert classroom.gpu_busy([(0, 500_000_000), (600_000_000, 1_000_000_000)], 2.0) == 0.45
    assert classroom.limiter(0.95, 3.0, 16, 0.5).startswith("the app process (0.95 cores")
    assert classroom.limiter(0.5, 3.0, 16, 0.93) == "the GPU (a kernel on it 93% of the time)"
    assert classroom.limiter(0.5, 15.0, 16, 0.2).startswith("the build and compile processes (15.0 of 16 cores)")
    assert classroom.limiter(0.2, 1.0, 16, None).startswith("none saturated")


def test_the_launcher_serves_once_warm_and_takes_the_server_with_it_when_stopped(class_server):
    """Last in this file: it stops the class server the tests above shared."""
    url, launcher, said = class_server
    port = url.rsplit(":", 1)[1]
    assert said.startswith(f"Serving http://127.0.0.1:{port}: healthy after"), said
    assert "the first page ran in" in said and "the warm-up has started" in said, said
    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as answer:
        assert answer.status == 200
    launcher.send_signal(signal.SIGTERM)
    assert launcher.wait(30) is not None
    time.sleep(0.5)
    with pytest.raises(OSError):  # the server went with its launcher
        urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
