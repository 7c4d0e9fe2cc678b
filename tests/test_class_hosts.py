"""A class server whose builds and compiles run on two worker hosts (``serve --workers``, Dask
distributed): each host a network namespace of its own with one worker process (``python -m explorer
worker``), on addresses this test gives them (a /24 drawn from 198.18.0.0/15, the range set aside for
benchmark tests, so that two runs at once do not meet, on a bridge this test makes and removes), the
scheduler on the bridge's address of this machine, the GPU a stand-in (tests/stand_in_gpu.py). A short
class is served from the test through the server's API as the app calls it (build, then measure), on both
hosts; one host disappears mid-class (its worker process killed while it runs a call) and no move is lost;
a setting built on one host is compiled on the other from that build (the class's cache, kept by the
server). Root only (network namespaces): CI runs as root."""
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from server_fakes import fake_measurement

from explorer.presets import get_preset
from explorer.server.api import Server
from explorer.server.compiles import whole_library
from explorer.server.in_process import MeasuringInProcess
from explorer.server.settings import ServerSettings

SPEC = get_preset("dw-blog-final-96").spec
HOSTS = ("a", "b")


def settings_of(spec_values):
    return [SPEC.with_knobs(num_thread_y=ty, num_thread_x=tx, num_vthread_x=vx, unroll=unroll)
            for ty, tx, vx, unroll in spec_values]


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def cannot_make_hosts() -> str | None:
    """Why this machine cannot give the test its hosts, or None (on CI, which runs as root, it must)."""
    if os.environ.get("CI"):
        return None
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs as root)"
    if shutil.which("ip") is None:
        return "no `ip` (iproute2) to make network namespaces"
    return None


pytestmark = pytest.mark.skipif(cannot_make_hosts() is not None, reason=str(cannot_make_hosts()))


class Hosts:
    """A bridge on this machine at SUBNET.1 and a namespace per host at SUBNET.2, .3 …, each joined to it
    (SUBNET: a /24 of 198.18.0.0/15 drawn for the run)."""

    def __init__(self):
        tag = uuid.uuid4()
        self.bridge, self.namespaces = f"exb{tag.hex[:6]}", {name: f"exh{tag.hex[:6]}{name}" for name in HOSTS}
        number = tag.int % 512
        self.subnet = f"198.{18 + number // 256}.{number % 256}"
        self.address = f"{self.subnet}.1"

    def make(self) -> None:
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{self.address}/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for number, (name, namespace) in enumerate(self.namespaces.items(), start=2):
            ip("netns", "add", namespace)
            ip("link", "add", f"{self.bridge}{name}", "type", "veth", "peer", "name", "eth0", "netns", namespace)
            ip("link", "set", f"{self.bridge}{name}", "master", self.bridge, "up")
            ip("-n", namespace, "addr", "add", f"{self.subnet}.{number}/24", "dev", "eth0")
            ip("-n", namespace, "link", "set", "eth0", "up")
            ip("-n", namespace, "link", "set", "lo", "up")

    def remove(self) -> None:
        for namespace in self.namespaces.values():
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)  # its veth goes with it
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(the scheduler's address, the hosts' worker processes by host, the folder of their compile logs)."""
    folder = tmp_path_factory.mktemp("hosts")
    hosts = Hosts()
    processes = []
    try:
        hosts.make()
        file = folder / "scheduler.json"
        processes.append(subprocess.Popen(
            [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", hosts.address, "--port", "0",
             "--no-dashboard", "--scheduler-file", str(file)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + 30
        while not file.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.1)  # written whole
        address = json.loads(file.read_text())["address"]
        workers = {}
        for name, namespace in hosts.namespaces.items():
            env = {**os.environ, "EXPLORER_COMPILE_LOG": str(folder / f"compiles-{name}.log")}
            workers[name] = subprocess.Popen(
                ["ip", "netns", "exec", namespace, sys.executable, "-m", "explorer", "worker", address,
                 "--processes", "1", "--", "--no-nanny", "--name", f"host-{name}"],
                env=env, stdout=subprocess.DEVNULL, stderr=open(folder / f"worker-{name}.log", "w"))
            processes.append(workers[name])
        yield address, workers, folder
    finally:
        # The hosts go first and at once (a worker that outlives its scheduler waits for it to come back),
        # then the scheduler.
        for process in reversed(processes):
            if process.poll() is None:
                process.kill() if process is not processes[0] else process.terminate()
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        hosts.remove()


def workers_of(client) -> dict:
    """The scheduler's workers by address, asked of it now (the client's copy may be the totals only)."""
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]


def wait_for_hosts(client, count: int, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while len(workers_of(client)) < count:
        assert time.monotonic() < deadline, "the worker hosts did not join the cluster"
        time.sleep(0.1)


class StandInGPU:
    """Measures each job in 20 ms, recording the library it was given."""

    def __init__(self):
        self.libraries, self.lock = [], threading.Lock()

    def __call__(self, job):
        with self.lock:
            self.libraries.append(job.compiled)
        time.sleep(0.02)
        return fake_measurement(job.spec, 5.0)


def student(server, name: str, specs, outcomes: list) -> None:
    """A student's moves as a page makes them: the code, then the latency."""
    for spec in specs:
        built = server.build(spec, "auto")
        job = server.request(name, spec, "auto")
        assert job.wait(120), f"{name}'s move was never measured"
        outcomes.append((spec, "__global__" in built.cuda, job.error, job.result))


def test_a_class_on_two_hosts_loses_no_move_when_one_disappears_and_shares_its_builds(cluster, tmp_path):
    import distributed

    address, workers, logs = cluster
    observer = distributed.Client(address, set_as_default=False)
    gpu = StandInGPU()
    settings = ServerSettings(workers=address, build_dir=str(tmp_path / "builds"), build_disk_cache=4096,
                              library_dir=str(tmp_path / "libraries"), build_workers=1, compile_workers=2,
                              diagnose=False)
    holder = []
    measuring = MeasuringInProcess(settings, measure_fn=gpu, warm_up_fn=lambda first, target, warm: "Stand-in GPU",
                                   compile_fn=lambda spec, target: holder[0].compiles.compile(spec, target))
    holder.append(measuring)
    server = Server(settings, measuring=measuring)
    try:
        wait_for_hosts(observer, 2)
        server.start()
        engine = measuring.compiles.engine
        deadline = time.monotonic() + 30
        while not (measuring.compiles.ready.is_set() and server._builds.ready.is_set()):
            assert time.monotonic() < deadline, "the server never joined the cluster"
            time.sleep(0.05)
        # Four pages opened at once: their builds go to both hosts.
        first = settings_of([(4, 8, 1, False), (4, 16, 1, False), (8, 8, 1, False), (16, 8, 1, False)])
        threads = [threading.Thread(target=server.build, args=(spec, "auto")) for spec in first]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
        assert set(engine.made_by.values()) == {"host-a", "host-b"}, engine.stats()
        # A class of three students; host a disappears while it runs one of their calls.
        moves = [settings_of([(4, 8, 2, False), (4, 16, 2, True)]), settings_of([(8, 16, 2, False), (16, 16, 2, True)]),
                 first[:2]]
        outcomes: list = []
        students = [threading.Thread(target=student, args=(server, f"student {i}", specs, outcomes))
                    for i, specs in enumerate(moves)]
        for thread in students:
            thread.start()
        deadline = time.monotonic() + 60
        while not any(observer.processing().get(w) for w, info in workers_of(observer).items()
                      if info["name"] == "host-a"):
            assert time.monotonic() < deadline, "host a never ran a call of the class"
            time.sleep(0.005)
        workers["a"].send_signal(signal.SIGKILL)
        for thread in students:
            thread.join(180)
        # No move lost: each showed its code and its latency, with nothing but the usual progress.
        assert len(outcomes) == 6 and all(code and error is None and result is not None
                                          for _, code, error, result in outcomes), outcomes
        # Every measurement loaded a whole library that a host compiled, kept by the server.
        assert gpu.libraries and all(path and whole_library(open(path, "rb").read()) for path in gpu.libraries)
        # The rest of the first pages' settings measured now, on host b alone: each compile generated the
        # page's build that a host made (host a made some), none scheduled and lowered it again.
        for spec in first[2:]:
            assert server.measure_now(spec, "auto", timeout=120) is not None
        compiled_b = [line.split() for line in (logs / "compiles-b.log").read_text().splitlines()]
        assert compiled_b and {line[9] for line in compiled_b} == {"kept"}, compiled_b
        builds_by_a = [key for key, host in engine.made_by.items() if key.startswith("build-") and host == "host-a"]
        assert builds_by_a, "host a made no build before it went"
        assert engine.stats()["ran here"] == 0  # host b took every call that host a left
    finally:
        server.close()
        observer.close()
