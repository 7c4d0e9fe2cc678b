"""Measuring over the socket to the measuring service (``service.py``): what an app process of a
class server of several measures through.

A page holds a :class:`SharedJob`, a view of the service's job that asks again for its state when
the page looks. If the service stops (the launcher starts it again), a page's job says so and is
asked for again once the service answers: no request is lost.
"""
from __future__ import annotations

import threading
import time
from multiprocessing.managers import RemoteError

from ..build import Spec
from ..measure import MeasureError, MeasureSettings
from .measuring import Measuring
from .scheduler import job_key
from .service import JobView, connect
from .warm_up import WarmUp

UNREACHABLE = ("The measuring service is restarting; this measurement is asked for again as soon as it is back "
               "(the code and the analyses are unaffected).")

WAIT_S = 1.0  # a wait without a limit asks the service again this often


class SharedJob:
    """A page's handle on a job of the service: ``done``, ``wait`` and ``position`` ask the
    service again; a job the service lost (it restarted) is asked for again."""

    def __init__(self, measuring: MeasuringOverSocket, ask: tuple, view: JobView):
        self._measuring, self._ask, self.view = measuring, ask, view

    key = property(lambda self: self.view.key)
    state = property(lambda self: self.view.state)
    result = property(lambda self: self.view.result)
    error = property(lambda self: self.view.error)
    quick = property(lambda self: self.view.quick)
    sessions = property(lambda self: self.view.sessions)

    @property
    def done(self) -> bool:
        if self.view.state != "done":
            self.look()
        return self.view.state == "done"

    def age_s(self, now: float | None = None) -> float | None:
        return None if self.view.finished_at is None else (now or time.time()) - self.view.finished_at

    def wait(self, timeout: float | None = None) -> bool:
        """Whether the job is done, waiting up to ``timeout`` seconds (None: until it is)."""
        self.look(timeout if timeout is not None else WAIT_S)
        while timeout is None and self.view.state not in ("done", "dropped"):
            self.look(WAIT_S)
        return self.view.state == "done"

    def look(self, wait_s: float = 0.0) -> JobView:
        if self.view.state in ("done", "dropped"):  # dropped: this page asked for another setting since
            return self.view
        if self.view.state == "unreachable":
            self.view = self._measuring.ask(*self._ask)
            return self.view
        asked_of = self.view.service
        self.view = self._measuring.call("look", self.view.key, wait_s, key=self.view.key)
        if self.view.state == "dropped" and self.view.service != asked_of:  # a restarted service never had it
            self.view = self._measuring.ask(*self._ask)
        return self.view


class MeasuringOverSocket(Measuring):
    """Every measurement of this app process sent to the measuring service at ``address``; while
    the service does not answer (it is restarting), a job says so and the rest is None."""

    def __init__(self, address: str, key: bytes):
        self._address, self._key = address, key
        # One proxy for every thread (each thread gets its own connection from it): a page run's
        # thread connects once, not once per call.
        self._proxy = None
        self._lock = threading.Lock()
        self._warm: WarmUp | None = None

    def _service(self):
        with self._lock:
            if self._proxy is None:
                self._proxy = connect(self._address, self._key)
            return self._proxy

    def call(self, method: str, *args, key: tuple | None = None):
        """``method(*args)`` on the service; a service that does not answer (it is restarting)
        gives a JobView "unreachable" where ``key`` names a job, else MeasureError."""
        try:
            return getattr(self._service(), method)(*args)
        except (OSError, EOFError, RemoteError):  # down, or a new service that knows no old proxy
            with self._lock:
                self._proxy = None  # connect again next time
            if key is not None:
                return JobView(key, "unreachable", error=UNREACHABLE)
            raise MeasureError(UNREACHABLE) from None

    def ask(self, session, spec: Spec, target: str, remote=None, background: bool = False,
            settings: MeasureSettings | None = None) -> JobView:
        return self.call("request", session, spec, target, remote, background, settings,
                         key=job_key(spec, target, remote, settings))

    def request(self, session, spec: Spec, target: str, remote=None, *, background: bool = False,
                settings: MeasureSettings | None = None) -> SharedJob:
        ask = (session, spec, target, remote, background, settings)
        return SharedJob(self, ask, self.ask(*ask))

    def result(self, spec: Spec, target: str, remote=None):
        return self._quietly("result", spec, target, remote)

    def position(self, job: SharedJob) -> int | None:
        view = job.look()
        return 0 if view.state == "running" else view.ahead if view.state == "waiting" else None

    def ceilings(self):
        return self._quietly("ceilings")

    def baseline(self, workload):
        return self._quietly("baseline", workload)

    def baseline_now(self, workload):
        return self.call("baseline_now", workload)

    def warm_up_state(self) -> WarmUp:
        """The service's warm-up (kept once it has ended: it ends once)."""
        if self._warm is not None:
            return self._warm
        try:
            warm = self.call("warm_up_state")
        except MeasureError:
            warm = WarmUp()
            warm.steps.append(("the measuring service is starting", 0.0))
            return warm
        if warm.done:
            self._warm = warm
        return warm

    def stats(self) -> dict:
        try:
            return self.call("stats")
        except MeasureError:
            return {}

    def start(self, first: Spec | None = None, target: str = "auto", ahead: tuple[Spec, ...] = ()) -> None:
        """Nothing to start: the launcher started the service, which warms up on its own."""

    def measure_ahead(self, specs: tuple[Spec, ...], target: str = "auto") -> None:
        """Nothing to do: the service measures the steps a class opens by link ahead, once for every
        app process (``service.py``)."""

    def close(self) -> None:
        """Nothing of this side runs in a thread of its own: a page's call returns with its answer."""
        with self._lock:
            self._proxy = None

    def _quietly(self, method: str, *args):
        try:
            return self.call(method, *args)
        except MeasureError:
            return None
