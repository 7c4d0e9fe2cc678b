"""Remote measurement end to end on loopback: a TVM RPC tracker started here, a server
started with ``python -m explorer.measure.server``, kernels built for llvm here, uploaded,
loaded, checked and timed on the server. A kernel that segfaults ends only its session:
the server keeps serving."""
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import tvm
from test_measure_worker import WORKLOAD, correct_module, segfault, wrong_at_2_3_module
from tvm import rpc
from tvm.rpc.tracker import Tracker

from explorer.measure import KernelCrashed, NoDevice, Remote, RemoteError, Settings, measure, measure_module
from explorer.presets import get_preset

pytestmark = pytest.mark.waits  # real servers or processes waited on: handed out first (conftest.py)

KEY = "explorer-test"
FAST = Settings(repeats=3, time_limit_s=5)
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def remote():
    tracker = Tracker(host="127.0.0.1", port=9190, port_end=9290, silent=True)
    server = subprocess.Popen(
        [sys.executable, "-m", "explorer.measure.server", "--tracker", f"127.0.0.1:{tracker.port}", "--key", KEY,
         "--host", "127.0.0.1", "--port", "9300", "--port-end", "9400", "--silent"],
        cwd=ROOT, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not _registered(tracker.port):
            assert server.poll() is None, "the RPC server exited"
            assert time.monotonic() < deadline, "the RPC server did not register with the tracker"
            time.sleep(0.2)
        yield Remote("127.0.0.1", tracker.port, KEY)
    finally:
        server.terminate()
        try:
            server.wait(10)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, signal.SIGKILL)  # its TVM worker process, if still there
            tracker.terminate()


def _registered(port: int) -> bool:
    servers = rpc.connect_tracker("127.0.0.1", port).summary()["server_info"]
    return any(item["key"] == f"server:{KEY}" for item in servers)


def test_remote_kernel_is_uploaded_checked_and_timed(remote):
    m = measure_module(correct_module(), WORKLOAD, target="llvm", remote=remote, settings=FAST)
    assert m.correct and m.timing is not None and len(m.timing.samples_us) == 3
    assert m.device == f"CPU ({remote})"
    assert m.ceilings is not None and m.percent_of_roofline > 0


def test_remote_wrong_kernel_reports_the_index(remote):
    m = measure_module(wrong_at_2_3_module(), WORKLOAD, target="llvm", remote=remote, settings=FAST)
    assert not m.correct and m.check.first_wrong_index == (2, 3) and m.timing is None


def test_remote_crash_ends_only_the_session(remote):
    with pytest.raises(KernelCrashed, match="remote server"):
        measure_module(tvm.IRModule({"main": segfault}), WORKLOAD, target="llvm", remote=remote, settings=FAST)
    deadline = time.monotonic() + 30
    while not _registered(remote.port):  # the server registers again after the session
        assert time.monotonic() < deadline, "the server stopped serving after a crashed session"
        time.sleep(0.2)
    assert measure_module(correct_module(), WORKLOAD, target="llvm", remote=remote, settings=FAST).correct


def test_unknown_key_and_unreachable_tracker(remote):
    with pytest.raises(NoDevice, match="No server with key 'no-such-gpu'"):
        measure_module(correct_module(), WORKLOAD, target="llvm",
                       remote=Remote("127.0.0.1", remote.port, "no-such-gpu"))
    with pytest.raises(RemoteError, match="Cannot reach the RPC tracker at 127.0.0.1:1 "):
        measure_module(correct_module(), WORKLOAD, target="llvm", remote=Remote("127.0.0.1", 1, KEY))


@pytest.mark.gpu
def test_a_preset_is_measured_on_a_remote_gpu(remote):
    # Built here for the target the server's GPU reports ("auto"), uploaded, run there.
    m = measure(get_preset("best-dw-96").spec, target="auto", remote=remote, settings=FAST)
    assert m.correct and m.median_us > 0
    assert tvm.target.Target(m.target).kind.name == "cuda"
    assert m.device.endswith(f"({remote})") and "CPU" not in m.device
