"""Measurements for a whole class: one job per (setting, target, device), first come first
served, at most one waiting job per session.

A student who moves three sliders in a second wants the latency of the last setting, not
of the two before it: a session's newer request replaces its older *waiting* one (a job
that has started runs to the end). Two students asking for the same setting share one job
(single flight), and a result is kept (bounded LRU) until it is older than ``max_age_s``,
then measured again. Each device has one dispatcher thread that runs the jobs in order;
the measuring function itself (``measure`` by default) still takes the device's turn in
``queue.py``, so the CLI, sweeps and the PyTorch baseline in the same process never time
a kernel at the same time either.
"""
from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field

from ..build import Spec
from ..errors import ExplorerError
from .remote import Remote

LOCAL = "local"

# job -> Measurement (or anything the measuring function returns); raises ExplorerError.
MeasureFn = Callable[["Job"], object]


@dataclass(eq=False)
class Job:
    """One measurement of a setting on a device, shared by every session that asked for it."""

    key: tuple
    spec: Spec
    target: str
    remote: Remote | None
    sessions: set = field(default_factory=set)
    state: str = "waiting"  # waiting → running → done
    result: object = None  # the measurement, when done without error
    error: str | None = None  # the sentence to show, when done with an error
    finished_at: float | None = None
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
    those running, at most ``capacity()`` at once, and those waiting, in order."""

    def __init__(self, capacity: Callable[[], int]):
        self.waiting: deque[Job] = deque()
        self.running: set[Job] = set()
        self.capacity = capacity
        self.thread: threading.Thread | None = None


class Scheduler:
    def __init__(self, measure_fn: MeasureFn, *, max_age_s: float = 1800, capacity: int = 4096,
                 ready: threading.Event | None = None):
        self._measure = measure_fn
        self.max_age_s = max_age_s
        self.capacity = capacity
        self._ready = ready  # set once the device is warm; jobs wait for it
        self._changed = threading.Condition()
        self._lines: dict[str, _Line] = {}
        self._jobs: dict[tuple, Job] = {}  # waiting or running, by key
        self._results: OrderedDict[tuple, Job] = OrderedDict()  # done, by key
        self._waiting_of: dict[Hashable, Job] = {}  # each session's waiting job
        self.measured = 0

    # -- asking --------------------------------------------------------------------------

    def request(self, session: Hashable, spec: Spec, target: str, remote: Remote | None = None) -> Job:
        """The job that answers ``session``'s wish to see ``spec`` measured: a fresh result,
        the same setting's job already queued or running, or a new job at the end of the
        device's queue, replacing this session's older waiting job."""
        device = remote.name if remote is not None else LOCAL
        key = (spec, target, device)
        with self._changed:
            done = self._results.get(key)
            if done is not None and done.age_s() <= self.max_age_s:
                self._results.move_to_end(key)
                self._release(session, keep=None)
                return done
            job = self._jobs.get(key)
            if job is None:
                job = Job(key, spec, target, remote)
                self._jobs[key] = job
                self._line(device, remote).waiting.append(job)
                self._changed.notify_all()
            job.sessions.add(session)
            self._release(session, keep=job)
            if job.state == "waiting":
                self._waiting_of[session] = job
            return job

    def result(self, spec: Spec, target: str, remote: Remote | None = None):
        """The measurement of ``spec`` already taken (whatever its age), or None; asks for nothing."""
        device = remote.name if remote is not None else LOCAL
        with self._changed:
            job = self._results.get((spec, target, device))
        return job.result if job is not None and job.error is None else None

    def latest(self, accept: Callable[[object], bool]):
        """The most recent measurement that ``accept`` takes, or None."""
        with self._changed:
            jobs = list(self._results.values())
        return next((job.result for job in reversed(jobs) if job.error is None and accept(job.result)), None)

    def position(self, job: Job) -> int | None:
        """Measurements ahead of ``job`` on its device (0: it is being measured; None: done)."""
        with self._changed:
            if job.state == "running":
                return 0
            line = self._lines.get(job.key[2])
            if job.state != "waiting" or line is None or job not in line.waiting:
                return None
            return line.waiting.index(job) + len(line.running)

    def stats(self) -> dict:
        with self._changed:
            return {"results": len(self._results), "capacity": self.capacity,
                    "waiting": sum(len(line.waiting) for line in self._lines.values()),
                    "running": sum(len(line.running) for line in self._lines.values()),
                    "measured": self.measured, "max_age_s": self.max_age_s}

    def queue_lengths(self) -> dict[str, int]:
        """Per device: jobs running or waiting."""
        with self._changed:
            return {name: len(line.waiting) + len(line.running) for name, line in self._lines.items()}

    def _release(self, session: Hashable, keep: Job | None) -> None:
        """Drop ``session``'s claim on its waiting job (unless it is ``keep``); a job nobody
        waits for leaves the queue. Called with the lock held."""
        old = self._waiting_of.get(session)
        if old is None or old is keep:
            return
        del self._waiting_of[session]
        old.sessions.discard(session)
        if old.state == "waiting" and not old.sessions:
            self._lines[old.key[2]].waiting.remove(old)
            del self._jobs[old.key]

    # -- running -------------------------------------------------------------------------

    def _line(self, device: str, remote: Remote | None) -> _Line:
        line = self._lines.get(device)
        if line is None:
            line = self._lines[device] = _Line(_capacity(remote))
            line.thread = threading.Thread(target=self._dispatch, args=(line,), name=f"measure-{device}", daemon=True)
            line.thread.start()
        return line

    def _dispatch(self, line: _Line) -> None:
        if self._ready is not None:
            self._ready.wait()
        while True:
            with self._changed:
                while not line.waiting or len(line.running) >= max(1, line.capacity()):
                    self._changed.wait(timeout=None if not line.waiting else 1.0)  # servers may join
                job = line.waiting.popleft()
                job.state = "running"
                line.running.add(job)
                for session in job.sessions:
                    if self._waiting_of.get(session) is job:
                        del self._waiting_of[session]
            if line.capacity() > 1:
                threading.Thread(target=self._run, args=(line, job), name="measure-job", daemon=True).start()
            else:
                self._run(line, job)

    def _run(self, line: _Line, job: Job) -> None:
        try:
            job.result = self._measure(job)
        except ExplorerError as error:
            job.error = str(error)
        except Exception as error:  # a bug must not stop the class's queue
            job.error = f"The measurement failed unexpectedly: {type(error).__name__}: {error}"
        self._finish(line, job)

    def _finish(self, line: _Line, job: Job) -> None:
        with self._changed:
            job.state, job.finished_at = "done", time.time()
            line.running.discard(job)
            del self._jobs[job.key]
            self.measured += 1
            # Errors are kept too: a kernel that crashed the worker would crash it again on
            # every rerun of every page showing it.
            self._results[job.key] = job
            while len(self._results) > self.capacity:
                self._results.popitem(last=False)
            self._changed.notify_all()
        job.done_event.set()


def _capacity(remote: Remote | None) -> Callable[[], int]:
    """How many jobs a device runs at once: one local GPU; through a tracker, one per GPU
    server registered under the key (asked again as servers join or leave)."""
    if remote is None:
        return lambda: 1
    from .remote import server_count

    return lambda: server_count(remote)
