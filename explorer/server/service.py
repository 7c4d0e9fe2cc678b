"""The measuring service: one GPU machine's measuring, shared by the app processes of a class server.

A class server with several app processes (``python -m explorer serve --app-processes N``) runs
one measuring service (``python -m explorer.server.service``, which the launcher starts): a
process of its own holding the server's one :class:`~.in_process.MeasuringInProcess` (the queue,
the compile processes, the measuring workers, PyTorch's baselines, the roofline's ceilings and
the warm-up). Every app process reaches it through :class:`~.over_socket.MeasuringOverSocket`,
so that however many app processes serve the pages, one kernel at a time is timed on each GPU,
a setting is measured once for the whole class and each student has at most one measurement waiting.

The service speaks the standard library's ``multiprocessing.managers`` protocol on a Unix socket,
with a key that only the server's own processes are given. TVM's RPC server is the way to a
*remote* GPU (the service sends jobs there when a page names a tracker), but it spawns a process
per session (a second or more before a kernel runs): a page move of a student cannot wait for that.
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
from multiprocessing.managers import BaseManager

from ..build import Spec
from ..lessons import first_lesson_specs, lesson_specs
from ..measure import MeasureSettings
from ..presets import default_spec
from .in_process import MeasuringInProcess
from .launcher import MEASURING_ADDRESS as ADDRESS
from .launcher import MEASURING_KEY as KEY
from .launcher import warm_file
from .settings import ServerSettings
from .warm_up import WarmUp

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobView:
    """What an app process reads of a job of the service: plain data."""

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
    """The service's side of the socket: the measuring in this process, answering the app processes."""

    def __init__(self, measuring: MeasuringInProcess):
        self.measuring = measuring
        self.name = uuid.uuid4().hex  # a job view from another service is one this one never had

    def request(self, session, spec: Spec, target: str, remote=None, background: bool = False,
                settings: MeasureSettings | None = None) -> JobView:
        job = self.measuring.request(session, spec, target, remote, background=background, settings=settings)
        return view_of(job, self.measuring.position(job), self.name)

    def look(self, key: tuple, wait_s: float = 0.0) -> JobView:
        """The job of ``key`` now, after waiting up to ``wait_s`` for it to finish ("dropped": no
        session waits for it any more)."""
        job = self.measuring.find(key)
        if job is None:
            return JobView(key, "dropped", service=self.name)
        if wait_s > 0:
            job.wait(wait_s)
        return view_of(job, self.measuring.position(job), self.name)

    def result(self, spec: Spec, target: str, remote=None):
        return self.measuring.result(spec, target, remote)

    def ceilings(self):
        return self.measuring.ceilings()

    def baseline(self, workload):
        return self.measuring.baseline(workload)

    def baseline_now(self, workload):
        return self.measuring.baseline_now(workload)

    def warm_up_state(self) -> WarmUp:
        return self.measuring.warm_up_state()

    def stats(self) -> dict:
        return self.measuring.stats()


class _Server(BaseManager):
    """The service's side of the socket."""


class _Client(BaseManager):
    """An app process's side: ``service()`` is the service's proxy."""


_Client.register("service")


def serve_forever(measuring: MeasuringInProcess, address: str, key: bytes) -> None:
    """Answer the app processes at ``address`` until the process ends."""
    service = Service(measuring)
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


def _say_when_warm(measuring: MeasuringInProcess, address: str) -> None:
    measuring.ready.wait()
    warm = measuring.warm_up_state()
    with open(warm_file(address), "w") as file:
        file.write(warm.error or warm.device or "")


def _start(measuring: MeasuringInProcess, address: str) -> None:
    """Warm up, say so, then measure the steps a class opens by link ahead, the first lesson's first."""
    ahead = first_lesson_specs() + lesson_specs()
    measuring.start(default_spec(), ahead=ahead)
    _say_when_warm(measuring, address)
    if measuring.warm_up_state().gpu:
        measuring.measure_ahead(ahead)


def main(argv: list[str] | None = None) -> None:
    """``python -m explorer.server.service``: the measuring service of a class server (``serve`` starts it)."""
    parser = argparse.ArgumentParser(prog="python -m explorer.server.service", description=__doc__.split("\n\n")[0])
    parser.parse_args(argv)
    address, key = os.environ.get(ADDRESS), os.environ.get(KEY)
    if not address or not key:
        sys.exit(f"error: the measuring service needs {ADDRESS} and {KEY}; python -m explorer serve sets them.")
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.INFO)
    measuring = MeasuringInProcess(ServerSettings())
    try:
        threading.Thread(target=_start, args=(measuring, address), name="service-start", daemon=True).start()
        serve_forever(measuring, address, bytes.fromhex(key))
    finally:
        measuring.close()


if __name__ == "__main__":
    # Run as the module explorer.server.service, not as __main__: the app processes unpickle its
    # JobViews by that name.
    from explorer.server import service

    service.main()
