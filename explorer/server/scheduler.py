"""Measurements for a whole class: one job per (setting, target, device), compiled on every
core, then checked and timed on the device one at a time. This is a server's one queue per
device (a line of the machine's GPUs, or of a tracker key's GPU servers); below it, a GPU
only takes one caller at a time (``LocalGPU.turn``) and a tracker hands a request a free
server (``remote.measure_remote``). A job becomes the worker's :class:`~.worker.Trial` when it
runs.

A job's way: *compiling* (``compile_fn(spec, target)``, in a thread of a pool as large as the compile
processes behind it, so a class's compiles run side by side and a compile that fails costs
the device nothing) → *waiting* in its device's line → *running* (``measure_fn``, one job
per device at a time, or one per GPU server behind a tracker) → *done*.

A student who moves three sliders in a second wants the latency of the last setting, not
of the two before it: a session's newer request replaces its older job that has not started
(a job that has started runs to the end). Two students asking for the same setting share one
job (single flight), and a result is kept (bounded LRU) until it is older than ``max_age_s``,
then measured again.

Jobs that nobody waits for (the lesson steps a server measures ahead of a class, a full
re-measurement, a diagnosis trying its advice) are *background* jobs: a device takes one only
when no student's job is waiting or compiling, so a student waits behind at most one of them.
While other students' jobs wait or compile, a job is timed with the short budget (``job.quick``); when the device has
nothing else to do, the setting is measured again with the full budget and that result
replaces the quick one.

A job asked for with settings of its own (a sweep's points: ``settings``) is timed with them
exactly, never quickly nor again in full, and kept apart from the setting's measurement with the
server's own budget, which a student's page shows.

The device's capacity (a network call to the tracker) is asked outside the lock, so a slow
tracker never holds up another session's request. :meth:`Scheduler.close` ends every job that
has not started with a sentence, so that nothing waits for it, and :meth:`Scheduler.join` waits
for the threads to end.
"""
from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from ..build import Spec
from ..errors import ExplorerError
from ..measure.remote import Remote, server_count
from ..measure.settings import MeasureSettings
from ..processes import log_line

LOCAL = "local"
# Where each finished job's times are logged (when it was asked for, compiled, started and done),
# for the class bench's account of where a measurement waited; unset: no log.
JOB_LOG = "EXPLORER_JOB_LOG"
# While this many students' jobs wait (or compile, to join the line within a second) behind a job,
# it is timed with the short budget.
QUICK_WHEN_WAITING = 2

CLOSED = "The server closed before this measurement ran."

# job -> Measurement (or anything the measuring function returns); raises ExplorerError.
MeasureFn = Callable[["Job"], object]
# (spec, target) -> what the measuring function needs compiled (e.g. a library's path); raises ExplorerError.
CompileFn = Callable[[Spec, str], object]


def job_key(spec: Spec, target: str, remote: Remote | None = None, settings: MeasureSettings | None = None) -> tuple:
    """The key of ``spec``'s job on its device: one job and one result per key for the whole server."""
    device = remote.name if remote is not None else LOCAL
    return (spec, target, device) if settings is None else (spec, target, device, settings)


@dataclass(eq=False)
class Job:
    """One measurement of a setting on a device, shared by every session that asked for it."""

    key: tuple
    spec: Spec
    target: str
    remote: Remote | None
    sessions: set = field(default_factory=set)
    background: bool = False  # nobody waits for it: the device takes it only when idle
    settings: MeasureSettings | None = None  # timed with these (a sweep's); None: the server's own budget
    state: str = "waiting"  # (compiling →) waiting → running → done
    compiled: object = None  # what the compile stage returned, for the measuring function
    quick: bool = False  # timed with the short budget because others waited
    full_again: bool = False  # a full re-measurement of a setting first timed quickly
    result: object = None  # the measurement, when done without error
    error: str | None = None  # the sentence to show, when done with an error
    finished_at: float | None = None
    asked_at: float = field(default_factory=time.time)
    compiled_at: float | None = None  # when it joined its device's line
    started_at: float | None = None
    done_event: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def done(self) -> bool:
        return self.state == "done"

    def age_s(self, now: float | None = None) -> float | None:
        return None if self.finished_at is None else (now or time.time()) - self.finished_at

    def wait(self, timeout: float | None = None) -> bool:
        return self.done_event.wait(timeout)


class _Line:
    """The jobs of one device (a local GPU, or a tracker key with one or more GPU servers):
    those running, at most ``capacity()`` at once, and those waiting, in order; background
    jobs and full re-measurements go after every student's job."""

    def __init__(self, capacity: Callable[[], int], polls: bool):
        self.waiting: deque[Job] = deque()
        self.background: deque[Job] = deque()
        self.again: deque[tuple] = deque()  # keys measured quickly, to measure again in full
        self.running: set[Job] = set()
        self.capacity = capacity
        self.places = 1  # the last capacity asked, outside the lock
        self.polls = polls  # servers may join a tracker key: look again while jobs wait
        self.thread: threading.Thread | None = None

    def queue_of(self, job: Job) -> deque:
        return self.background if job.background else self.waiting


class Scheduler:
    def __init__(self, measure_fn: MeasureFn, *, max_age_s: float = 1800, capacity: int = 4096,
                 ready: threading.Event | None = None, compile_fn: CompileFn | None = None, compile_workers: int = 2,
                 local_gpus: int = 1, on_finished: Callable[[Job], None] | None = None):
        self._measure = measure_fn
        self._on_finished = on_finished  # each job measured, once it is done (outside the lock): the disk keeps it
        self._local_gpus = local_gpus  # jobs the local device runs at once: one per GPU of the machine
        self._compile_fn = compile_fn
        self._compiler = ThreadPoolExecutor(compile_workers, thread_name_prefix="compile") if compile_fn else None
        self._job_threads: set[threading.Thread] = set()  # jobs running beside others (a tracker's servers)
        self.max_age_s = max_age_s
        self.capacity = capacity
        self._ready = ready  # set once the device is warm; jobs wait for it
        self._changed = threading.Condition()
        self._closed = False  # close(): the devices' lines start no more jobs
        self._lines: dict[str, _Line] = {}
        self._jobs: dict[tuple, Job] = {}  # compiling, waiting or running, by key
        self._results: OrderedDict[tuple, Job] = OrderedDict()  # done, by key
        self._waiting_of: dict[Hashable, Job] = {}  # each session's job that has not started
        self.measured = 0
        self.compile_failures = 0

    # -- asking --------------------------------------------------------------------------

    def request(self, session: Hashable, spec: Spec, target: str, remote: Remote | None = None, *,
                background: bool = False, settings: MeasureSettings | None = None) -> Job:
        """The job that answers ``session``'s wish to see ``spec`` measured: a fresh result,
        the same setting's job already under way, or a new job, replacing this session's older
        job that has not started. A ``background`` request (``session`` None: the server's own)
        runs only when no student's job waits; a student's request for the same setting makes
        it a student's job. ``settings``: timed with these, apart from the server's own budget.
        After :meth:`close`, a new job ends at once with the sentence CLOSED."""
        key = job_key(spec, target, remote, settings)
        with self._changed:
            if self._closed and key not in self._results:
                job = Job(key, spec, target, remote, settings=settings)
                job.error, job.state, job.finished_at = CLOSED, "done", time.time()
                job.done_event.set()
                return job
            done = self._results.get(key)
            if done is not None and done.age_s() <= self.max_age_s:
                self._results.move_to_end(key)
                self._release(session, keep=None)
                return done
            job = self._jobs.get(key)
            if job is None:
                job = self._new_job(key, spec, target, remote, background, settings)
            elif job.background and not background:
                self._promote(job)
            if session is not None:
                job.sessions.add(session)
                self._release(session, keep=job)
                if job.state in ("compiling", "waiting"):
                    self._waiting_of[session] = job
            return job

    def preload(self, found) -> int:
        """Measurements made before this server started (``(spec, target, result, measured_at)``, of this
        machine's GPU with the server's own budget, newest first: ``measure_store``), taken as this server's
        own, as old as they are; a job of the same setting asked for meanwhile (during the warm-up) ends
        with it. How many were taken (at most the capacity, none that this server measured itself)."""
        taken, ended = 0, []
        with self._changed:
            room = self.capacity - len(self._results)
            for spec, target, result, measured_at in found:
                key = job_key(spec, target)
                if taken >= room or key in self._results:
                    continue
                job = self._jobs.get(key)
                if job is not None and job.state not in ("compiling", "waiting"):
                    continue  # running: its own result comes
                if job is not None:
                    del self._jobs[key]
                    line = self._lines.get(LOCAL)
                    if line is not None and job in line.queue_of(job):
                        line.queue_of(job).remove(job)
                    for session in [s for s, waiting in self._waiting_of.items() if waiting is job]:
                        del self._waiting_of[session]
                else:
                    job = Job(key, spec, target, None)
                job.result, job.state, job.finished_at = result, "done", measured_at
                ended.append(job)
                self._results[key] = job
                self._results.move_to_end(key, last=False)  # older than this server's own
                taken += 1
            self._changed.notify_all()
        for job in ended:
            job.done_event.set()
        return taken

    def result(self, spec: Spec, target: str, remote: Remote | None = None):
        """The measurement of ``spec`` with the server's own budget already taken (whatever its age),
        or None; asks for nothing."""
        with self._changed:
            job = self._results.get(job_key(spec, target, remote))
        return job.result if job is not None and job.error is None else None

    def find(self, key: tuple) -> Job | None:
        """The job of ``key`` under way, else its last result's, else None."""
        with self._changed:
            return self._jobs.get(key) or self._results.get(key)

    def latest(self, accept: Callable[[object], bool]):
        """The most recent measurement that ``accept`` takes, or None."""
        with self._changed:
            jobs = list(self._results.values())
        return next((job.result for job in reversed(jobs) if job.error is None and accept(job.result)), None)

    def position(self, job: Job) -> int | None:
        """Measurements ahead of ``job`` on its device (0: it is being measured; None: done,
        dropped, or still compiling)."""
        with self._changed:
            if job.state == "running":
                return 0
            line = self._lines.get(job.key[2])
            if job.state != "waiting" or line is None or job not in line.queue_of(job):
                return None
            ahead = line.queue_of(job).index(job) + len(line.running)
            return ahead + len(line.waiting) if job.background else ahead

    def stats(self) -> dict:
        with self._changed:
            lines = self._lines.values()
            return {"results": len(self._results), "capacity": self.capacity,
                    "compiling": sum(job.state == "compiling" for job in self._jobs.values()),
                    "waiting": sum(len(line.waiting) for line in lines),
                    "background": sum(len(line.background) + len(line.again) for line in lines),
                    "running": sum(len(line.running) for line in lines),
                    "measured": self.measured, "compile_failures": self.compile_failures, "max_age_s": self.max_age_s}

    def queue_lengths(self) -> dict[str, int]:
        """Per device: students' jobs compiling, running or waiting (background jobs not counted)."""
        with self._changed:
            lengths = {name: len(line.waiting) + sum(not job.background for job in line.running)
                       for name, line in self._lines.items()}
            for job in self._jobs.values():
                if job.state == "compiling" and not job.background:
                    lengths[job.key[2]] = lengths.get(job.key[2], 0) + 1
            return lengths

    def idle(self) -> bool:
        """Whether no job of any kind is compiling, waiting or running."""
        with self._changed:
            return not self._jobs and not any(line.again for line in self._lines.values())

    @property
    def compiles(self) -> bool:
        """Whether jobs of the local device are compiled apart before they are measured."""
        return self._compiler is not None

    def close(self) -> None:
        """Start no more jobs (no later job, such as a re-measurement, takes a GPU) and end every job
        that has not started with the sentence CLOSED, so that whoever waits for one stops waiting.
        Jobs running finish; :meth:`join` waits for them."""
        with self._changed:
            self._closed = True
            ended = [job for job in self._jobs.values() if job.state in ("compiling", "waiting")]
            for job in ended:
                job.error, job.state, job.finished_at = CLOSED, "done", time.time()
                del self._jobs[job.key]
            for line in self._lines.values():
                line.waiting.clear()
                line.background.clear()
                line.again.clear()
            self._waiting_of.clear()
            self._changed.notify_all()
        for job in ended:
            job.done_event.set()
        if self._compiler is not None:
            self._compiler.shutdown(wait=False, cancel_futures=True)

    def join(self, timeout: float) -> list[threading.Thread]:
        """After :meth:`close`: wait up to ``timeout`` s for the devices' lines and the jobs running on
        them to end (and the compile threads, once what they wait for has stopped); the threads still
        running after it."""
        deadline = time.monotonic() + timeout
        if self._compiler is not None:
            self._compiler.shutdown(wait=True)
        with self._changed:
            threads = [line.thread for line in self._lines.values() if line.thread is not None]
            threads += list(self._job_threads)
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [thread for thread in threads if thread.is_alive()]

    # -- bookkeeping (called with the lock held) ----------------------------------------------

    def _new_job(self, key: tuple, spec: Spec, target: str, remote: Remote | None, background: bool,
                 settings: MeasureSettings | None) -> Job:
        job = Job(key, spec, target, remote, background=background, settings=settings)
        self._jobs[key] = job
        line = self._line(key[2], remote)
        if self._compiler is not None and remote is None:  # a remote server compiles what it measures
            job.state = "compiling"
            self._compiler.submit(self._compile, line, job)
        else:
            job.compiled_at = job.asked_at
            line.queue_of(job).append(job)
            self._changed.notify_all()
        return job

    def _promote(self, job: Job) -> None:
        """A background job a student now waits for goes to the end of the students' line."""
        line = self._lines[job.key[2]]
        if job.state == "waiting":
            line.background.remove(job)
            line.waiting.append(job)
            self._changed.notify_all()
        job.background = False

    def _release(self, session: Hashable, keep: Job | None) -> None:
        """Drop ``session``'s claim on its job that has not started (unless it is ``keep``); a
        job nobody waits for leaves the queue (a compile under way finishes, for the disk
        cache, but is not measured)."""
        old = self._waiting_of.get(session)
        if old is None or old is keep:
            return
        del self._waiting_of[session]
        old.sessions.discard(session)
        if old.sessions or old.background or old.state not in ("waiting", "compiling"):
            return
        if old.state == "waiting":
            self._lines[old.key[2]].waiting.remove(old)
        del self._jobs[old.key]
        old.state = "dropped"

    # -- compiling -------------------------------------------------------------------------

    def _compile(self, line: _Line, job: Job) -> None:
        with self._changed:
            if job.state != "compiling":  # dropped (its student moved on) or closed while it waited for a thread
                self._changed.notify_all()
                return
        try:
            compiled, error = self._compile_fn(job.spec, job.target), None
        except ExplorerError as failure:
            compiled, error = None, str(failure)
        except Exception as failure:  # a bug must not stop the class's queue
            compiled, error = None, f"Compiling the kernel failed unexpectedly: {type(failure).__name__}: {failure}"
        with self._changed:
            if job.state != "compiling":  # dropped meanwhile, or ended by close()
                self._changed.notify_all()  # the device may take a background job now
                return
            if error is not None:
                self.compile_failures += 1
                self._finish_locked(line, job, error=error, ran=False)
            else:
                job.compiled, job.state, job.compiled_at = compiled, "waiting", time.time()
                line.queue_of(job).append(job)
                self._changed.notify_all()
        if error is not None:
            job.done_event.set()

    # -- running -------------------------------------------------------------------------

    def _line(self, device: str, remote: Remote | None) -> _Line:
        line = self._lines.get(device)
        if line is None:
            line = self._lines[device] = _Line(_capacity(remote, self._local_gpus), polls=remote is not None)
            line.thread = threading.Thread(target=self._dispatch, args=(line,), name=f"measure-{device}", daemon=True)
            line.thread.start()
        return line

    def _dispatch(self, line: _Line) -> None:
        while self._ready is not None and not self._ready.wait(0.2):
            if self._closed:
                return
        while True:
            places = max(1, line.capacity())  # a network call through a tracker: never under the lock
            with self._changed:
                if self._closed:
                    return
                line.places = places
                job = self._next(line)
                if job is None:
                    pending = line.waiting or line.background or line.again
                    self._changed.wait(timeout=1.0 if pending and line.polls else None)
                    continue
                job.state, job.started_at = "running", time.time()
                line.running.add(job)
                for session in job.sessions:
                    if self._waiting_of.get(session) is job:
                        del self._waiting_of[session]
            if places > 1:
                thread = threading.Thread(target=self._run, args=(line, job), name="measure-job", daemon=True)
                with self._changed:
                    self._job_threads.add(thread)
                thread.start()
            else:
                self._run(line, job)

    def _next(self, line: _Line) -> Job | None:
        """The job the device takes now, or None: students' jobs first (quick while others
        wait behind), then background jobs, then full re-measurements, but not while a
        student's job is compiling for this device: it joins the line within a second, and
        would wait behind them (a full re-measurement holds the GPU up to its 2 s budget)."""
        if len(line.running) >= line.places:
            return None
        compiling = sum(job.state == "compiling" and not job.background and self._lines.get(job.key[2]) is line
                        for job in self._jobs.values())
        if line.waiting:
            job = line.waiting.popleft()
            # Students' jobs behind it: the short budget, unless it was asked for with settings of its own.
            job.quick = job.settings is None and len(line.waiting) + compiling >= QUICK_WHEN_WAITING
            return job
        if compiling:
            return None
        if line.background:
            return line.background.popleft()
        while line.again:
            key = line.again.popleft()
            first = self._results.get(key)
            if first is not None and first.quick and key not in self._jobs:
                job = Job(key, first.spec, first.target, first.remote, background=True, full_again=True,
                          compiled=first.compiled)
                self._jobs[key] = job
                return job
        return None

    def _run(self, line: _Line, job: Job) -> None:
        error = None
        try:
            job.result = self._measure(job)
        except ExplorerError as failure:
            error = str(failure)
        except Exception as failure:  # a bug must not stop the class's queue
            error = f"The measurement failed unexpectedly: {type(failure).__name__}: {failure}"
        with self._changed:
            self._finish_locked(line, job, error=error, ran=True)
            self._job_threads.discard(threading.current_thread())
        job.done_event.set()
        if self._on_finished is not None:
            self._on_finished(job)

    def _finish_locked(self, line: _Line, job: Job, error: str | None, ran: bool) -> None:
        job.error = error
        job.state, job.finished_at = "done", time.time()
        line.running.discard(job)
        if self._jobs.get(job.key) is job:
            del self._jobs[job.key]
        self.measured += ran
        _log(job)
        if job.full_again and error is not None:
            return  # the quick result stands
        # Errors are kept too: a kernel that crashed the worker would crash it again on
        # every rerun of every page showing it.
        self._results[job.key] = job
        self._results.move_to_end(job.key)
        while len(self._results) > self.capacity:
            self._results.popitem(last=False)
        if job.quick and error is None:
            line.again.append(job.key)
        self._changed.notify_all()


def _log(job: Job) -> None:
    """A line of the job log (JOB_LOG): asked, compiled, started, finished (Unix seconds; "-"
    where the job never got there), who waited (student, background or again: a full
    re-measurement), quick or full, ok or error, the template."""
    path = os.environ.get(JOB_LOG)
    if not path:
        return
    kind = "again" if job.full_again else "background" if job.background else "student"
    times = " ".join("-" if t is None else f"{t:.3f}" for t in (job.asked_at, job.compiled_at, job.started_at,
                                                                  job.finished_at))
    log_line(path, f"{times} {kind} {'quick' if job.quick else 'full'} {'ok' if job.error is None else 'error'} "
                   f"{job.spec.template}")


def _capacity(remote: Remote | None, local_gpus: int = 1) -> Callable[[], int]:
    """How many jobs a device runs at once: one per local GPU (the measuring function gives each
    job a GPU of its own); through a tracker, one per GPU server registered under the key (asked
    again as servers join or leave)."""
    if remote is None:
        return lambda: local_gpus

    return lambda: server_count(remote)
