"""The class's build and compile work on worker hosts, as tasks of Dask distributed
(``python -m explorer serve --workers ADDRESS``; each host: ``python -m explorer worker ADDRESS``).

A server's build pool and compile pool (``pool.py``) send each call here when the server is given a
cluster (``ServerSettings.workers``); without one nothing here is used and Dask is never imported.
:class:`Workers` is this process's one client of the cluster: a call goes to a worker of this
server's versions and source only (the engine's resource, ``content_keys.host_resource``), the pages'
builds before the compiles (the engine's priorities), and a call asked twice by the server's
processes while it runs is run once (its key is the content key of what it makes). What a worker
host returns is plain bytes (a pickled build, a library): the server keeps them on its disk
(``build_disk.py``), the class's one cache, and the measuring worker loads the libraries from there.

Faults: a host that disappears mid-call has its calls run again on another host by the engine's
scheduler; where no host of the right versions is left, the cluster cannot be reached, or a call
outlives the time limit there, :meth:`Workers.run` raises :class:`NoWorkers` and the pool runs the
call in this machine's processes. A call that kills every worker it is given (a setting that crashes
TVM) raises :class:`Crashed`. Nothing here imports TVM or the explorer's library: a worker process's
start is ``host_worker.py``.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from collections import Counter, OrderedDict

from ..cuda_env import SOURCE_ONLY
from .content_keys import host_resource

log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 10  # joining the cluster as the server starts; past it the server builds and compiles here
MADE_KEPT = 4096  # the keys whose worker is remembered (stats, tests)
LOOK_S = 1.0  # how often a call that waits looks whether a worker of its versions is still there


class NoWorkers(Exception):
    """No worker host can run the call now: it runs in this machine's processes instead."""


class Crashed(Exception):
    """The call ended every worker process it was given (the engine's allowed failures)."""


class Workers:
    """This process's client of the cluster at ``address``: connected on first use (or :meth:`connect`),
    closed with the server."""

    def __init__(self, address: str):
        self.address = address
        self.resource = host_resource()
        self._client = None
        self._lock = threading.Lock()
        self._closed = False
        self._failed_at = None  # time.monotonic() of the last failed connection: tried again after LOOK_S * 10
        self._seen_at, self._seen = 0.0, False  # the last look at the cluster's workers, and what it found
        self.ran_on: Counter = Counter()  # calls run, by worker name
        self.made_by: OrderedDict[str, str] = OrderedDict()  # the worker that made each key, the latest MADE_KEPT
        self.ran_here = 0  # calls this machine's processes ran because no host could
        self.broken = 0  # libraries that came back not whole (compiles.whole_library)

    def connect(self):
        """The client, connected (seconds at most: ``CONNECT_TIMEOUT_S``); raises NoWorkers where the
        cluster cannot be reached."""
        with self._lock:
            if self._closed:
                raise NoWorkers("the server is closing")
            if self._client is not None:
                return self._client
            if self._failed_at is not None and time.monotonic() - self._failed_at < LOOK_S * 10:
                raise NoWorkers(f"the cluster at {self.address} could not be reached")
            import distributed  # only a server given a cluster pays for the engine's import (0.4 s)

            try:
                self._client = distributed.Client(self.address, timeout=CONNECT_TIMEOUT_S, set_as_default=False,
                                                  name=f"explorer server {os.getpid()}")
            except (OSError, TimeoutError, distributed.TimeoutError) as error:
                self._failed_at = time.monotonic()
                log.warning("The cluster at %s could not be reached (%s): building and compiling here", self.address,
                            error)
                raise NoWorkers(f"the cluster at {self.address} could not be reached") from None
            return self._client

    def has_workers(self) -> bool:
        """Whether the cluster has a worker of this server's versions (looked at once per LOOK_S)."""
        if time.monotonic() - self._seen_at < LOOK_S:
            return self._seen
        try:
            client = self.connect()
            # Asked of the scheduler itself: the client's own copy of this (scheduler_info) is overwritten every
            # 2 s by a look at the totals only, whose "workers" is empty.
            workers = client.sync(client.scheduler.identity, n_workers=-1)["workers"].values()
            self._seen = any(worker.get("resources", {}).get(self.resource) for worker in workers)
        except NoWorkers:
            self._seen = False
        except Exception as error:  # the scheduler went away meanwhile
            log.info("The cluster could not be asked for its workers: %r", error)
            self._seen = False
            self._drop_if_closed()
        self._seen_at = time.monotonic()
        return self._seen

    def _drop_if_closed(self) -> None:
        """A client that gave up on a scheduler gone for good is dropped: the next look connects anew (a
        scheduler started again is joined again), at most once per LOOK_S * 10."""
        with self._lock:
            if self._client is not None and self._client.status in ("closed", "closing"):
                self._client, self._failed_at = None, time.monotonic()

    def run(self, function, *args, source_only: bool = False, priority: int = 0, key: str | None = None,
            limit_s: float = 120):
        """``function(*args)`` on a worker host (``source_only``: where no CUDA binary is compiled, as in
        a build process), its outcome; raises NoWorkers (run it here instead) or Crashed."""
        import distributed
        from distributed.scheduler import KilledWorker

        if not self.has_workers():
            self.ran_here += 1
            raise NoWorkers(f"no worker of these versions at {self.address}")
        future = self.connect().submit(host_call, source_only, function, *args, key=key, pure=key is not None,
                                       priority=priority, resources={self.resource: 1})
        deadline = time.monotonic() + limit_s
        try:
            while True:
                try:
                    host, outcome = future.result(timeout=LOOK_S)
                except distributed.TimeoutError:
                    if time.monotonic() > deadline:
                        raise NoWorkers(f"no worker host answered within {limit_s:g} s") from None
                    if not self.has_workers():
                        raise NoWorkers(f"no worker of these versions left at {self.address}") from None
                    continue
                except KilledWorker:
                    raise Crashed() from None
                except (distributed.CancelledError, OSError) as error:  # the scheduler was lost
                    raise NoWorkers(f"the cluster was lost ({type(error).__name__})") from None
                self.ran_on[host] += 1
                if key is not None:
                    self.made_by[key] = host
                    while len(self.made_by) > MADE_KEPT:
                        self.made_by.popitem(last=False)
                return outcome
        except NoWorkers:
            future.cancel()
            self.ran_here += 1
            raise

    def stats(self) -> dict:
        return {"address": self.address, "ran on": dict(self.ran_on), "ran here": self.ran_here,
                "libraries not whole": self.broken}

    def close(self) -> None:
        with self._lock:
            self._closed = True
            client, self._client = self._client, None
        if client is not None:
            try:
                client.close(timeout=5)
            except Exception as error:  # a scheduler already gone
                log.info("The cluster's client closed with %r", error)


_WORKERS: dict[str, Workers] = {}
_WORKERS_LOCK = threading.Lock()


def workers_at(address: str) -> Workers:
    """This process's one client of the cluster at ``address`` (its build and compile pools share it)."""
    with _WORKERS_LOCK:
        workers = _WORKERS.get(address)
        if workers is None or workers._closed:
            workers = _WORKERS[address] = Workers(address)
        return workers


def host_call(source_only: bool, function, *args):
    """In a worker process of a host: ``function(*args)`` as a build process (``source_only``: no CUDA
    binary compiled) or a compile process runs it, and the worker's name beside its outcome."""
    from distributed import get_worker

    saved = os.environ.get(SOURCE_ONLY)
    if source_only:
        os.environ[SOURCE_ONLY] = "1"
    else:
        os.environ.pop(SOURCE_ONLY, None)
    try:
        outcome = function(*args)
    finally:
        if saved is None:
            os.environ.pop(SOURCE_ONLY, None)
        else:
            os.environ[SOURCE_ONLY] = saved
    return get_worker().name, outcome
