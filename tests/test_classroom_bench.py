"""bench/classroom.py against the class server started here as a teacher starts it (``python -m
explorer serve``, no GPU): three students open links and move knobs through Streamlit's
websocket protocol, with no error; the launcher serves once warm and the server stops with it
(tests/test_classroom_bench_warm_up.py: a server with a stand-in GPU)."""
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import classroom  # bench/ (pytest's pythonpath)
import classroom_logs
import classroom_page
import classroom_report
import classroom_sampler
import classroom_students
import psutil
import pytest
from websockets.sync.server import serve as serve_websockets

from explorer.errors import ExplorerError
from explorer.server import launcher

ROOT = Path(__file__).resolve().parent.parent
# A real server and a class in real time: handed out between the others (conftest.py), so that its waits
# overlap other tests.
pytestmark = pytest.mark.waits


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_environment(extra: dict | None = None, build_processes: bool = True) -> dict:
    """The environment of a server these tests start: this process's, but with the class server's build
    processes (the app tests' own server builds in the test process: conftest.py), unless the server's
    tests do not need them (``build_processes=False``: it builds in its own process, as conftest.py's)."""
    env = {**os.environ, **(extra or {})}
    if build_processes:
        env.pop("EXPLORER_BUILD_WORKERS", None)
    return env


def start_server(script: Path, env: dict | None = None, build_processes: bool = True) -> tuple[subprocess.Popen, str]:
    port = free_port()
    server = subprocess.Popen(
        # The class server's command (`python -m explorer serve`): a stopped server ends its processes at
        # once, and no page run walks the loaded modules for a file watcher.
        launcher.streamlit_command(port, "127.0.0.1", [], script),
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=server_environment(env, build_processes))
    url = f"http://127.0.0.1:{port}"
    launcher.wait_healthy(url, server, timeout_s=60)
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
    launched = subprocess.Popen([sys.executable, "-m", "explorer", "serve", "--port", str(port), "--address",
                                 "127.0.0.1"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                # The build process highlights no other code view ahead (as a server of several
                                # app processes, launcher.class_environment): no student here opens another tab,
                                # and tests/test_server.py tests the highlighting ahead.
                                env=server_environment({"PYTHONUNBUFFERED": "1", "EXPLORER_HIGHLIGHT_AHEAD": "0"}))
    said = ""
    while not said.startswith("Serving") and launched.poll() is None:  # streamlit's own lines come first
        said = launched.stdout.readline()
    try:
        yield f"http://127.0.0.1:{port}", launched, said
    finally:
        stop_server(launched)


@pytest.fixture(scope="module")
def server_url(class_server):
    """The server's URL and its top process (the launcher, above the app process that listens)."""
    url, _, said = class_server
    assert "the first page ran in" in said, said
    return url, classroom_sampler.server_process(url).pid


def test_three_students_move_knobs_without_errors(server_url):
    url, pid = server_url
    # A move a second or so: each student moves several times in 8 s.
    report = classroom.run(url, students=3, seconds=8, think=1.0, want_latency=False, server_pid=pid)
    assert report["errors"] == []
    assert report["open_to_code"]["n"] == 3
    assert report["moves"] >= 6 and report["knob_to_code"]["n"] + report["refused"] == report["moves"]
    assert any(s["queue"] == "0 running, 0 waiting" for s in report["samples"])  # the observer read the Device page
    assert all(0 < s["rss_mib"] < s["rss_server_mib"] for s in report["samples"])  # the app process, the launcher's
    assert all(len(s["cores"]["app"]) == 1 for s in report["samples"])  # one app process, the launcher a worker
    assert report["intended_moves_per_s"] == 3 / (1.0 + 1.0)
    assert [g["pid"] for g in report["generator"]] == [os.getpid()] and report["generator"][0]["samples"] >= 3
    text = classroom_report.describe(report)
    assert "| knob → code |" in text and "0 errors" in text and "Demand: 1.5 moves/s intended" in text


def test_overlapping_runs_are_counted_from_the_log(tmp_path):
    log = tmp_path / "runs.log"
    log.write_text("1 100 200 a x\n1 200 300 a x\n1 250 400 a x\n1 50 60 a x\n")
    assert classroom_logs.overlapping_runs(str(log), since_ns=100) == (3, 1)
    # Two GPUs, a worker on each: runs at once on two GPUs are not an overlap, on one they are.
    log.write_text("1 100 200 a x gpu=0 | load=1\n2 150 250 a x gpu=1 | load=1\n2 240 300 a x gpu=1 | load=1\n")
    assert classroom_logs.overlapping_runs(str(log), since_ns=100) == (3, 1)
    assert classroom_logs.gpu_busy(classroom_logs.kernel_runs(str(log), 100), 200e-9, gpus=2) == (100 + 100 + 60) / 400


def test_the_workers_phases_and_the_jobs_stages_by_hand(tmp_path):
    runs = tmp_path / "runs.log"
    runs.write_text("1 50 60 a x | load=9.0\n"  # before the class: not counted
                    "1 100 200 a x | load=2.0 upload=1.0 check_and_time=30.0\n"
                    "1 200 300 a x | load=4.0 upload=1.0 check_and_time=50.0 graph=10.0\n")
    assert classroom_logs.run_phases(str(runs), since_ns=100) == {"load": 3.0, "upload": 1.0, "check_and_time": 40.0,
                                                               "graph": 5.0}
    jobs = tmp_path / "jobs.log"  # asked compiled started finished kind budget outcome template
    jobs.write_text("5.0 6.0 7.0 8.0 student quick ok matmul\n"  # before the class
                    "10.0 11.0 13.0 13.5 student quick ok matmul\n"
                    "10.0 10.5 14.0 14.1 student full ok matmul\n"
                    "10.0 - - 11.0 student full error matmul\n"  # its compile failed: no stages
                    "12.0 12.0 15.0 15.75 background full ok matmul\n"
                    "13.0 - 16.0 16.25 again full ok matmul\n")
    stages = classroom_logs.job_stages(str(jobs), since_s=10.0)
    assert (stages["compile"]["n"], stages["compile"]["p50"], stages["compile"]["max"]) == (2, 0.75, 1.0)
    assert (stages["wait_for_gpu"]["p50"], stages["wait_for_gpu"]["max"]) == (2.75, 3.5)
    assert stages["on_gpu"]["max"] == 0.5
    assert stages["others"] == {"n": 2, "gpu_s": 1.0}


def test_the_compiles_stages_by_hand(tmp_path):
    compiles = tmp_path / "compiles.log"  # asked started built generated exported cpu cubins build outcome template
    compiles.write_text("1.0 2.0 2.0 3.0 3.1 0.5 1 0 0 kept ok matmul\n"  # before the class
                        "10.0 11.0 11.5 12.5 12.7 0.75 1 0 0 kept ok matmul\n"
                        "10.0 13.0 13.0 13.25 13.35 0.25 0 1 0 here ok matmul\n"
                        "10.0 10.0 10.0 - - 0.0 0 0 0 - error matmul\n")  # a refused build: no code
    report = classroom_logs.compile_stages(str(compiles), since_s=10.0)
    stages = report["stages"]
    assert (stages["for_a_process"]["n"], stages["for_a_process"]["max"]) == (3, 3.0)
    assert stages["for_the_page_build"]["max"] == 0.5
    assert (stages["generating"]["n"], stages["generating"]["p50"]) == (2, 0.625)
    assert round(stages["exporting"]["max"], 6) == 0.2
    assert report["cpu_s_total"] == 1.0 and report["cubins"] == {"compiled": 1, "read": 1, "waited": 0}
    assert report["builds"] == {"kept": 1, "here": 1, "-": 1} and report["outcomes"] == {"ok": 2, "error": 1}
    text = classroom_report.describe(report_of(compile_stages=report))
    assert ("Compiles (3, the compile processes' log): waiting for a compile process p50 1.00 s, p95 3.00 s; "
            "waiting for the page's build p50 0.00 s, p95 0.50 s; generating the code (NVRTC) p50 0.62 s") in text
    assert "Binaries: 1 compiled, 1 read from the disk, 0 waited for" in text


def test_percentiles_by_hand():
    p = classroom_logs.percentiles([0.1, 0.2, 0.3, 0.4, 1.0])
    assert (p["n"], p["p50"], p["max"]) == (5, 0.3, 1.0)
    assert p["p95"] == 1.0


def test_goals_say_by_how_much_they_were_missed():
    report = {"knob_to_code": {"p95": 1.25}, "knob_to_latency": {"p95": None}, "open_to_code": {"p50": 0.5}}
    rows = classroom_report.goal_rows(report, {"knob_to_code.p95": 1.0, "knob_to_latency.p95": 3.0,
                                               "open_to_code.p50": 1})
    assert rows[2] == "| knob to code p95 ≤ 1 s | 1.250 s | **missed by 0.250 s** |"
    assert rows[3].endswith("| — | not measured |") and rows[4].endswith("| 0.500 s | met |")


def test_a_class_opening_the_same_link_at_once_is_its_own_phase(server_url, monkeypatch):
    url, pid = server_url
    # No CUDA here (tests/README.md, the test suite):
    monkeypatch.setattr(classroom_students, "START_METHOD", "fork")
    # Forked, the load processes import nothing: their students connect at once (a page load and a websocket).
    monkeypatch.setattr(classroom, "PROCESS_START_S", 0.0)
    monkeypatch.setattr(classroom, "CONNECT_S", 2.0)
    # The students open the link together after 2 s; the other 4 s are the time to open it (under a tenth of a
    # second on a quiet machine). They think a minute before a move, so none moves a knob in the 6 s: the opening
    # is the phase under test (each move is a build and a page run on the server's cores;
    # test_three_students_move_knobs_without_errors moves knobs).
    report = classroom.run(url, students=4, seconds=6, think=60.0, want_latency=False, links=("dw-blog-final-96",),
                           same_link=True, processes=2)  # two processes of two students each
    assert report["errors"] == [] and report["same_link"] == "dw-blog-final-96"
    assert report["open_to_code"]["n"] == 4 and report["moves"] == 0
    assert classroom_report.describe(report).startswith("All 4 students opened `dw-blog-final-96` at the same moment")
    assert report["limited_by"]  # the observer sampled the server's processes
    assert len(report["generator"]) == 2 and os.getpid() not in [g["pid"] for g in report["generator"]]
    assert any(s["page_cpu"] and s["page_cpu"].endswith(" ms") for s in report["samples"])


def test_the_server_is_found_by_its_port_or_below_a_wrapper(server_url):
    url, pid = server_url
    assert classroom_sampler.server_process(url).pid == pid
    assert classroom_sampler.server_process(url, os.getpid()).pid == pid  # this test process started it: a wrapper


def test_lessons_and_links_choose_the_steps_students_open():
    assert classroom.chosen_links([], None) == classroom.LINKS
    assert classroom.chosen_links(["conv2d_modern"], "dw-blog-final-96")[0] == "dw-blog-final-96"
    assert "conv2d-modern-async" in classroom.chosen_links(["conv2d_modern"], None)
    with pytest.raises(ExplorerError, match="No lesson named 'nope'"):
        classroom.chosen_links(["nope"], None)


def samples_of(*cores: dict, every: float = 2.0) -> list[dict]:
    """Server samples every ``every`` s from 0, with these cores by part."""
    return [{"t": (i + 1) * every, "since": i * every, "cores": c} for i, c in enumerate(cores)]


def test_gpu_busy_and_what_limited_the_class():
    assert classroom_logs.gpu_busy([(0, 500_000_000), (600_000_000, 1_000_000_000)], 2.0) == 0.45
    # The GPU: 1.9 s of kernels in the first 2 s, none in the next: saturated in half of the samples.
    runs = [(0, 1_900_000_000)]
    quiet = {"app": [0.2], "workers": 1.0}
    parts = classroom_sampler.saturation(samples_of(quiet, quiet), 8, runs)
    assert parts["gpu"]["share"] == 0.5 and classroom_sampler.limits(parts) == ["gpu"]
    assert classroom_report.limiter(parts).startswith("the GPU busy ≥ 90% of the time in 50% of samples")
    # The workers: 7 cores of the 7 that an 8-core machine leaves beside one app process, in 1 sample of 4.
    parts = classroom_sampler.saturation(samples_of({"app": [0.2], "workers": 6.3}, quiet, quiet, quiet), 8)
    assert parts["workers"]["capacity"] == 7 and parts["workers"]["share"] == 0.25
    assert classroom_report.limiter(parts).startswith("the workers at ≥ 90% of 7 cores in 25% of samples")
    # The measuring service and the proxy: one core, and the machine's.
    parts = classroom_sampler.saturation(samples_of({**quiet, "measuring": 0.95, "proxy": 7.0}), 8)
    assert classroom_sampler.limits(parts) == ["measuring"] and parts["proxy"]["capacity"] == 8
    assert parts["workers"]["capacity"] == 6  # 8 less an app process and the measuring service


def test_an_app_process_at_one_core_half_the_time_is_the_limit_though_its_mean_is_lower():
    samples = samples_of(*({"app": [cores], "workers": 1.0} for cores in (0.95, 0.5, 0.92, 0.3)))
    parts = classroom_sampler.saturation(samples, 8)
    assert parts["app"]["mean"] == pytest.approx(0.6675) and parts["app"]["mean"] < 0.9  # the run's mean says no
    assert parts["app"]["share"] == 0.5 and classroom_sampler.limits(parts) == ["app"]
    text = classroom_report.limiter(parts)
    assert text.startswith("app processes at ≥ 90% of a core in 50% of samples (1 of them, mean 0.67 cores each)")
    # Two app processes: each (sample, process) pair counts, 1 of 4 here.
    parts = classroom_sampler.saturation(samples_of({"app": [0.95, 0.2], "workers": 1.0}, {"app": [0.3, 0.2]}), 8)
    assert (parts["app"]["samples"], parts["app"]["share"], parts["app"]["processes"]) == (4, 0.25, 2)
    assert parts["workers"]["capacity"] == 6 and classroom_sampler.limits(parts) == ["app"]


def test_a_quiet_run_names_no_limit():
    parts = classroom_sampler.saturation(samples_of(*({"app": [0.3], "workers": 0.5} for _ in range(4))), 8,
                                 [(0, 100_000_000)])
    assert classroom_sampler.limits(parts) == []
    assert classroom_report.limiter(parts).startswith("none saturated")
    assert classroom_sampler.saturation([{"t": 2.0, "since": 0.0, "cores": None}], 8) == {}  # no server sampled


def report_of(**fields) -> dict:
    """A report as ``run`` makes it, of a run without samples, with ``fields``."""
    empty = classroom_logs.percentiles([])
    return {"students": 3, "seconds": 60, "think_time_s": 4.0, "moves": 30, "refused": 0, "errors": [],
            "samples": [], **dict.fromkeys(("open_to_code", "open_to_latency", "knob_to_code", "knob_to_latency",
                                            "knob_to_latency_new", "knob_to_latency_revisit"), empty), **fields}


def test_the_demand_the_class_meant_beside_what_it_made():
    assert classroom_report.demand(100, 5.0, 1.0, 0, 10)["intended_moves_per_s"] == pytest.approx(100 / 6)
    # 3 students, a move every 4 s + 1 s: 0.6 moves/s meant; 30 moves in 60 s made: 0.5 (83%).
    made = classroom_report.demand(3, 4.0, 1.0, 30, 60.0)
    assert made == {"intended_reply_s": 1.0, "playing_s": 60.0, "intended_moves_per_s": 0.6,
                    "delivered_moves_per_s": 0.5}
    text = classroom_report.describe(report_of(**made))
    assert "Demand: 0.6 moves/s intended (3 students, a move every ~4 s + 1 s for its code), 0.5 delivered (83%)" \
        in text


def test_a_saturated_load_generator_process_makes_the_run_no_verdict():
    calm = {"pid": 11, "cores": [0.2, 0.3, 0.1, 0.2]}
    # 1 sample in 4 at ≥ 0.9:
    load = classroom_sampler.generator_load([calm, {"pid": 12, "cores": [0.95, 0.5, 0.4, 0.3]}])
    assert load["generator_limited"] and [g["busy_share"] for g in load["generator"]] == [0.0, 0.25]
    assert load["generator"][1]["mean_cores"] == pytest.approx(0.5375)
    text = classroom_report.describe(report_of(**load))
    assert text.splitlines()[2].startswith("Not a verdict: the load generator was at ≥ 90% of a core in 25% of "
                                           "its samples or more (process 2 in 25%)")
    assert "process 1 0.20 cores mean, at ≥ 90% of a core in 0% of 4 samples" in text
    below = classroom_sampler.generator_load([calm, {"pid": 12, "cores": [0.95, 0.5, 0.4, 0.3, 0.2]}])  # 1 in 5
    assert not below["generator_limited"] and "Not a verdict" not in classroom_report.describe(report_of(**below))


def test_own_cpu_samples_this_process():
    with classroom_sampler.own_cpu(every=0.1) as cores:
        until = time.process_time() + 0.5
        while time.process_time() < until:  # a core busy
            pass
    # The samples add up to the CPU the loop used (0.5 s, sampled every 0.1 s: the part before the sampling
    # thread's first reading and the last part of a sample may be missed: 0.35 s of the loop once gave two
    # samples, 0.19 s), however the machine shares its cores out meanwhile.
    assert len(cores) >= 2 and sum(cores) * 0.1 > 0.2


@pytest.mark.parametrize(("cmdline", "role"), [
    (["/venv/bin/python", "-m", "explorer", "serve", "--app-processes", "2"], "workers"),  # the launcher
    (["caddy", "run", "--config", "/tmp/serve/Caddyfile"], "proxy"),
    (["/usr/local/bin/caddy", "reverse-proxy"], "proxy"),
    (["/venv/bin/python", "-m", "explorer.server.service", "--port", "9000"], "measuring"),
    (["/venv/bin/python", "-m", "app.launch", "run", "/repo/app/main.py", "--server.port", "8502"], "app"),
    (["/venv/bin/streamlit", "run", "app/main.py"], "app"),
    (["python", "-m", "streamlit", "run", "app/main.py"], "app"),
    (["/venv/bin/python", "-m", "tvm.exec.popen_worker", "7", "8"], "workers"),
    (["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main()", "--multiprocessing-fork"],
     "workers"),
    ([], "workers"),  # not ours to read
])
def test_each_process_of_the_server_has_a_role_by_its_command_line(cmdline, role):
    assert classroom_sampler.role_of(cmdline) == role


def test_the_launcher_is_known_by_its_command_line():
    assert classroom_sampler.is_launcher(["/venv/bin/python", "-m", "explorer", "serve", "--port", "8501"])
    assert classroom_sampler.is_launcher(["timeout", "600", "tvm-explorer", "serve"])
    assert not classroom_sampler.is_launcher(["/venv/bin/python", "-m", "app.launch", "run", "app/main.py"])
    assert not classroom_sampler.is_launcher(["python", "-m", "pytest", "tests/test_classroom_bench.py"])


class FakeProcess:
    """What psutil says of a process, as far as the server's sampling asks."""

    def __init__(self, pid, parent, cmdline, mib=1, cpu=0.0, started=0.0, below=(), name="python"):
        self.pid, self.parent, self.command, self.mib, self.cpu, self.started = pid, parent, cmdline, mib, cpu, started
        self.below, self.process_name = list(below), name

    def name(self):
        return self.process_name

    def children(self, recursive=False):
        return [p for child in self.below for p in [child, *(child.children(True) if recursive else [])]]

    def ppid(self):
        return self.parent

    def cmdline(self):
        return self.command

    def create_time(self):
        return self.started

    def cpu_times(self):
        return SimpleNamespace(user=self.cpu, system=0.0)

    def memory_info(self):
        return SimpleNamespace(rss=self.mib * 2**20)


def several_process_server():
    """A launcher over a proxy, the measuring service (with its worker), and two app processes (one with a
    pool worker and a forked child, which runs under its parent's command line)."""
    app = ["python", "-m", "app.launch", "run", "app/main.py"]
    first = FakeProcess(4, 1, app, mib=100, below=[FakeProcess(7, 4, ["python", "-m", "tvm.exec.popen_worker"], 20,
                                                               name="build worker"),
                                                   FakeProcess(8, 4, app, mib=30)])
    return FakeProcess(1, 0, ["python", "-m", "explorer", "serve", "--app-processes", "2"], mib=5, below=[
        FakeProcess(2, 1, ["caddy", "run"], mib=10),
        FakeProcess(3, 1, ["python", "-m", "explorer.server.service"], mib=50,
                    below=[FakeProcess(6, 3, ["python", "-m", "tvm.exec.popen_worker"], 40,
                                       name="measure worker")]),
        first, FakeProcess(5, 1, app, mib=200)])


def test_the_whole_server_is_sampled_by_part(monkeypatch):
    root = several_process_server()
    tree = classroom_sampler.server_tree(root)
    assert {m.pid: role for m, role, _ in tree} == {1: "workers", 2: "proxy", 3: "measuring", 4: "app", 5: "app",
                                                    6: "workers", 7: "workers", 8: "workers"}
    # By part: the app processes 100 + 200; the workers the launcher 5, the pool workers 40 and 20 and the fork 30.
    assert classroom_sampler.memory_sample(tree) == {"rss_mib": 300, "rss_with_workers_mib": 350, "rss_server_mib": 455,
                                             "rss_parts_mib": {"app": 300, "measuring": 50, "proxy": 10,
                                                               "workers": 95},
                                             # The workers by the names the server gives them; the launcher and
                                             # the fork (5 + 30) are not named.
                                             "rss_kinds_mib": {"build": 20, "measure": 40, "other": 35},
                                             # no PSS where a process's cannot be read (a fake's)
                                             "pss_server_mib": None, "pss_parts_mib": None, "pss_kinds_mib": None}
    clock = iter([10.0, 12.0])
    monkeypatch.setattr(classroom_sampler.time, "time", lambda: next(clock))
    queued = {1: 5.0, 6: 0.0, 7: 1.0, 8: 2.0}  # seconds each worker has waited for a core
    monkeypatch.setattr(classroom_sampler, "run_queue_s", lambda pid: queued.get(pid))
    previous: dict = {}
    assert classroom_sampler.cpu_sample(tree, previous) is None  # the first reading
    by_pid = {m.pid: m for m, _, _ in tree}
    for pid, cpu in {2: 0.2, 3: 1.0, 4: 1.9, 5: 0.4, 6: 1.0, 7: 3.0}.items():
        by_pid[pid].cpu += cpu  # CPU seconds over the next 2 s
    queued.update({6: 0.5, 7: 1.2})  # the measuring worker waited 0.5 s for a core, the build worker 0.2 s
    late = FakeProcess(9, 4, ["python", "-m", "tvm.exec.popen_worker"], cpu=1.0, started=11.0,
                       name="build worker")  # new since
    cores = classroom_sampler.cpu_sample([*tree, (late, "workers", 4)], previous)
    # By kind: 3 + 1 CPU seconds of builds and 1 of the measuring worker in 2 s.
    assert cores == {"app": [0.95, 0.2], "proxy": 0.1, "measuring": 0.5, "workers": 2.5,
                     "kinds": {"build": 2.0, "measure": 0.5, "other": 0.0},
                     "queued": pytest.approx({"build": 0.1, "measure": 0.25, "other": 0.0})}


def test_the_report_gives_the_workers_by_kind():
    samples = [{"rss_kinds_mib": {"build": 300, "diagnose": 500}, "cores": None},
               {"rss_kinds_mib": {"build": 320, "diagnose": 900}, "cores": {"kinds": {"build": 3.0}}},
               {"rss_kinds_mib": {"build": 340, "diagnose": 1100}, "cores": {"kinds": {"build": 1.0, "diagnose": 1.0}}}]
    assert classroom_report.worker_kinds_text(samples) == [
        "Workers by kind, mean cores; resident memory start → end (MiB): build 2.00 cores, 300 → 340; "
        "diagnose 0.50 cores, 500 → 1100."]
    assert classroom_report.worker_kinds_text([{"rss_kinds_mib": None}]) == []
    samples[2]["cores"]["queued"] = {"build": 0.5, "diagnose": 2.0}
    assert classroom_report.worker_kinds_text(samples)[1] == (
        "Workers by kind, waiting for a core while ready to run (process-seconds per second, mean): build 0.50; "
        "diagnose 2.00.")


def test_a_server_process_is_named_for_what_it_does():
    """The name the pools give their processes is the one the bench reads (``ps -o comm``)."""
    script = ("from explorer.processes import name_process; import psutil; "
              "name_process('diagnose worker of many'); print(psutil.Process().name())")
    named = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, cwd=ROOT)
    assert named.stdout.strip() == "diagnose worker"  # Linux keeps 15 bytes
    assert classroom_sampler.worker_kind(psutil.Process(os.getpid())) == "other"


def test_the_launcher_serves_once_warm_and_takes_the_server_with_it_when_stopped(class_server):
    """Last in this file: it stops the class server the tests above shared."""
    url, launched, said = class_server
    port = url.rsplit(":", 1)[1]
    assert said.startswith(f"Serving http://127.0.0.1:{port}: healthy after"), said
    assert "the first page ran in" in said and "the warm-up has started" in said, said
    with urllib.request.urlopen(f"{url}/_stcore/health", timeout=5) as answer:
        assert answer.status == 200
    # The launcher only starts and watches the server's processes: it loaded none of TVM's libraries.
    loaded = [m.path for m in psutil.Process(launched.pid).memory_maps()]
    assert loaded and not [path for path in loaded if "libtvm" in path]
    launched.send_signal(signal.SIGTERM)
    assert launched.wait(30) is not None
    time.sleep(0.5)
    with pytest.raises(OSError):  # the server went with its launcher
        urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)


def test_the_launcher_refuses_a_server_setting_it_cannot_take_before_the_server_starts(monkeypatch, capsys):
    monkeypatch.setenv("EXPLORER_DIAGNOSE", "yes")
    monkeypatch.setattr(launcher, "serve", lambda *args: pytest.fail("the server was started"))
    assert launcher.main(["--port", "8502"]) == 2  # python -m explorer serve --port 8502
    assert capsys.readouterr().err == "error: EXPLORER_DIAGNOSE must be 1 (on) or 0 (off), not 'yes'.\n"


@pytest.mark.parametrize("cookie", ["lb=app-2", None])
def test_a_page_sends_the_cookie_its_page_load_was_given_with_its_websocket(cookie):
    """Behind a proxy that keeps a browser on one app process by a cookie, the websocket goes where the page
    came from; a plain Streamlit server sets none, and the websocket goes without."""
    seen = {}

    def answer(connection, request):
        if request.path == "/_stcore/stream":
            seen["cookie"] = request.headers.get("Cookie")
            return None  # the websocket
        seen["page"] = request.path
        response = connection.respond(200, "the page\n")
        if cookie:
            response.headers["Set-Cookie"] = f"{cookie}; Path=/; HttpOnly"
        return response

    with serve_websockets(lambda websocket: None, "127.0.0.1", 0, process_request=answer,
                          subprotocols=["streamlit"]) as server:
        threading.Thread(target=server.serve_forever, daemon=True).start()
        port = server.socket.getsockname()[1]
        classroom_page.Page(f"http://127.0.0.1:{port}", timeout=5, query="preset=dw-blog-final-96").close()
        server.shutdown()
    assert seen == {"page": "/?preset=dw-blog-final-96", "cookie": cookie}


def test_a_lost_move_records_which_runs_started_and_what_the_page_said():
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    page_run, part_run, alert, finished = ForwardMsg(), ForwardMsg(), ForwardMsg(), ForwardMsg()
    page_run.new_session.SetInParent()
    part_run.new_session.SetInParent()
    part_run.metadata.run.fragment_ids.append("latency")
    alert.delta.new_element.alert.body = "Waiting for the GPU: 3 measurement(s) ahead of this one."
    finished.script_finished = ForwardMsg.FINISHED_SUCCESSFULLY
    assert [classroom_page.message_kind(m, 1.5) for m in (page_run, part_run, alert, finished)] == [
        "1.50 new_session:page", "1.50 new_session:fragment",
        "1.50 delta:alert 'Waiting for the GPU: 3 measurement(s) ahead of this one.'",
        f"1.50 script_finished:{ForwardMsg.FINISHED_SUCCESSFULLY}"]


def test_every_error_comes_with_the_link_of_the_setting_that_caused_it(monkeypatch):
    """A move whose page says an error (a wrong kernel, an exception) is reported with the link that opens
    the setting moved to, from the step the student opened; the report lists each with its link."""
    from urllib.parse import parse_qs, urlparse

    from explorer import urlstate
    from explorer.presets import get_preset

    step = get_preset("dw-blog-final-96").spec
    moved = step.with_knobs(num_thread_x=4)
    said = iter([(0.1, None, False, ["dw-blog: WRONG, 7 of 9216 elements differ; not timed."], ""),
                 (0.1, None, False, [], "")])
    monkeypatch.setattr(classroom_students, "watch", lambda *args: next(said))
    me = classroom_students.Student(0, "dw-blog-final-96")
    page = SimpleNamespace(rerun=lambda *args: None)
    playing = classroom_students.Playing("http://class:8501", me, page, think=1.0, want_latency=True, seen=set())
    playing.move((moved, "widget", "4", "8"))
    (error,) = me.errors
    assert error["error"].startswith("dw-blog: WRONG")
    link = urlparse(error["link"])
    assert f"{link.scheme}://{link.netloc}" == "http://class:8501"
    assert urlstate.from_query(parse_qs(link.query)) == (moved, "dw-blog-final-96")  # the setting, not the step
    playing.error("ConnectionClosedError: the server went away")  # an error of the run: the setting on the page
    assert me.errors[1]["link"] == classroom_students.link_of("http://class:8501", moved, "dw-blog-final-96")
    text = classroom_report.describe(report_of(errors=[error, error, me.errors[1]]))
    assert "3 errors." in text
    assert f"- dw-blog: WRONG, 7 of 9216 elements differ; not timed. (2×): {error['link']}" in text
    assert "Errors (3; 2 of a setting each), with the link of the setting that caused each:" in text
