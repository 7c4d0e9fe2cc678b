"""One GPU's measuring, shared by the app processes of a class server.

A class server with several app processes (``python -m explorer serve --app-processes N``)
runs one measuring service per GPU: a process of its own holding the server's one
:class:`~explorer.live.Live` *measuring* half (the scheduler, the compile processes, the
measuring worker, PyTorch's baselines, the roofline's ceilings and the warm-up). Every app
process reaches it through :class:`SharedLive`, a ``Live`` whose builds stay its own and
whose measurements go to the service, so that however many app processes serve the pages,
one kernel at a time is timed on the GPU, a setting is measured once for the whole class and
each student has at most one measurement waiting.

The service speaks the standard library's ``multiprocessing.managers`` protocol on a
Unix socket, with a key that only the server's own processes are given. TVM's RPC server
is the way to a *remote* GPU (the service sends jobs there when a page names a tracker),
but it spawns a process per session (a second or more before a kernel runs): a page move
of a student cannot wait for that.

A page holds a :class:`SharedJob`, a view of the service's job that asks again for its state
when the page looks. If the service stops (it is restarted by ``serve``), a page's job says
so and is asked for again once the service answers: no request is lost.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from multiprocessing.managers import BaseManager, RemoteError

from .build import Spec
from .lessons import first_lesson_specs, lesson_specs
from .live import Live, ServerSettings
from .measure import MeasureError
from .measure.scheduler import LOCAL
from .presets import default_spec
from .serve import APP_SHARE as SHARE
from .serve import MEASURING_ADDRESS as ADDRESS
from .serve import MEASURING_KEY as KEY
from .serve import warm_file
from .warm_up import WarmUp

UNREACHABLE = ("The measuring service is restarting; this measurement is asked for again as soon as it is back "
               "(the code and the analyses are unaffected).")

WAIT_S = 1.0  # a wait without a limit asks the service again this often

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobView:
    """What a page reads of a job of the service: plain data."""

    key: tuple
    state: str  # compiling, waiting, running, done, dropped; "unreachable": the service did not answer
    result: object = None
    error: str | None = None
    quick: bool = False
    finished_at: float | None = None
    sessions: frozenset = frozenset()
    ahead: int | None = None  # measurements ahead of it on its device (0: being measured)
    service: str = ""  # the service that answered (a restarted one has another name)


def view_of(job, ahead: int | None, service: str) -> JobView:
    return JobView(job.key, job.state, job.result, job.error, job.quick, job.finished_at,
                   frozenset(job.sessions), ahead, service)


class Service:
    """The service's side: a ``Live`` whose measuring answers the app processes."""

    def __init__(self, live: Live):
        self.live = live
        self.name = uuid.uuid4().hex  # a job view from another service is one this one never had

    def request(self, session, spec: Spec, target: str, remote=None, background: bool = False) -> JobView:
        job = self.live.request(session, spec, target, remote, background=background)
        return view_of(job, self.live.position(job), self.name)

    def look(self, key: tuple, wait_s: float = 0.0) -> JobView:
        """The job of ``key`` now, after waiting up to ``wait_s`` for it to finish ("dropped": no
        session waits for it any more)."""
        job = self.live.scheduler.find(key)
        if job is None:
            return JobView(key, "dropped", service=self.name)
        if wait_s > 0:
            job.wait(wait_s)
        return view_of(job, self.live.position(job), self.name)

    def result(self, spec: Spec, target: str, remote=None):
        return self.live.result(spec, target, remote)

    def ceilings(self):
        return self.live.ceilings()

    def latest_ceilings(self):
        return self.live.latest_ceilings()

    def baseline(self, workload):
        return self.live.baseline(workload)

    def baseline_now(self, workload):
        return self.live.baseline_now(workload)

    def warm(self) -> WarmUp:
        return self.live.warm

    def stats(self) -> dict:
        return {key: value for key, value in self.live.stats().items() if key not in ("builds", "pages")}


class _Server(BaseManager):
    """The service's side of the socket."""


class _Client(BaseManager):
    """An app process's side: ``service()`` is the service's proxy."""


_Client.register("service")


def serve_forever(live: Live, address: str, key: bytes) -> None:
    """Answer the app processes at ``address`` until the process ends."""
    service = Service(live)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(address)  # the socket of a service that was killed: this one replaces it
    _Server.register("service", callable=lambda: service)
    manager = _Server(address=address, authkey=key)
    server = manager.get_server()
    log.info("measuring service: listening at %s", address)
    server.serve_forever()


def connect(address: str, key: bytes, timeout_s: float = 0.0):
    """A proxy of the service at ``address`` (it may be used from any thread: each thread gets
    its own connection); waits up to ``timeout_s`` for a service that is starting."""
    deadline = time.monotonic() + timeout_s
    while True:
        manager = _Client(address=address, authkey=key)
        try:
            manager.connect()
            return manager.service()
        except (OSError, EOFError):
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


class SharedJob:
    """A page's handle on a job of the service: ``done``, ``wait`` and ``position`` ask the
    service again; a job the service lost (it restarted) is asked for again."""

    def __init__(self, live: SharedLive, ask: tuple, view: JobView):
        self._live, self._ask, self.view = live, ask, view

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
            self.view = self._live.ask(*self._ask)
            return self.view
        asked_of = self.view.service
        self.view = self._live.call("look", self.view.key, wait_s, key=self.view.key)
        if self.view.state == "dropped" and self.view.service != asked_of:  # a restarted service never had it
            self.view = self._live.ask(*self._ask)
        return self.view


class SharedLive(Live):
    """An app process's ``Live`` on a multi-process server: its builds and diagnoses are its
    own, its measurements the measuring service's (at ``EXPLORER_MEASURING``)."""

    def __init__(self, address: str, key: bytes, settings: ServerSettings | None = None):
        self._address, self._key = address, key
        # One proxy for every thread (each thread gets its own connection from it): a page run's
        # thread connects once, not once per call.
        self._proxy = None
        self._lock = threading.Lock()
        self._warm: WarmUp | None = None
        super().__init__(settings, measuring=False)
        # One diagnosis per setting for the whole server: its app processes share them (explorer/diagnoses.py).
        self.diagnoses.share(os.path.join(os.path.dirname(address), "diagnoses"))

    # -- the service ---------------------------------------------------------------------

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

    def ask(self, session, spec: Spec, target: str, remote=None, background: bool = False) -> JobView:
        device = remote.name if remote is not None else LOCAL
        return self.call("request", session, spec, target, remote, background, key=(spec, target, device))

    # -- the API the pages use -----------------------------------------------------------

    def request(self, session, spec: Spec, target: str, remote=None, *, background: bool = False) -> SharedJob:
        ask = (session, spec, target, remote, background)
        return SharedJob(self, ask, self.ask(*ask))

    def result(self, spec: Spec, target: str, remote=None):
        try:
            return self.call("result", spec, target, remote)
        except MeasureError:
            return None

    def position(self, job: SharedJob) -> int | None:
        view = job.look()
        return 0 if view.state == "running" else view.ahead if view.state == "waiting" else None

    def ceilings(self):
        return self._quietly("ceilings")

    def latest_ceilings(self):
        return self._quietly("latest_ceilings")

    def baseline(self, workload):
        return self._quietly("baseline", workload)

    def baseline_now(self, workload):
        return self.call("baseline_now", workload)

    @property
    def warm(self) -> WarmUp:
        """The service's warm-up (kept once it has ended: it ends once)."""
        if self._warm is not None:
            return self._warm
        try:
            warm = self.call("warm")
        except MeasureError:
            warm = WarmUp()
            warm.steps.append(("the measuring service is starting", 0.0))
            return warm
        if warm.done:
            self._warm = warm
        return warm

    @warm.setter
    def warm(self, value) -> None:  # Live.__init__ sets it
        pass

    def stats(self) -> dict:
        """As Live's; without "measurements", "queues" and "baselines" while the service does not answer."""
        try:
            measuring = self.call("stats")
        except MeasureError:
            measuring = {}
        return {**measuring, "builds": self.builds.stats(), "pages": self.page_runs.stats()}

    def start(self, first: Spec | None = None, target: str = "auto", build_ahead: tuple[Spec, ...] = (),
              measure_ahead: tuple[Spec, ...] = ()) -> None:
        """Start the build processes, then build this process's share of ``build_ahead`` (the
        builds on disk serve the others' shares); the service measures."""
        number, count = (int(part) for part in os.environ.get(SHARE, "0/1").split("/"))

        def start() -> None:
            self._start_builds()
            while not self.warm.done:
                time.sleep(0.5)
            if self.warm.gpu:  # as Live: a laptop without a GPU keeps its cores for its one user
                self._build_ahead(build_ahead[number::count], target)

        threading.Thread(target=start, name="live-start", daemon=True).start()

    def close(self) -> None:
        self.diagnoses.close()
        self.diagnosing.close()
        self.builds.close()

    def _quietly(self, method: str, *args):
        try:
            return self.call(method, *args)
        except MeasureError:
            return None


def shared_live() -> SharedLive | None:
    """This process's ``SharedLive`` where it is an app process of a multi-process server, else None."""
    address = os.environ.get(ADDRESS)
    return SharedLive(address, bytes.fromhex(os.environ[KEY])) if address else None


def _say_when_warm(live: Live, address: str) -> None:
    live.ready.wait()
    with open(warm_file(address), "w") as file:
        file.write(live.warm.error or live.warm.device or "")


def main(argv: list[str] | None = None) -> None:
    """``python -m explorer.measuring``: the service of a multi-process server (``serve`` starts it)."""
    parser = argparse.ArgumentParser(prog="python -m explorer.measuring", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    address, key = os.environ.get(ADDRESS), os.environ.get(KEY)
    if not address or not key:
        sys.exit(f"error: the measuring service needs {ADDRESS} and {KEY}; python -m explorer serve sets them.")
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO)
    live = Live(ServerSettings(build_workers=0, diagnose=False))
    try:
        # The steps a class opens by link are measured ahead, the first lesson's first.
        live.start(default_spec(), measure_ahead=first_lesson_specs() + lesson_specs())
        threading.Thread(target=_say_when_warm, args=(live, address), name="warm-file", daemon=True).start()
        serve_forever(live, address, bytes.fromhex(key))
    finally:
        live.close()


if __name__ == "__main__":
    # Run as the module explorer.measuring, not as __main__: the app processes unpickle its
    # JobViews by that name.
    from explorer import measuring

    measuring.main()
