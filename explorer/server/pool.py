"""Processes of a server (TVM's ``PopenPoolExecutor``) that run one function at a time each, or,
where the server is given a cluster (``--workers``), the worker hosts' processes (``engine.py``)
with this machine's as their stand-in."""
from __future__ import annotations

import concurrent.futures
import ctypes
import logging
import os
import site
import threading
from pathlib import Path

from ..build import Spec, build
from ..cuda_env import SOURCE_ONLY
from ..errors import ExplorerError
from ..processes import named_start
from . import engine
from .settings import ServerSettings

log = logging.getLogger(__name__)

ROOT = str(Path(__file__).resolve().parents[2])  # so pool processes can import explorer
POOL_BUILDS = 8  # builds a build or compile process keeps (explorer.build's cache)


class ProcessPool:
    """``workers`` processes (TVM's ``PopenPoolExecutor``), started by ``initializer`` on
    first use: runs a function in one of them, with one sentence for a process that ran past
    the time limit or crashed."""

    warm_templates: int | None = None  # templates each process builds as it starts (None: all it is given)
    source_only = True  # on a worker host, its calls compile no CUDA binary (a build process's)

    def __init__(self, settings: ServerSettings, workers: int, initializer, environment=None, *,
                 release_heap: bool = False, name: str = "pool worker", priority: int | None = None):
        self.settings = settings
        # The worker hosts where the server is given a cluster and this pool's calls may go there
        # (``priority``: the engine's order between the pools, higher first); None: this machine only.
        self.engine = engine.workers_at(settings.workers) if settings.workers and priority is not None else None
        self.priority = priority or 0
        self.workers = workers
        self._initializer = initializer
        self.name = name  # each process's name (``ps -o comm``): what a look at the machine tells apart
        self._environment = environment  # () -> variables the processes inherit
        self._release_heap = release_heap  # after each call, the heap's free pages go back (release_free_heap)
        self._pool = None
        self._pool_lock = threading.Lock()
        self._closed = False
        self.ready = threading.Event()  # the processes have started and imported what they need

    def run(self, function, *args, doing: str = "Building this setting", key: str | None = None):
        """``function(*args)`` on a worker host where the server has some (``key``: the content key of what
        it makes, so that the server's processes asking for it at once have it made once), else, or
        where none can, in one of this machine's processes (it returns an ExplorerError as a value);
        raises ExplorerError with the sentence for a call that ran too long or crashed."""
        if self.engine is not None:
            try:
                outcome = self.engine.run(function, *args, source_only=self.source_only, priority=self.priority,
                                          key=key, limit_s=self.settings.build_time_limit_s)
            except engine.NoWorkers as why:
                log.info("%s here: %s", doing, why)
            except engine.Crashed:
                raise ExplorerError("The compile process crashed on this setting on every worker host it was "
                                    "given. Try another setting.") from None
            else:
                if isinstance(outcome, ExplorerError):
                    raise outcome
                return outcome
        return self.run_here(function, *args, doing=doing)

    def run_here(self, function, *args, doing: str = "Building this setting"):
        """``function(*args)`` in one of this machine's processes (see :meth:`run`)."""
        call = (_released, function, *args) if self._release_heap else (function, *args)
        try:
            outcome = self._executor().submit(*call).result()
        except TimeoutError:
            raise ExplorerError(f"{doing} took longer than {self.settings.build_time_limit_s} s, "
                                "so it was stopped; try fewer unrolled or smaller loops.") from None
        except ChildProcessError:
            raise ExplorerError("The compile process crashed on this setting; it was restarted. "
                                "Try another setting.") from None
        if isinstance(outcome, ExplorerError):
            raise outcome
        return outcome

    def start(self, warm_specs: tuple[Spec, ...] = (), target: str = "auto") -> None:
        """Start the processes now (each imports TVM and what ``warm_specs``' templates need,
        seconds) rather than on a student's first knob change. With a cluster that can be reached, its
        worker hosts warm themselves as they start, and this machine's processes start only when a call
        falls back to them."""
        if self.engine is not None:
            try:
                self.engine.connect()
            except engine.NoWorkers:
                pass  # this machine's processes, warmed below, stand in until it can be reached
            else:
                self.ready.set()
                return
        try:
            pool = self._executor()
        except ExplorerError:  # closed before it started
            return
        # Each process warms the templates in its own order, so that where they compile
        # (the compile pool) each compiles a different one first and finds most of the
        # others' binaries on disk.
        templates = list({spec.template: spec for spec in reversed(warm_specs)}.values())
        futures = [pool.submit(_pool_ready, tuple((templates[i:] + templates[:i])[:self.warm_templates]), target)
                   for i in range(self.workers)]
        try:
            # Ready once one process is: a request waits in the pool's queue for the first
            # process free, rather than for the slowest warm-up (a fresh class server's
            # compile processes took over a minute to be all warm, while the measuring
            # worker compiled every kernel itself and the GPU waited).
            for future in concurrent.futures.as_completed(futures):
                future.result()
                break
            self.ready.set()
            for future in futures:
                future.result()
        except (ValueError, OSError, ChildProcessError):
            if self._closed:  # the server closed while its processes were starting
                return
            raise

    def close(self) -> None:
        self._closed = True
        if self.engine is not None:
            self.engine.close()
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def _executor(self):
        from tvm.support.popen_pool import PopenPoolExecutor

        with self._pool_lock:
            if self._closed:  # a call after close() starts no process again
                raise ExplorerError("The server is stopping; this was not done.")
            if self._pool is None:
                if self._environment is not None:
                    os.environ.update(self._environment())  # the children inherit it
                self._pool = PopenPoolExecutor(max_workers=self.workers, timeout=self.settings.build_time_limit_s,
                                               initializer=named_start, initargs=(self.name, self._initializer, ROOT))
            return self._pool


def release_free_heap() -> None:
    """Give the free pages of this process's heap back to the operating system (glibc's
    ``malloc_trim``; nothing elsewhere). A call that builds dozens of settings frees most of
    what it allocated, but glibc keeps the pages, between the objects that stay, for the next
    call: the diagnosing process's resident memory stood at ~810 MiB with 280-350 MiB of it
    free heap (bench/worker_memory.py). The trim takes ~6 ms there (16 ms at most), against
    seconds for a diagnosis."""
    try:
        libc = ctypes.CDLL(None)
        trim = libc.malloc_trim
    except (OSError, AttributeError):  # not glibc: musl, macOS
        return
    trim(0)


def _released(function, *args):
    """``function(*args)`` in a pool process, then its freed heap released (``release_heap``)."""
    try:
        return function(*args)
    finally:
        release_free_heap()


def source_only_process_init(root: str) -> None:
    """A process that builds CUDA source and never compiles a binary."""
    site.addsitedir(root)
    os.environ[SOURCE_ONLY] = "1"


def _pool_ready(warm_specs: tuple[Spec, ...] = (), target: str = "auto") -> int:
    """Import TVM (the slow part of a first build) and, by building one setting of each of
    ``warm_specs``' templates, whatever those import on first use (the tensor-core
    intrinsics take seconds)."""
    for spec in warm_specs:  # one setting of each template (ProcessPool.start)
        try:
            build(spec, target)
        except ExplorerError:
            pass  # a step this machine cannot build shows its own sentence when opened
    return os.getpid()
