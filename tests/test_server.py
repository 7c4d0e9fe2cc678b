"""The class server shared by a process's sessions (explorer/server/): single-flight caches, builds
in a process pool (source only), the measurement scheduler's per-session slots, the warm-up and a
server's close, with stand-in measurers (no GPU). A test that is not about the build processes runs
without them (build_workers=0): each would import TVM, a second of CPU."""
import logging
import os
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext

import psutil
import pytest

from explorer.build import build
from explorer.cuda_env import SOURCE_ONLY
from explorer.errors import ExplorerError
from explorer.presets import get_preset
from explorer.server.api import Server
from explorer.server.builds import BuildService
from explorer.server.diagnosing import NOT_DIAGNOSED
from explorer.server.in_process import MeasuringInProcess
from explorer.server.scheduler import Scheduler
from explorer.server.settings import COMPILE_NICENESS, DIAGNOSE_NICENESS, ServerSettings
from explorer.server.single_flight import SingleFlight

SPEC = get_preset("dw-blog-final-96").spec


def spec_x(x: int):
    return SPEC.with_knobs(num_thread_x=x)


# -- single flight -------------------------------------------------------------------------


def test_two_concurrent_requests_for_one_key_compute_once():
    cache = SingleFlight(4)
    started, release, calls = threading.Event(), threading.Event(), []

    def compute():
        calls.append(1)
        started.set()
        release.wait(5)
        return "built"

    with ThreadPoolExecutor(2) as pool:
        first = pool.submit(cache.get, "k", compute)
        started.wait(5)
        second = pool.submit(cache.get, "k", compute)
        time.sleep(0.05)
        release.set()
        assert (first.result(), second.result()) == ("built", "built")
    assert len(calls) == 1
    assert cache.stats()["shared"] == 1 and cache.stats()["misses"] == 1


def test_single_flight_keeps_errors_and_drops_the_least_recently_used():
    cache = SingleFlight(2)

    def fail():
        raise ExplorerError("cannot build")

    for _ in range(2):
        with pytest.raises(ExplorerError, match="cannot build"):
            cache.get("bad", fail)
    assert cache.stats()["hits"] == 1
    cache.get("a", lambda: 1)
    cache.get("b", lambda: 2)  # "bad" was least recently used
    assert len(cache) == 2 and cache.peek("a") == 1 and cache.peek("bad") is None


def test_a_bug_in_compute_is_not_cached():
    cache = SingleFlight(2)
    with pytest.raises(ZeroDivisionError):
        cache.get("k", lambda: 1 / 0)
    assert cache.get("k", lambda: 3) == 3


def test_settings_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("EXPLORER_MEASURE_MAX_AGE_S", "60")
    assert ServerSettings().measure_max_age_s == 60
    monkeypatch.setenv("EXPLORER_MEASURE_MAX_AGE_S", "soon")
    with pytest.raises(ExplorerError, match="EXPLORER_MEASURE_MAX_AGE_S must be a positive whole number"):
        ServerSettings()


# -- builds in the process pool ----------------------------------------------------------------


@pytest.fixture(scope="module")
def service():
    service = BuildService(ServerSettings(build_workers=1))
    yield service
    service.close()


@contextmanager
def in_the_modules_process(pool, service: BuildService):
    """``pool``'s processes are the module service's one (already started, or started now): a test
    about where a server sends its builds, not about starting processes, starts none of its own (each
    imports TVM, most of a second of CPU). ``pool`` lets go of it before it closes."""
    pool._pool = service._executor()
    try:
        yield
    finally:
        pool._pool = None


def test_pool_builds_source_only_and_once_for_concurrent_sessions(service):
    spec = spec_x(4)
    with ThreadPoolExecutor(4) as pool:
        builds = list(pool.map(lambda _: service.build(spec, "auto"), range(4)))
    assert len({id(b) for b in builds}) == 1
    built = builds[0]
    assert built.runtime_module is None  # nothing runnable crossed the process boundary
    assert "__global__" in built.cuda and built.kernels and built.device_mod is not None
    assert built.cuda == build(spec, "auto").cuda  # what a process of the pool writes is what this one writes
    stats = service.stats()
    assert stats["misses"] == 1 and stats["shared"] + stats["hits"] == 3


def test_a_build_process_carries_the_name_a_look_at_the_machine_reads(service):
    pid = service.run(os.getpid)
    assert pid != os.getpid() and psutil.Process(pid).name() == "build worker"


def test_a_forgotten_build_is_built_again():
    service = BuildService(ServerSettings(build_workers=0))
    try:
        first = service.build(spec_x(4), "auto")
        assert service.build(spec_x(4), "auto") is first
        service.forget()
        again = service.build(spec_x(4), "auto")
        assert again is not first and again.cuda == first.cuda and service.stats()["misses"] == 2
    finally:
        service.close()


def test_pool_builds_come_with_their_code_views_highlighted(service):
    from explorer.highlight import VIEW_LANGUAGES, highlight, view_text

    built = service.build(spec_x(4), "auto")
    assert set(built.views_html) >= {"tensorir", "trace"} and built.timings_ms["highlight"] > 0  # with the build
    wait_until(lambda: set(built.views_html) == set(VIEW_LANGUAGES))  # the others right after
    text, first = view_text(built, "cuda")
    assert first > 1 and text.startswith('extern "C" __global__')  # the CUDA view starts at the kernel
    assert built.views_html["cuda"] == highlight(text, "cuda", (), first)
    assert built.views_html["tensorir"] == highlight(built.tensorir, "python")


def test_the_other_views_are_highlighted_in_the_background_only_where_a_process_is_free():
    from concurrent.futures import Future

    from explorer.highlight import VIEW_LANGUAGES

    submitted = []

    class Executor:  # records what would go to the processes, and finishes it at once
        def submit(self, function, views):
            submitted.append(sorted(views))
            future = Future()
            future.set_result({view: "<pre>highlighted</pre>" for view in views})
            return future

    service = BuildService(ServerSettings(build_workers=2))
    service._executor = Executor
    built = build(spec_x(4), "auto")
    built.views_html = {"tensorir": "<pre/>", "trace": "<pre/>"}  # what the build's own call highlighted
    service._busy = 2  # both processes build pages: the highlighting is left to a page that opens a view
    service._highlight_the_rest(built)
    assert submitted == [] and service.stats()["highlighting left to the pages"] == 1
    service._busy = 1  # one process is free
    service._highlight_the_rest(built)
    assert submitted == [["cuda", "lowered"]] and set(built.views_html) == set(VIEW_LANGUAGES)
    assert service._busy == 1  # the highlighting's own call counted while it ran, and no longer
    # A class server does not highlight ahead at all (explorer.server.launcher's class_environment).
    quiet = BuildService(ServerSettings(build_workers=2, highlight_ahead=False))
    quiet._executor = Executor
    quiet._highlight_the_rest(build(spec_x(4), "auto"))
    assert len(submitted) == 1 and quiet.stats()["highlighting left to the pages"] == 1


def test_a_pool_serves_once_its_first_process_is_warm_each_warming_in_its_own_order():
    """A request waits for the first process free, not for the slowest warm-up; each process
    warms the templates starting from a different one, so that compile processes find the
    others' binaries on disk."""
    from concurrent.futures import Future

    from explorer.server.pool import ProcessPool

    warm_ups = []

    class Processes:  # stands for TVM's PopenPoolExecutor: one future per warm-up, set by the test
        def submit(self, function, specs, target):
            warm_ups.append(([spec.template for spec in specs], Future()))
            return warm_ups[-1][1]

    pool = ProcessPool(ServerSettings(), 3, initializer=None)
    pool._executor = Processes
    specs = (SPEC, get_preset("matmul-tiled-1024").spec, get_preset("modern-async-1024").spec, SPEC)
    starting = threading.Thread(target=pool.start, args=(specs,))
    starting.start()
    wait_until(lambda: len(warm_ups) == 3)
    assert [templates for templates, _ in warm_ups] == [
        ["depthwise_blog", "matmul_async", "matmul"], ["matmul_async", "matmul", "depthwise_blog"],
        ["matmul", "depthwise_blog", "matmul_async"]]
    assert not pool.ready.is_set()
    warm_ups[1][1].set_result(1)
    assert pool.ready.wait(5)
    assert starting.is_alive()  # start() returns once every process is warm
    warm_ups[0][1].set_result(0)
    warm_ups[2][1].set_result(2)
    starting.join(5)
    assert not starting.is_alive()

    warm_ups.clear()
    pool.warm_templates = 1  # a compile pool's: one template each, a different one per process
    starting = threading.Thread(target=pool.start, args=(specs,))
    starting.start()
    wait_until(lambda: len(warm_ups) == 3)
    for _, future in warm_ups:
        future.set_result(0)
    starting.join(5)
    assert [templates for templates, _ in warm_ups] == [["depthwise_blog"], ["matmul_async"], ["matmul"]]


def test_pool_processes_never_compile_binaries(service):
    """The pool's processes run with TVM's source-only code generation, which the app's
    own process also uses; only the measuring worker drops it."""
    future = service._executor().submit(lambda: os.environ.get(SOURCE_ONLY))
    assert future.result() == "1"


def test_pool_build_error_reaches_the_caller_intact(service):
    wide = SPEC.with_knobs(num_thread_x=64, num_thread_y=32)  # 2048 threads per block
    with pytest.raises(ExplorerError, match="threads"):
        service.build(wide, "auto")


# -- measurement scheduler ---------------------------------------------------------------------


class StandInGPU:
    """Measures in order, one at a time, each job held until released."""

    def __init__(self):
        self.order, self.gate, self.running = [], threading.Semaphore(0), threading.Event()
        self.overlap = False
        self._busy = threading.Lock()

    def __call__(self, job):
        if not self._busy.acquire(blocking=False):
            self.overlap = True
            self._busy.acquire()
        try:
            self.order.append(job.spec.knobs.num_thread_x)
            self.running.set()
            assert self.gate.acquire(timeout=10)
            return f"{job.spec.knobs.num_thread_x} µs"
        finally:
            self.running.clear()
            self._busy.release()


def wait_until(condition, timeout=10):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.005)


def test_newer_request_replaces_the_sessions_waiting_one_and_fifo_across_sessions():
    gpu = StandInGPU()
    scheduler = Scheduler(gpu)
    running = scheduler.request("alice", spec_x(1), "auto")
    wait_until(lambda: running.state == "running")
    a2 = scheduler.request("alice", spec_x(2), "auto")
    b4 = scheduler.request("bob", spec_x(4), "auto")
    a8 = scheduler.request("alice", spec_x(8), "auto")  # replaces alice's x=2, goes behind bob
    assert a2.state == "dropped" and scheduler.position(a2) is None
    assert scheduler.position(b4) == 1 and scheduler.position(a8) == 2
    for _ in range(3):
        gpu.gate.release()
    wait_until(lambda: a8.done)
    assert gpu.order == [1, 4, 8]  # alice's x=2 was never measured; bob kept his place
    assert (running.result, b4.result, a8.result) == ("1 µs", "4 µs", "8 µs")
    assert not gpu.overlap


def test_same_setting_from_two_sessions_is_one_job_and_cached():
    gpu = StandInGPU()
    scheduler = Scheduler(gpu)
    first = scheduler.request("alice", spec_x(16), "auto")
    second = scheduler.request("bob", spec_x(16), "auto")
    assert first is second and first.sessions == {"alice", "bob"}
    gpu.gate.release()
    first.wait(10)
    assert scheduler.request("carol", spec_x(16), "auto") is first  # a fresh result: no new job
    assert gpu.order == [16]


def test_a_job_still_wanted_by_another_session_is_not_dropped():
    gpu = StandInGPU()
    scheduler = Scheduler(gpu)
    blocker = scheduler.request("x", spec_x(1), "auto")
    wait_until(lambda: blocker.state == "running")
    shared = scheduler.request("alice", spec_x(2), "auto")
    scheduler.request("bob", spec_x(2), "auto")
    scheduler.request("alice", spec_x(4), "auto")  # alice moves on; bob still waits for x=2
    assert scheduler.position(shared) == 1 and shared.sessions == {"bob"}
    for _ in range(3):
        gpu.gate.release()
    wait_until(lambda: scheduler.stats()["measured"] == 3)
    assert gpu.order == [1, 2, 4]


def test_old_results_are_measured_again():
    gpu = StandInGPU()
    scheduler = Scheduler(gpu, max_age_s=0.05)
    first = scheduler.request("alice", spec_x(8), "auto")
    gpu.gate.release()
    first.wait(10)
    time.sleep(0.1)
    again = scheduler.request("alice", spec_x(8), "auto")
    assert again is not first
    gpu.gate.release()
    again.wait(10)
    assert gpu.order == [8, 8] and again.age_s() < first.age_s()


def test_errors_are_sentences_and_the_queue_goes_on():
    def flaky(job):
        if job.spec.knobs.num_thread_x == 2:
            raise ExplorerError("The kernel crashed the measuring process.")
        return "ok"

    scheduler = Scheduler(flaky)
    bad, good = scheduler.request("a", spec_x(2), "auto"), scheduler.request("b", spec_x(4), "auto")
    good.wait(10)
    assert bad.error == "The kernel crashed the measuring process." and good.result == "ok"
    assert scheduler.request("a", spec_x(2), "auto") is bad  # a crash is not re-run on every page rerun


def test_jobs_wait_for_the_warm_up():
    ready = threading.Event()
    scheduler = Scheduler(lambda job: "ok", ready=ready)
    job = scheduler.request("alice", SPEC, "auto")
    time.sleep(0.05)
    assert job.state == "waiting"
    ready.set()
    assert job.wait(10) and job.result == "ok"


def no_gpu(first, target, warm):
    raise ExplorerError("No GPU here.")


def test_measuring_without_a_gpu_says_so_and_measures_nothing():
    measuring = MeasuringInProcess(ServerSettings(build_workers=0),
                                   measure_fn=lambda job: pytest.fail("measured without a GPU"), warm_up_fn=no_gpu)
    try:
        measuring.start(SPEC)
        assert measuring.ready.wait(60)
        warm = measuring.warm_up_state()
        assert warm.done and warm.error == "No GPU here." and not warm.gpu and measuring.gpu_name() is None
        assert measuring.scheduler.stats()["waiting"] == 0
    finally:
        measuring.close()


def test_a_tracker_key_with_two_servers_measures_two_at_once(monkeypatch):
    from explorer.measure import Remote
    from explorer.server import scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "server_count", lambda remote: 2)
    both_running = threading.Barrier(2, timeout=10)
    scheduler = Scheduler(lambda job: both_running.wait() is not None and "ok")
    tracker = Remote.parse("127.0.0.1:9190", "h100")
    jobs = [scheduler.request(name, spec_x(x), "auto", tracker) for name, x in (("alice", 2), ("bob", 4))]
    for job in jobs:
        assert job.wait(10)
    assert [job.result for job in jobs] == ["ok", "ok"]  # neither waited for the other to finish


def stand_in_server(measure_fn, warm_up_fn=lambda first, target, warm: "Stand-in GPU", **settings) -> Server:
    """A server whose GPU is ``measure_fn`` (no ceilings, no PyTorch), building in this process."""
    settings = ServerSettings(**{"build_workers": 0, **settings})
    return Server(settings, MeasuringInProcess(settings, measure_fn=measure_fn, warm_up_fn=warm_up_fn))


def steps_of(server: Server) -> list[str]:
    return [name for name, _ in server.warm_up_state().steps]


def test_a_gpu_server_builds_lesson_steps_ahead_and_measures_them_between_students(monkeypatch):
    monkeypatch.setattr(MeasuringInProcess, "_measure_ceilings", lambda self, target: None)
    monkeypatch.setattr(MeasuringInProcess, "baseline", lambda self, workload: None)
    gpu = StandInGPU()  # each measurement held until the test releases it
    server = stand_in_server(gpu)
    ahead = tuple(spec_x(x) for x in (4, 8, 16))
    try:
        server.start(None, build_ahead=ahead, measure_ahead=ahead)
        wait_until(lambda: gpu.order == [4], timeout=120)  # the builds come first, then one measurement
        assert "3 lesson steps built" in steps_of(server)
        assert all(server._builds._cache.peek((spec, "auto")) is not None for spec in ahead)
        alice = server.request("alice", spec_x(32), "auto")
        gpu.gate.release()  # the step ahead finishes; alice waits behind no other step
        wait_until(lambda: gpu.order == [4, 32])
        bob = server.request("bob", spec_x(2), "auto")  # while alice's runs: still before the next step
        gpu.gate.release()
        assert alice.wait(10) and alice.result == "32 µs"
        wait_until(lambda: gpu.order == [4, 32, 2])
        for _ in range(3):
            gpu.gate.release()
        assert bob.wait(10)
        wait_until(lambda: "3 lesson steps measured" in steps_of(server))
        assert gpu.order == [4, 32, 2, 8, 16] and not gpu.overlap
    finally:
        server.close()


def test_without_a_gpu_nothing_is_built_or_measured_ahead():
    server = stand_in_server(lambda job: pytest.fail("measured without a GPU"), no_gpu)
    try:
        server.start(None, build_ahead=(SPEC,), measure_ahead=(SPEC,))
        server._starting.join(60)
        steps = steps_of(server)
        assert server.stats()["builds"]["misses"] == 0 and "no GPU" in steps
        assert not any("lesson steps" in name or "compile" in name for name in steps)
    finally:
        server.close()


def test_until_its_processes_are_ready_a_server_builds_in_its_own_process(service):
    """The first page of a fresh server shows code at once: while the build processes start
    (seconds each, all importing TVM at once), the app's process builds what a page asks for;
    once they are ready, builds go to them."""
    fresh = BuildService(ServerSettings(build_workers=1), here_until_ready=True)
    try:
        first = fresh.build(spec_x(4), "auto")
        assert "__global__" in first.cuda and first.runtime_module is None
        assert fresh.built_here == 1 and fresh._pool is None  # no process was waited for
        with in_the_modules_process(fresh, service):
            fresh.start()
            second = fresh.build(spec_x(8), "auto")
        assert "__global__" in second.cuda
        assert fresh.built_here == 1 and fresh.stats()["misses"] == 2
    finally:
        fresh.close()


def test_a_build_service_without_the_option_always_uses_its_processes(service):
    misses = service.stats()["misses"]
    service.build(spec_x(2), "auto")  # a setting this module's service has not built yet
    assert service.stats()["misses"] == misses + 1
    assert service.built_here == 0 and service._pool is not None


def test_page_runs_keep_the_cpu_of_the_latest_runs():
    from explorer.server.page_runs import PageRuns

    runs = PageRuns(window=20)
    assert runs.stats() == {"runs": 0, "p50_ms": None, "p95_ms": None}
    for ms in range(1, 41):  # 1..40 ms; the window keeps 21..40
        runs.record(ms / 1000)
    stats = runs.stats()
    assert stats["runs"] == 40
    assert stats["p50_ms"] == pytest.approx(31) and stats["p95_ms"] == pytest.approx(39)  # items 10 and 18 of 0..19


def test_the_diagnosing_process_runs_behind_the_pages_builds():
    server = Server(ServerSettings(build_workers=0, diagnose=True))
    try:
        niceness = server._diagnosing.run(os.nice, 0)  # os.nice(0) returns the process's niceness
        assert niceness == min(19, os.nice(0) + DIAGNOSE_NICENESS)  # behind the compiles too
        assert DIAGNOSE_NICENESS > COMPILE_NICENESS > 0
    finally:
        server.close()


def test_a_server_told_not_to_diagnose_says_so_and_starts_no_diagnosing_process(monkeypatch):
    monkeypatch.setenv("EXPLORER_DIAGNOSE", "0")
    server = Server(ServerSettings(build_workers=0))
    try:
        with pytest.raises(ExplorerError, match=re.escape(NOT_DIAGNOSED)):
            server.diagnosis(get_preset("dw-blog-final-96").spec, "auto").result(10)
        assert server._diagnosing._pool is None  # never started
    finally:
        server.close()


@pytest.mark.parametrize("text,expected", [("", True), ("1", True), ("0", False)])
def test_explorer_diagnose_is_on_unless_set_to_0(monkeypatch, text, expected):
    monkeypatch.setenv("EXPLORER_DIAGNOSE", text)
    assert ServerSettings().diagnose is expected


def test_a_bad_explorer_diagnose_is_refused_with_one_sentence(monkeypatch):
    monkeypatch.setenv("EXPLORER_DIAGNOSE", "yes")
    with pytest.raises(ExplorerError, match="EXPLORER_DIAGNOSE must be 1 \\(on\\) or 0 \\(off\\), not 'yes'"):
        ServerSettings()


def test_without_build_processes_every_build_is_made_in_the_servers_own_process():
    service = BuildService(ServerSettings(build_workers=0), here_until_ready=False)
    try:
        service.start()  # nothing to start
        built = service.build(spec_x(4), "auto")
        assert service.build(spec_x(4), "auto") is built and service.built_here == 1
        assert service._pool is None and not service.ready.is_set()
        assert built.runtime_module is None and "__global__" in built.cuda
    finally:
        service.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_the_warm_up_names_build_processes_only_where_there_are_some(workers, service):
    server = stand_in_server(lambda job: 1.0, no_gpu, build_workers=workers)
    try:
        with in_the_modules_process(server._builds, service) if workers else nullcontext():
            server.start(None)
            server._starting.join(60)
        assert ("build processes" in steps_of(server)) is bool(workers)
        assert "no GPU" in steps_of(server)  # the pages' steps beside the GPU's
    finally:
        server.close()


def test_explorer_build_workers_may_be_0_and_the_compile_workers_may_not(monkeypatch):
    monkeypatch.setenv("EXPLORER_BUILD_WORKERS", "0")
    monkeypatch.setenv("EXPLORER_COMPILE_WORKERS", "2")
    assert (ServerSettings().build_workers, ServerSettings().compile_workers) == (0, 2)
    monkeypatch.setenv("EXPLORER_BUILD_WORKERS", "-1")
    with pytest.raises(ExplorerError, match="EXPLORER_BUILD_WORKERS must be a whole number from 0, not '-1'"):
        ServerSettings()
    monkeypatch.setenv("EXPLORER_BUILD_WORKERS", "1")
    monkeypatch.setenv("EXPLORER_COMPILE_WORKERS", "0")
    with pytest.raises(ExplorerError, match="EXPLORER_COMPILE_WORKERS must be a positive whole number, not '0'"):
        ServerSettings()


def test_the_compile_processes_wait_for_the_first_page_only_while_no_student_waits(monkeypatch):
    """The warm-up holds the compile processes back until the first page's (background) measurement
    is done, or a student's measurement waits (the worker would compile each itself), or the limit."""
    from types import SimpleNamespace

    from explorer.server import in_process

    first = threading.Event()  # the first page's job
    waiting = {"waiting": 0}
    server = SimpleNamespace(scheduler=SimpleNamespace(stats=lambda: dict(waiting)))

    def returns(limit_s: float) -> str | None:
        """Why the wait ended (None: still waiting after 10 s)."""
        monkeypatch.setattr(in_process, "FIRST_MEASUREMENT_WAIT_S", limit_s)
        reason = []
        thread = threading.Thread(target=lambda: reason.append(
            MeasuringInProcess._wait_first(server, first, poll_s=0.01)))
        thread.start()
        thread.join(10)
        return reason[0] if reason else None

    assert returns(0.2) == "the first page not measured after 0.2 s"  # nobody waits, nothing measured
    waiting["waiting"] = 1
    assert returns(3600) == "a student's measurement waits"
    waiting["waiting"] = 0
    first.set()
    assert returns(3600) == "the first page measured"
    first.clear()
    thread = threading.Thread(target=MeasuringInProcess._wait_first, args=(server, first), kwargs={"poll_s": 0.01})
    thread.start()
    thread.join(0.3)
    assert thread.is_alive()  # and otherwise it waits
    first.set()
    thread.join(10)


# -- a server that ends cleanly ----------------------------------------------------------------


def test_a_closed_server_has_ended_its_threads_and_logs_nothing_after(monkeypatch):
    """close() while the server measures the lesson steps ahead (each 0.2 s on a stand-in GPU, 10 s
    for all): its threads end before close() returns, with nothing logged after it (on the H200 the
    warm-up thread logged "105 lesson steps measured" after its test had closed the log's stream),
    and a measurement waited for ends with a sentence rather than waiting for ever."""
    from explorer.measure import MeasureError
    from explorer.server import api, in_process
    from explorer.server.scheduler import CLOSED

    monkeypatch.setattr(in_process, "CLOSE_WAIT_S", 1)  # what a call on the GPU may hold close() up
    monkeypatch.setattr(api, "CLOSE_WAIT_S", 1)
    monkeypatch.setattr(MeasuringInProcess, "_measure_ceilings", lambda self, target: None)
    monkeypatch.setattr(MeasuringInProcess, "baseline", lambda self, workload: None)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = records.append
    logger = logging.getLogger("explorer")
    monkeypatch.setattr(logger, "level", logging.INFO)
    logger.addHandler(handler)
    before = set(threading.enumerate())
    gpu = StandInGPU()
    server = stand_in_server(gpu)
    try:
        ahead = tuple(spec_x(x) for x in (1, 2, 4, 8, 16, 32)) + tuple(SPEC.with_knobs(num_thread_y=y)
                                                                     for y in (1, 2, 4, 8))
        server.start(SPEC, measure_ahead=ahead)
        wait_until(lambda: gpu.running.is_set(), timeout=60)
        gpu.gate.release()
        wait_until(lambda: len(gpu.order) >= 2)  # measuring the steps ahead
        waited = []
        waiter = threading.Thread(target=lambda: waited.append(pytest.raises(MeasureError, server.measure_now,
                                                                             spec_x(64))))
        waiter.start()
        wait_until(lambda: server.stats()["measurements"]["waiting"] >= 1)
        finishing = threading.Timer(0.3, gpu.gate.release)  # the kernel on the GPU finishes as close() waits
        finishing.start()
        server.close()
        closed = len(records)
        left = [t.name for t in set(threading.enumerate()) - before - {finishing, waiter} if t.is_alive()]
        waiter.join(5)
        time.sleep(1)
    finally:
        logger.removeHandler(handler)
        for _ in range(20):
            gpu.gate.release()
    assert left == []
    assert [record.getMessage() for record in records[closed:]] == []
    assert not any("lesson steps measured" in record.getMessage() for record in records)
    assert waited and CLOSED in str(waited[0].value)


def test_the_server_shows_its_api_and_none_of_its_parts():
    """What the app may ask of a server (explorer/server/api.py); its parts (the build pool, the diagnoses, the
    measuring) are its own."""
    server = stand_in_server(lambda job: 1.0)
    try:
        assert [name for name in vars(server) if not name.startswith("_")] == []
        assert {name for name in dir(Server) if not name.startswith("_")} == {
            "build", "diagnosis", "diagnosis_queue", "record_page_run", "forget_builds",
            "request", "measure_now", "measurer", "result", "position", "baseline", "baseline_now", "ceilings",
            "warm_up_state", "gpu_name", "measure_max_age_s", "stats", "start", "close"}
    finally:
        server.close()


def test_the_steps_ahead_are_measured_once_the_ceilings_are(monkeypatch):
    """Each measurement of a step ahead carries the roofline's ceilings: they are measured first."""
    events = []

    def ceilings(self, target):
        time.sleep(0.3)  # a few seconds on a GPU
        events.append("ceilings")

    monkeypatch.setattr(MeasuringInProcess, "_measure_ceilings", ceilings)
    monkeypatch.setattr(MeasuringInProcess, "baseline", lambda self, workload: None)
    measuring = MeasuringInProcess(ServerSettings(build_workers=0),
                                   measure_fn=lambda job: events.append(job.spec.knobs.num_thread_x) or 1.0,
                                   warm_up_fn=lambda first, target, warm: "Stand-in GPU")
    try:
        measuring.start(SPEC)
        measuring.measure_ahead((spec_x(2), spec_x(4)))
        assert events == [SPEC.knobs.num_thread_x, "ceilings", 2, 4]  # the first page, the ceilings, the steps
    finally:
        measuring.close()


def test_a_setting_being_measured_is_diagnosed_once_on_its_measurement(monkeypatch):
    """The session measures the setting: no diagnosis until the measurement (None), then one, placed on
    it; the measurement again later diagnoses nothing again. A session that does not measure gets its
    diagnosis at once."""
    from server_fakes import fake_measurement

    from explorer.server import api

    monkeypatch.setenv("EXPLORER_DIAGNOSE", "1")  # the tests' servers do not diagnose (tests/conftest.py)
    diagnosed = []
    monkeypatch.setattr(api, "diagnose_in", lambda process, spec, target, ceilings, measured_us, disk=None:
                        diagnosed.append((spec, measured_us)) or f"at {measured_us}")
    monkeypatch.setattr(MeasuringInProcess, "_measure_ceilings", lambda self, target: None)
    monkeypatch.setattr(MeasuringInProcess, "baseline", lambda self, workload: None)
    gate = threading.Event()
    server = stand_in_server(lambda job: gate.wait(10) and fake_measurement(job.spec, 7.0))
    try:
        server.start()
        wait_until(lambda: server.warm_up_state().done)
        assert server.diagnosis(SPEC, "auto", measuring=True) is None  # its measurement is on its way
        server.request("alice", SPEC, "auto")
        assert server.diagnosis(SPEC, "auto", measuring=True) is None
        gate.set()
        wait_until(lambda: server.result(SPEC, "auto") is not None)
        first = server.diagnosis(SPEC, "auto", measuring=True)
        assert first.result(10) == "at 7.0" and server.diagnosis(SPEC, "auto") is first
        assert server.diagnosis(spec_x(4), "auto").result(10) == "at None"  # not measured by this session
        assert diagnosed == [(SPEC, 7.0), (spec_x(4), None)]
    finally:
        server.close()


def test_the_app_processes_of_a_server_share_their_diagnoses_beside_its_socket(tmp_path, monkeypatch):
    """An app process of a server of several (the launcher set EXPLORER_MEASURING): its diagnoses go to
    the server's folder, where the other app processes find them (explorer/server/diagnosing.py)."""
    from explorer.server.api import open_server
    from explorer.server.launcher import MEASURING_ADDRESS, MEASURING_KEY

    monkeypatch.setenv(MEASURING_ADDRESS, str(tmp_path / "measuring.sock"))
    monkeypatch.setenv(MEASURING_KEY, "00" * 16)
    server = open_server(ServerSettings(build_workers=0))
    try:
        assert (tmp_path / "diagnoses").is_dir()
    finally:
        server.close()
