"""Remote measurement end to end on loopback, with target llvm: a TVM RPC tracker started here
and two servers started with ``python -m explorer.measure.server`` under one key. Kernels are
built here, uploaded, loaded, checked and timed on a server; a kernel that segfaults ends only
its session and the server keeps serving; both servers get work and give the same results, and
killing one in the middle of a measurement loses no request (the session is run again on the
other)."""
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import tvm
from test_measure_worker import WORKLOAD, correct_module, segfault, wrong_at_2_3_module
from tvm.rpc.tracker import PopenTrackerServerState, Tracker

from explorer.classroom import Store, submit
from explorer.measure import KernelCrashed, MeasureSettings, NoDevice, Remote, RemoteError, measure, measure_module
from explorer.measure import remote as remote_module
from explorer.measure import server as server_module
from explorer.measure.remote import last_attempts, last_server, measure_remote, server_count
from explorer.measure.worker import Trial
from explorer.presets import get_preset
from explorer.workloads import Matmul

# Not marked waits: the tracker, its servers and their sessions keep about a core busy for the file's
# time (conftest.py's LONG).

KEY = "explorer-class-test"
ROOT = Path(__file__).resolve().parent.parent
FAST = MeasureSettings(repeats=3, time_limit_s=10, roofline=False)
WITH_ROOFLINE = MeasureSettings(repeats=3, time_limit_s=5)  # and the remote device's ceilings, measured there
# 1.5 s and more of timing on the server (a budget past the ten repeats): a server killed 0.5 s
# after both sessions opened is killed inside its run; each second of it is a core kept busy
SLOW = MeasureSettings(repeats=10, min_repeat_us=150_000, time_limit_s=60, roofline=False, timing_budget_ms=60_000)
BIG = Matmul(m=128, n=128, k=128)  # long enough per launch for the repeat time to be met


def start_server(tracker_port: int, first_port: int) -> subprocess.Popen:
    # Without a GPU here the sessions are forked, not spawned: a spawned session imports TVM again before it
    # runs its CPU kernel (a second of CPU each, 11 of them). With one they are spawned, as a GPU server's must be.
    sessions = {} if tvm.cuda(0).exist else {server_module.SESSIONS: "fork"}
    return subprocess.Popen(
        [sys.executable, "-m", "explorer.measure.server", "--tracker", f"127.0.0.1:{tracker_port}", "--key", KEY,
         "--host", "127.0.0.1", "--port", str(first_port), "--port-end", str(first_port + 49), "--silent"],
        cwd=ROOT, start_new_session=True,  # its own process group: the server and its session processes
        env={**os.environ, **sessions})


def kill(server: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait()


@pytest.fixture(scope="module")
def two_servers():
    """A tracker and two GPU servers under one key, shared by this module's tests in file order
    (starting them is most of the module's time): the test that kills a server comes after the
    ones that need both, and the tests after it need only one."""
    # TVM's tracker in a thread of this process (the state TVM's Tracker makes in the process it starts for
    # it): the servers and their sessions are the processes under test; a process for the tracker imported
    # TVM again (0.8 CPU-s).
    tracker = PopenTrackerServerState(host="127.0.0.1", port=9500, port_end=9590, silent=True)
    remote = Remote("127.0.0.1", tracker.port, KEY)
    servers = [start_server(tracker.port, 9600), start_server(tracker.port, 9650)]
    try:
        deadline = time.monotonic() + 60
        while server_count(remote) < 2:
            assert all(s.poll() is None for s in servers), "an RPC server exited"
            assert time.monotonic() < deadline, "the RPC servers did not register with the tracker"
            time.sleep(0.2)
        yield remote, servers
    finally:
        for server in servers:
            kill(server)
        Tracker._stop_tracker(tracker)  # TVM's stop request, to this tracker: its thread ends
        tracker.thread.join(10)


def measure_in_threads(remote: Remote, count: int, settings: MeasureSettings, workload=WORKLOAD):
    """``count`` measurements at once; each gives (check, servers tried, last server)."""
    results, errors = [], []

    def one() -> None:
        try:
            trial = Trial(tvm.IRModule({"main": workload.prim_func()}), workload, "llvm", settings)
            run = measure_remote(trial, remote)
            results.append((run.check, last_attempts(), last_server()))
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    return results, errors, threads


def join(threads) -> None:
    for thread in threads:
        thread.join(120)


def test_both_servers_get_work_and_give_the_same_results(two_servers):
    remote, _ = two_servers
    # Three at once: each server's session takes one while the third waits for a free server.
    results, errors, threads = measure_in_threads(remote, 3, FAST)
    join(threads)
    assert errors == [] and len(results) == 3
    assert len({server for _, _, server in results}) == 2  # the work was spread over both
    checks = {check for check, _, _ in results}
    assert len(checks) == 1 and next(iter(checks)).correct  # same inputs, same kernel: the same result


def test_remote_kernel_is_uploaded_checked_and_timed(two_servers):
    remote, _ = two_servers
    m = measure_module(correct_module(), WORKLOAD, target="llvm", remote=remote, settings=WITH_ROOFLINE)
    assert m.correct and m.timing is not None and len(m.timing.samples_us) == 3
    assert m.device == f"CPU ({remote})"
    assert m.ceilings is not None and m.percent_of_roofline > 0


def test_remote_wrong_kernel_reports_the_index(two_servers):
    remote, _ = two_servers
    m = measure_module(wrong_at_2_3_module(), WORKLOAD, target="llvm", remote=remote, settings=WITH_ROOFLINE)
    assert not m.correct and m.check.first_wrong_index == (2, 3) and m.timing is None


def test_remote_crash_ends_only_the_session(two_servers):
    remote, _ = two_servers
    with pytest.raises(KernelCrashed, match="remote server"):
        measure_module(tvm.IRModule({"main": segfault()}), WORKLOAD, target="llvm", remote=remote,
                       settings=WITH_ROOFLINE)
    deadline = time.monotonic() + 30
    while server_count(remote) < 2:  # the server registers again after the session
        assert time.monotonic() < deadline, "a server stopped serving after a crashed session"
        time.sleep(0.2)
    assert measure_module(correct_module(), WORKLOAD, target="llvm", remote=remote, settings=WITH_ROOFLINE).correct


def test_unknown_key_and_unreachable_tracker(two_servers):
    remote, _ = two_servers
    with pytest.raises(NoDevice, match="No server with key 'no-such-gpu'"):
        measure_module(correct_module(), WORKLOAD, target="llvm",
                       remote=Remote("127.0.0.1", remote.port, "no-such-gpu"))
    with pytest.raises(RemoteError, match="Cannot reach the RPC tracker at 127.0.0.1:1 "):
        measure_module(correct_module(), WORKLOAD, target="llvm", remote=Remote("127.0.0.1", 1, KEY))


@pytest.mark.gpu
def test_a_preset_is_measured_on_a_remote_gpu(two_servers):
    # Built here for the target the server's GPU reports ("auto"), uploaded, run there.
    remote, _ = two_servers
    m = measure(get_preset("best-dw-96").spec, target="auto", remote=remote, settings=WITH_ROOFLINE)
    assert m.correct and m.median_us > 0
    assert tvm.target.Target(m.target).kind.name == "cuda"
    assert m.device.endswith(f"({remote})") and "CPU" not in m.device


def test_killing_a_server_mid_run_loses_no_request(two_servers, monkeypatch):
    remote, servers = two_servers
    servers_used = []  # the server of each session opened, in order (not the session: it must close)
    open_session = remote_module._session

    def session(*args):
        opened = open_session(*args)
        servers_used.append(opened[1])
        return opened

    monkeypatch.setattr(remote_module, "_session", session)
    results, errors, threads = measure_in_threads(remote, 2, SLOW, BIG)
    deadline = time.monotonic() + 30
    while len(set(servers_used)) < 2:  # both servers busy
        assert time.monotonic() < deadline, "the two measurements did not both start"
        time.sleep(0.05)
    time.sleep(0.5)  # inside the run (upload, check, then 1.5 s and more of timing)
    kill(servers[0])
    join(threads)
    assert errors == [] and len(results) == 2
    assert all(check.correct for check, _, _ in results)
    assert any(len(tried) == 2 for _, tried, _ in results)  # the killed server's session ran again...
    assert len({server for _, _, server in results}) == 1  # ...on the server that is left


@pytest.mark.gpu
def test_a_submission_through_the_tracker_is_measured_on_a_gpu_server(two_servers, tmp_path):
    remote, _ = two_servers
    store = Store(tmp_path / "class.sqlite3")
    entry = submit(store, "Remote", get_preset("best-dw-96").spec, remote=remote)  # the leaderboard's real path
    assert entry.median_us > 0 and "CPU" not in entry.device and entry.device.endswith(f"({remote})")
    assert entry.server is not None and entry.server.startswith("127.0.0.1:")
