"""The measuring pipeline of a class server, with stand-ins for the compile processes and the
GPU: compiles run side by side, timings one at a time, a failed compile costs no GPU time,
a long queue gets the short budget and an idle GPU measures again in full, background work
waits for students, and a slow tracker never blocks a request."""
import threading
import time

from explorer.errors import ExplorerError
from explorer.measure import Remote
from explorer.presets import get_preset
from explorer.server import scheduler as scheduler_module
from explorer.server.in_process import MeasuringInProcess
from explorer.server.scheduler import CLOSED, QUICK_WHEN_WAITING, Scheduler
from explorer.server.settings import ServerSettings

SPEC = get_preset("dw-blog-final-96").spec


def spec_x(x: int):
    return SPEC.with_knobs(num_thread_x=x)


def wait_until(condition, timeout=10):
    deadline = time.time() + timeout
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.005)


class Intervals:
    """Records (start, end) of calls and whether two ever overlapped."""

    def __init__(self, seconds: float):
        self.seconds, self.spans, self.lock = seconds, [], threading.Lock()
        self.active = self.most_at_once = 0

    def run(self, label):
        with self.lock:
            self.active += 1
            self.most_at_once = max(self.most_at_once, self.active)
        start = time.monotonic()
        time.sleep(self.seconds)
        with self.lock:
            self.active -= 1
            self.spans.append((label, start, time.monotonic()))
        return label


def test_compiles_overlap_timings_never_do_and_a_failed_compile_costs_no_gpu_time():
    compiles, gpu = Intervals(0.3), Intervals(0.02)

    def compile_fn(spec, target):
        if spec.knobs.num_thread_x == 2:
            compiles.run("bad")
            raise ExplorerError("NVRTC could not compile the generated CUDA.")
        return compiles.run(f"lib-{spec.knobs.num_thread_x}")

    measured = []

    def measure_fn(job):
        measured.append(job.compiled)
        return gpu.run(job.compiled)

    scheduler = Scheduler(measure_fn, compile_fn=compile_fn, compile_workers=4)
    jobs = [scheduler.request(f"student {x}", spec_x(x), "auto") for x in (1, 2, 4, 8)]
    assert {job.state for job in jobs} == {"compiling"} and all(scheduler.position(job) is None for job in jobs)
    assert scheduler.queue_lengths() == {"local": 4}  # compiling jobs count as the class's demand
    for job in jobs:
        assert job.wait(10)
    assert compiles.most_at_once == 4  # side by side, not one after another
    assert gpu.most_at_once == 1
    # The compiled library reached the GPU (a setting timed quickly while others waited is
    # timed again in full once the GPU is free, so a library may come twice).
    assert sorted(set(measured)) == ["lib-1", "lib-4", "lib-8"]
    bad = jobs[1]
    assert bad.error == "NVRTC could not compile the generated CUDA." and bad.result is None
    assert scheduler.stats()["measured"] >= 3 and scheduler.stats()["compile_failures"] == 1
    scheduler.close()


def test_a_student_moving_on_while_compiling_drops_the_job_before_the_gpu():
    release = threading.Event()
    measured = []

    def compile_fn(spec, target):
        release.wait(10)
        return "lib"

    scheduler = Scheduler(lambda job: measured.append(job.spec.knobs.num_thread_x), compile_fn=compile_fn)
    first = scheduler.request("alice", spec_x(2), "auto")
    second = scheduler.request("alice", spec_x(4), "auto")
    assert first.state == "dropped"
    release.set()
    assert second.wait(10)
    time.sleep(0.05)
    assert measured == [4]
    scheduler.close()


class HeldGPU:
    """Holds each measurement until released; records the budget each got."""

    def __init__(self):
        self.gate, self.order = threading.Semaphore(0), []

    def __call__(self, job):
        self.order.append((job.spec.knobs.num_thread_x, "quick" if job.quick else "full"))
        assert self.gate.acquire(timeout=10)
        return ("quick" if job.quick else "full", job.spec.knobs.num_thread_x)


def test_a_long_queue_gets_the_short_budget_and_an_idle_gpu_measures_again_in_full():
    gpu = HeldGPU()
    scheduler = Scheduler(gpu)
    blocker = scheduler.request("x", spec_x(1), "auto")
    wait_until(lambda: blocker.state == "running")
    waiting = [scheduler.request(f"student {x}", spec_x(x), "auto") for x in (2, 4, 8, 16)]
    assert len(waiting) > QUICK_WHEN_WAITING
    for _ in range(5):
        gpu.gate.release()
    wait_until(lambda: all(job.done for job in waiting))
    # x=2 and x=4 had at least QUICK_WHEN_WAITING jobs behind them; x=8 and x=16 did not.
    assert gpu.order[:5] == [(1, "full"), (2, "quick"), (4, "quick"), (8, "full"), (16, "full")]
    assert scheduler.result(spec_x(2), "auto") == ("quick", 2)
    # Idle now: the two quick settings are measured again with the full budget, in order.
    for _ in range(2):
        gpu.gate.release()
    wait_until(lambda: scheduler.result(spec_x(4), "auto") == ("full", 4))
    assert gpu.order[5:] == [(2, "full"), (4, "full")]
    assert scheduler.result(spec_x(2), "auto") == ("full", 2)
    assert scheduler.request("y", spec_x(2), "auto").result == ("full", 2)  # a new page sees the full one
    assert scheduler.idle()
    scheduler.close()


def test_full_measurements_again_wait_for_students():
    gpu = HeldGPU()
    scheduler = Scheduler(gpu)
    blocker = scheduler.request("x", spec_x(1), "auto")
    wait_until(lambda: blocker.state == "running")
    for x in (2, 4, 8):
        scheduler.request(f"student {x}", spec_x(x), "auto")
    for _ in range(3):
        gpu.gate.release()
    wait_until(lambda: len(gpu.order) == 4)  # x=8 runs; x=2 was quick and waits to be measured again
    late = scheduler.request("late", spec_x(32), "auto")
    for _ in range(2):
        gpu.gate.release()
    assert late.wait(10)
    wait_until(lambda: len(gpu.order) == 6)
    assert [x for x, _ in gpu.order] == [1, 2, 4, 8, 32, 2]  # the student before the full re-measurement
    gpu.gate.release()
    gpu.gate.release()
    wait_until(scheduler.idle)


def test_nothing_in_the_background_starts_while_a_students_job_compiles():
    gpu, compiling = HeldGPU(), threading.Event()
    scheduler = Scheduler(gpu, compile_fn=lambda spec, target: compiling.wait(10) and "lib")
    compiling.set()
    blocker = scheduler.request("x", spec_x(1), "auto")
    wait_until(lambda: blocker.state == "running")
    for x in (2, 4, 8):
        scheduler.request(f"student {x}", spec_x(x), "auto")
    wait_until(lambda: scheduler.stats()["waiting"] == 3)
    for _ in range(3):  # x=1, then the first of the three (quick: two behind it), then the second
        gpu.gate.release()
    wait_until(lambda: len(gpu.order) == 4)  # the third runs
    quick = gpu.order[1]
    assert quick[1] == "quick"
    compiling.clear()
    late = scheduler.request("late", spec_x(32), "auto")
    gpu.gate.release()  # the third ends: the quick one's full re-measurement is due
    time.sleep(0.2)
    assert len(gpu.order) == 4 and late.state == "compiling"  # the GPU waits for the student's job
    compiling.set()
    for _ in range(2):
        gpu.gate.release()
    wait_until(scheduler.idle)
    assert gpu.order[4:] == [(32, "full"), (quick[0], "full")] and late.done
    scheduler.close()


def test_students_jobs_still_compiling_behind_a_job_make_it_quick():
    gpu, compiling = HeldGPU(), threading.Event()
    held = lambda spec, target: (spec.knobs.num_thread_x == 1 or compiling.wait(10)) and "lib"  # noqa: E731
    scheduler = Scheduler(gpu, compile_fn=held, compile_workers=4)
    behind = [scheduler.request(f"student {x}", spec_x(x), "auto") for x in (2, 4)]  # compiling
    first = scheduler.request("student 1", spec_x(1), "auto")  # compiled at once, alone in the line
    wait_until(lambda: first.state == "running")
    assert gpu.order == [(1, "quick")]  # two students' jobs are about to join the line behind it
    compiling.set()
    for _ in range(4):  # x=1, x=2 and x=4, then x=1 again in full
        gpu.gate.release()
    wait_until(lambda: all(job.done for job in behind) and scheduler.idle())
    assert gpu.order[-1] == (1, "full")
    scheduler.close()


def test_a_dropped_compile_lets_the_waiting_background_job_start():
    gpu, compiling = HeldGPU(), threading.Event()
    # x=4 is the background job: compiled at once.
    scheduler = Scheduler(gpu, compile_fn=lambda spec, target: spec.knobs.num_thread_x == 4 or compiling.wait(10)
                          and "lib")
    compiling.set()
    first = scheduler.request("alice", spec_x(16), "auto")
    gpu.gate.release()
    assert first.wait(10)
    compiling.clear()
    scheduler.request("alice", spec_x(2), "auto")  # compiling
    background = scheduler.request(None, spec_x(4), "auto", background=True)  # compiled at once: waiting
    wait_until(lambda: background.state == "waiting")
    time.sleep(0.1)
    assert len(gpu.order) == 1  # it waits for alice's job
    assert scheduler.request("alice", spec_x(16), "auto") is first  # alice goes back: x=2 is dropped
    compiling.set()  # x=2's compile ends; the device takes the background job
    gpu.gate.release()
    assert background.wait(10)
    assert [x for x, _ in gpu.order] == [16, 4]
    scheduler.close()


def test_a_job_dropped_before_its_compile_starts_is_not_compiled():
    gpu, compiling, compiled = HeldGPU(), threading.Event(), []

    def compile_fn(spec, target):
        compiled.append(spec.knobs.num_thread_x)
        return compiling.wait(10) and "lib"

    scheduler = Scheduler(gpu, compile_fn=compile_fn, compile_workers=1)  # one compile at a time
    scheduler.request("alice", spec_x(2), "auto")  # compiling
    wait_until(lambda: compiled == [2])
    scheduler.request("alice", spec_x(4), "auto")  # waits for the compile thread
    last = scheduler.request("alice", spec_x(8), "auto")  # alice moves on: x=4 is dropped
    compiling.set()
    gpu.gate.release()
    assert last.wait(10)
    assert compiled == [2, 8] and [x for x, _ in gpu.order] == [8]
    scheduler.close()


def test_background_jobs_wait_for_students_and_a_students_request_promotes_one():
    gpu = HeldGPU()
    scheduler = Scheduler(gpu)
    ahead = [scheduler.request(None, spec_x(x), "auto", background=True) for x in (2, 4, 8)]
    wait_until(lambda: ahead[0].state == "running")
    alice = scheduler.request("alice", spec_x(16), "auto")
    bob = scheduler.request("bob", spec_x(8), "auto")  # the step measured ahead, now wanted by a student
    assert bob is ahead[2] and not bob.background
    assert scheduler.position(alice) == 1 and scheduler.position(bob) == 2 and scheduler.position(ahead[1]) == 3
    for _ in range(4):
        gpu.gate.release()
    wait_until(lambda: all(job.done for job in [*ahead, alice]))
    assert [x for x, _ in gpu.order] == [2, 16, 8, 4]
    scheduler.close()


def test_a_slow_tracker_does_not_block_other_sessions_requests(monkeypatch):
    asked = threading.Event()

    def slow_server_count(remote):
        asked.set()
        time.sleep(2.0)  # a tracker that takes seconds to answer
        return 1

    monkeypatch.setattr(scheduler_module, "server_count", slow_server_count)
    scheduler = Scheduler(lambda job: "ok")
    tracker = Remote.parse("127.0.0.1:9190", "h100")
    scheduler.request("alice", spec_x(2), "auto", tracker)
    assert asked.wait(5)  # the dispatcher is asking the tracker now
    start = time.monotonic()
    scheduler.request("bob", spec_x(4), "auto", tracker)
    scheduler.request("carol", spec_x(8), "auto")  # another device's line too
    scheduler.stats()
    assert time.monotonic() - start < 0.5


def test_measure_now_waits_reports_its_place_and_raises_the_sentence():
    gpu = HeldGPU()
    measuring = MeasuringInProcess(ServerSettings(build_workers=1), measure_fn=gpu,
                                   warm_up_fn=lambda first, target, warm: "Stand-in GPU")
    measuring.ready.set()
    try:
        blocker = measuring.request("x", spec_x(1), "auto")
        wait_until(lambda: blocker.state == "running")
        heard, results = [], []
        waiter = threading.Thread(target=lambda: results.append(measuring.measure_now(spec_x(4),
                                                                                      on_wait=heard.append)))
        waiter.start()
        wait_until(lambda: heard == [1])
        gpu.gate.release()
        gpu.gate.release()
        waiter.join(10)
        assert results == [("full", 4)]
        assert measuring.measure_now(spec_x(4)) == ("full", 4)  # measured once for the whole server
        assert len(gpu.order) == 2
    finally:
        measuring.close()


def test_a_closed_scheduler_starts_no_more_measurements():
    """After close() (a server closing) the device's line takes no further job, such as the full
    re-measurement of a quick one, that would hold the GPU for whoever measures next; a job that
    had not started ends with a sentence, so that nobody waits for it, and so does a later request."""
    gpu = HeldGPU()
    scheduler = Scheduler(gpu)
    running = scheduler.request("x", spec_x(1), "auto")
    wait_until(lambda: running.state == "running")
    queued = scheduler.request("y", spec_x(2), "auto")
    scheduler.close()
    assert queued.wait(0) and queued.error == CLOSED and queued.result is None
    late = scheduler.request("z", spec_x(4), "auto")
    assert late.done and late.error == CLOSED
    gpu.gate.release()  # the running one finishes
    assert running.wait(10) and running.result == ("full", 1)
    assert scheduler.join(10) == []  # the device's line has ended
    assert gpu.order == [(1, "full")]  # the queued one never started


def test_the_job_log_says_when_each_job_was_asked_compiled_started_and_done(tmp_path, monkeypatch):
    """The class bench's account of where a measurement waited: one line per finished job, its four
    times in order, who waited for it, its budget and its outcome."""
    log = tmp_path / "jobs.log"
    monkeypatch.setenv(scheduler_module.JOB_LOG, str(log))
    gpu = HeldGPU()
    scheduler = Scheduler(gpu, compile_fn=lambda spec, target: time.sleep(0.05) or "lib")
    blocker = scheduler.request("x", spec_x(1), "auto")
    wait_until(lambda: blocker.state == "running")
    scheduler.request("y", spec_x(2), "auto")
    for _ in range(3):  # x, then y (full: nothing behind it), then nothing to measure again
        gpu.gate.release()
    wait_until(lambda: scheduler.idle())
    lines = [line.split() for line in log.read_text().splitlines()]
    assert [line[4:] for line in lines] == [["student", "full", "ok", "depthwise_blog"]] * 2
    for line in lines:
        asked, compiled, started, finished = map(float, line[:4])
        assert asked <= compiled <= started <= finished
        assert compiled - asked >= 0.049  # the compile (times to the millisecond)
    first, second = (list(map(float, line[:4])) for line in lines)
    assert second[2] >= first[3]  # y waited for x's end
    scheduler.close()
