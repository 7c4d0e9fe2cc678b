"""The server's one way to measure: :class:`Measuring`, with two implementations.

- :class:`~.in_process.MeasuringInProcess`: the queue, the compile processes, the measuring
  workers, PyTorch's baselines, the roofline's ceilings and the GPU's warm-up in this process
  (a server of one app process, and the measuring service itself);
- :class:`~.over_socket.MeasuringOverSocket`: every call sent to the measuring service over its
  socket (an app process of a server of several, ``explorer/server/service.py``).

Pages, the leaderboard, a lesson's steps and the Sweep page all measure through it (through
:class:`~.api.Server`, which holds one): one kernel at a time on each GPU, a setting measured once
for the whole class, each session with at most one measurement waiting.
"""
from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod

from ..build import Spec
from ..measure import MeasureError, MeasureSettings
from .warm_up import WarmUp

WAIT_REPORT_S = 0.25  # how often a caller waiting for a measurement hears its place in the queue


class Measuring(ABC):
    """Measurements for every session of a server. A job (:meth:`request`) has ``done``, ``wait``,
    ``state``, ``result``, ``error``, ``quick``, ``sessions`` and ``age_s()``."""

    @abstractmethod
    def request(self, session, spec: Spec, target: str, remote=None, *, background: bool = False,
                settings: MeasureSettings | None = None):
        """Ask for ``spec``'s measurement for ``session`` and return its job at once (done, or
        compiling/waiting/running: the page polls ``job.done`` or waits on ``job.wait``). A newer
        request of the session replaces its older job that has not started; ``background``: the
        server's own (nobody waits), taken only while no student's job waits; ``settings``: timed
        with these (a sweep's) rather than the server's own budget."""

    @abstractmethod
    def result(self, spec: Spec, target: str, remote=None):
        """The measurement of ``spec`` already taken, or None; asks for nothing."""

    @abstractmethod
    def position(self, job) -> int | None:
        """Measurements ahead of ``job`` on its device (0: being measured; None: done or compiling)."""

    @abstractmethod
    def baseline(self, workload):
        """PyTorch's time for ``workload`` on the local GPU when known; otherwise start measuring it
        (once per server, in the background) and return None."""

    @abstractmethod
    def baseline_now(self, workload):
        """PyTorch's measurement of ``workload``, waiting for it; raises MeasureError where PyTorch
        cannot run it."""

    @abstractmethod
    def ceilings(self):
        """The roofline's ceilings of the latest measurement that carries some (a remote GPU's too),
        else the local GPU's measured ones, else None."""

    @abstractmethod
    def warm_up_state(self) -> WarmUp:
        """What the GPU's warm-up has done so far (``done`` once it has ended, ``gpu`` if it found one)."""

    @abstractmethod
    def stats(self) -> dict:
        """"measurements", "queues" and "baselines" (none while they cannot be asked)."""

    @abstractmethod
    def start(self, first: Spec | None = None, target: str = "auto", ahead: tuple[Spec, ...] = ()) -> None:
        """Warm up in the background (``first``: the page a student opens first; ``ahead``: the steps
        that will be measured ahead, whose templates the compile processes load as they start)."""

    @abstractmethod
    def measure_ahead(self, specs: tuple[Spec, ...], target: str = "auto") -> None:
        """Measure ``specs`` (the lesson steps a class opens by link) between the students'
        measurements; returns once they are measured, or the server closes."""

    @abstractmethod
    def close(self) -> None:
        """Stop: no measurement starts any more, and this side's threads have ended when it returns."""

    def measure_now(self, spec: Spec, target: str = "auto", remote=None, timeout: float | None = None,
                    on_wait=None, settings: MeasureSettings | None = None):
        """``spec``'s measurement, waiting for it (a lesson's steps, a leaderboard submission, a
        sweep's points); ``on_wait(ahead)`` hears how many measurements are ahead while it waits. A
        failed one raises MeasureError with its sentence."""
        job = self.request(("measure now", threading.get_ident(), time.monotonic()), spec, target, remote,
                           settings=settings)
        deadline = None if timeout is None else time.monotonic() + timeout
        told = None
        while not job.wait(WAIT_REPORT_S):
            if deadline is not None and time.monotonic() > deadline:
                raise MeasureError(f"The measurement did not finish within {timeout:g} s; it stays queued.")
            ahead = self.position(job)
            if on_wait is not None and ahead and ahead != told:
                on_wait(ahead)
                told = ahead
        if job.error is not None:
            raise MeasureError(job.error)
        return job.result

    def gpu_name(self) -> str | None:
        """The local GPU's name once the warm-up found one, else None."""
        warm = self.warm_up_state()
        return warm.device if warm.gpu else None
