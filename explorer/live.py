"""The live loop of one server shared by many sessions (a class of students on one GPU machine).

- :class:`SingleFlight`: a bounded LRU of results where a key being computed is computed
  once; every other caller for that key waits for the same result.
- :class:`BuildService`: builds (lowering, verification, CUDA *source*) in a pool of
  processes (TVM's ``PopenPoolExecutor``), so compiles of different settings run on all
  cores instead of one after another under one GIL. The pool's processes never compile
  CUDA binaries (``TVM_COMPILE_FORCE_FALLBACK``): the one binary compile of a kernel
  happens in the measuring worker, with NVRTC's precompiled header and the disk cache.
- :class:`CompileService`: compiles a measurement's kernel to a loadable library (lowering,
  NVRTC to a cubin, the host code) in a second pool of processes that may compile binaries,
  so the measuring worker only loads, checks and times.
- :class:`Live`: the server's one way to measure (:meth:`Live.request`, :meth:`Live.measure_now`,
  :meth:`Live.baseline`, :meth:`Live.ceilings`, :meth:`Live.stats`): every page and the
  leaderboard go through it.
- :class:`LiveSettings`: how big the caches are and how old a measurement may get.

Nothing here imports streamlit: the app holds one :class:`BuildService` per server
(``st.cache_resource``) and the tests drive it directly.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import pickle
import queue
import site
import tempfile
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import cloudpickle
import tvm  # already imported by .build; its version names the builds and libraries kept on disk

from . import measure
from .build import Build, Spec, build, keep_builds
from .cuda_env import SOURCE_ONLY, binary_process_init, kernel_environment
from .diagnoses import Diagnoses, diagnose_in_process
from .errors import ExplorerError
from .highlight import FIRST_VIEWS, VIEW_LANGUAGES, texts_html, views_html, views_texts
from .measure.measurement import LOCAL_GPU, LocalGPU
from .measure.scheduler import Scheduler
from .measure.worker import Job as KernelJob
from .targets import local_gpu_target, resolve_target

ROOT = str(Path(__file__).resolve().parents[1])  # so pool processes can import explorer
WAIT_REPORT_S = 0.25  # how often a caller waiting for a measurement hears its place in the queue
FIRST_MEASUREMENT_WAIT_S = 30  # the compile processes start after the first page's measurement, or this
COMPILE_NICENESS = 5  # the compile processes' priority under the pages' builds (os.nice)
POOL_BUILDS = 8  # builds a build or compile process keeps (explorer.build's cache)

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

log = logging.getLogger(__name__)  # the server's log says when each warm-up step ended


@dataclass(frozen=True)
class LiveSettings:
    """Server-wide sizes and ages, from the environment (``EXPLORER_*``) with reasoned defaults."""

    # Half the cores build the pages' code (a build is 50-300 ms); the other half compile
    # kernels to measure (NVRTC, 1-3 s each). 0: the server builds in its own process (one user
    # on a small machine: no process to start, no build copied between processes).
    build_workers: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_WORKERS",
                                                                max(1, (os.cpu_count() or 2) // 2), minimum=0))
    # A build with its highlighted views holds 0.2-5 MB (a Hopper or conv2d_async build 5 MB, measured);
    # the disk keeps every build, read back in a few ms, so a process keeps the recent ones.
    build_cache: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_CACHE", 128))
    # Builds kept on disk for every app process of the machine (a setting one process built is
    # read, not built, by the others): ~130 KB each (up to 2.5 MB), ~1 GB at 4096. 0: none kept.
    build_dir: str = field(default_factory=lambda: os.environ.get(
        "EXPLORER_BUILD_DIR", os.path.join(tempfile.gettempdir(), "explorer-builds")))
    build_disk_cache: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_DISK_CACHE", 4096, minimum=0))
    # A measurement is a few hundred bytes; the cache bounds memory, not the age.
    measure_cache: int = field(default_factory=lambda: _env_int("EXPLORER_MEASURE_CACHE", 4096))
    # Clocks, other tenants and driver updates drift; after this a setting is timed again.
    measure_max_age_s: int = field(default_factory=lambda: _env_int("EXPLORER_MEASURE_MAX_AGE_S", 1800))
    # Lowering a heavily unrolled kernel takes seconds; past this the build is abandoned.
    build_time_limit_s: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_TIME_LIMIT_S", 120))
    compile_workers: int = field(default_factory=lambda: _env_int("EXPLORER_COMPILE_WORKERS",
                                                                  max(1, (os.cpu_count() or 2) // 2)))
    # Where compiled kernels are kept for the measuring worker (a library is ~100 KB).
    library_dir: str = field(default_factory=lambda: os.environ.get(
        "EXPLORER_LIBRARY_DIR", os.path.join(tempfile.gettempdir(), "explorer-kernel-libraries")))
    # A diagnosis builds every neighbour of a setting (seconds of CPU, at low priority); a small
    # machine may keep its cores for the pages' builds: 0 runs no diagnosing process.
    diagnose: bool = field(default_factory=lambda: _env_flag("EXPLORER_DIAGNOSE", True))
    # The GPUs to measure on, one measuring worker each: the first this many of those the server
    # sees (``serve`` sets it on a machine with several).
    gpus: int = field(default_factory=lambda: _env_int("EXPLORER_GPUS", 1))


def _env_flag(name: str, default: bool) -> bool:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if text not in ("0", "1"):
        raise ExplorerError(f"{name} must be 1 (on) or 0 (off), not '{text}'.")
    return text == "1"


def _env_int(name: str, default: int, minimum: int = 1) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < minimum:
        kind = "a positive whole number" if minimum == 1 else f"a whole number from {minimum}"
        raise ExplorerError(f"{name} must be {kind}, not '{text}'.")
    return int(text)


class SingleFlight(Generic[K, V]):
    """Results by key, least recently used dropped beyond ``maxsize``; a key in flight is
    computed once and its callers share the result (or the ExplorerError it raised)."""

    def __init__(self, maxsize: int):
        self.maxsize = maxsize
        self._lock = threading.Lock()
        self._done: OrderedDict[K, tuple[bool, object]] = OrderedDict()
        self._flying: dict[K, Future] = {}
        self.hits = self.misses = self.shared = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._done)

    def clear(self) -> None:
        """Forget every result (those in flight still reach their callers)."""
        with self._lock:
            self._done.clear()

    def get(self, key: K, compute: Callable[[], V]) -> V:
        """The result for ``key``: cached, or the one being computed, or ``compute()``."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                self.hits += 1
                return self._unwrap(self._done[key])
            future = self._flying.get(key)
            owner = future is None
            if owner:
                future = self._flying[key] = Future()
                self.misses += 1
            else:
                self.shared += 1
        if not owner:
            return self._unwrap(future.result())
        try:
            outcome = (True, compute())
        except ExplorerError as error:  # a setting that cannot be built stays unbuildable
            outcome = (False, error)
        except BaseException as error:
            with self._lock:
                del self._flying[key]
            future.set_exception(error)
            raise
        with self._lock:
            self._done[key] = outcome
            while len(self._done) > self.maxsize:
                self._done.popitem(last=False)
            del self._flying[key]
        future.set_result(outcome)
        return self._unwrap(outcome)

    def peek(self, key: K) -> V | None:
        """The cached result, without computing or counting (None when absent or an error)."""
        with self._lock:
            ok, value = self._done.get(key, (False, None))
        return value if ok else None

    def stats(self) -> dict:
        with self._lock:
            return {"entries": len(self._done), "capacity": self.maxsize, "computing": len(self._flying),
                    "hits": self.hits, "misses": self.misses, "shared": self.shared}

    @staticmethod
    def _unwrap(outcome: tuple[bool, object]):
        ok, value = outcome
        if not ok:
            raise value
        return value


# -- processes of the server ---------------------------------------------------------------


class ProcessPool:
    """``workers`` processes (TVM's ``PopenPoolExecutor``), started by ``initializer`` on
    first use: runs a function in one of them, with one sentence for a process that ran past
    the time limit or crashed."""

    def __init__(self, settings: LiveSettings, workers: int, initializer, environment=None):
        self.settings = settings
        self.workers = workers
        self._initializer = initializer
        self._environment = environment  # () -> variables the processes inherit
        self._pool = None
        self._pool_lock = threading.Lock()
        self._closed = False
        self.ready = threading.Event()  # the processes have started and imported what they need

    def run(self, function, *args, doing: str = "Building this setting"):
        """``function(*args)`` in one of the processes (it returns an ExplorerError as a
        value); raises ExplorerError with the sentence for a process that ran too long or crashed."""
        try:
            outcome = self._executor().submit(function, *args).result()
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
        seconds) rather than on a student's first knob change."""
        pool = self._executor()
        try:
            for future in [pool.submit(_pool_ready, warm_specs, target) for _ in range(self.workers)]:
                future.result()
        except (ValueError, OSError, ChildProcessError):
            if self._closed:  # the server closed while its processes were starting
                return
            raise
        self.ready.set()

    def close(self) -> None:
        self._closed = True
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def _executor(self):
        from tvm.support.popen_pool import PopenPoolExecutor

        with self._pool_lock:
            if self._pool is None:
                if self._environment is not None:
                    os.environ.update(self._environment())  # the children inherit it
                self._pool = PopenPoolExecutor(max_workers=self.workers, timeout=self.settings.build_time_limit_s,
                                               initializer=self._initializer, initargs=(ROOT,))
            return self._pool


# -- builds in a process pool --------------------------------------------------------------


class BuildService(ProcessPool):
    """Builds for the whole server: once per (spec, target), in parallel processes; once per
    machine where the app processes share a folder of builds on disk (``build_dir``)."""

    def __init__(self, settings: LiveSettings | None = None, *, here_until_ready: bool = False):
        settings = settings or LiveSettings()
        super().__init__(settings, settings.build_workers, _build_pool_init)
        self._cache: SingleFlight[tuple, Build] = SingleFlight(self.settings.build_cache)
        # A server's processes take seconds to start (each imports TVM, all at once on a busy
        # machine); until :meth:`start` has them ready, this process builds what a page asks
        # for itself, one build at a time, so the first page never waits for them. With no
        # build processes (build_workers 0) it always does.
        self._here_until_ready = here_until_ready or self.workers == 0
        self._here_lock = threading.Lock()
        self.built_here = 0
        self.read_from_disk = 0
        self._disk_since = 0  # files on disk written before this (time.time_ns()) are not read: forget()

    def build(self, spec: Spec, target: str) -> Build:
        """The build of ``spec`` for the target named ``target`` (raises ExplorerError)."""
        return self._cache.get((spec, target), lambda: self._build(spec, target))

    def forget(self) -> None:
        """Forget every build: the next request for each is built again (bench/build_latency.py).
        The files on disk stay for the machine's other servers; this one no longer reads them."""
        self._cache.clear()
        self._disk_since = time.time_ns()

    def start(self, warm_specs: tuple[Spec, ...] = (), target: str = "auto") -> None:
        if self.workers:  # else never ready: every build is made in this process
            super().start(warm_specs, target)

    def _build(self, spec: Spec, target: str) -> Build:
        path = self._disk_path(spec, target)
        start = time.perf_counter()
        kept = self._read_disk(path)
        if kept is not None:
            return self._kept_build(kept, start)
        # One build at a time here (the GIL runs one anyway); a build waiting for its turn
        # goes to the processes as soon as they are ready.
        while self._here_until_ready and not self.ready.is_set():
            if self._here_lock.acquire(timeout=0.05):
                try:
                    return self._build_here(spec, target, path)
                finally:
                    self._here_lock.release()
        return self._build_in_pool(spec, target, path)

    @functools.cached_property
    def _disk(self) -> str | None:
        """The folder of builds kept on disk; None where none are kept, or where another user
        could write to it (reading a pickle runs code the file names)."""
        if not self.settings.build_disk_cache:
            return None
        directory = self.settings.build_dir
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            info = os.stat(directory)
        except OSError as error:
            log.warning("Builds are not kept on disk: %s", error)
            return None
        if info.st_uid != os.getuid() or info.st_mode & 0o022:
            log.warning("Builds are not kept on disk: other users may write to %s.", directory)
            return None
        return directory

    def _disk_path(self, spec: Spec, target: str) -> str | None:
        if self._disk is None:
            return None
        # The resolved target: "auto" is another GPU on another machine sharing the folder.
        key = build_key(spec, str(resolve_target(target)), tvm.__version__, source_fingerprint())
        return os.path.join(self._disk, key + ".pickle")

    def _read_disk(self, path: str | None) -> Build | ExplorerError | None:
        """The outcome another process kept at ``path``; None where there is none to read (a
        file cut short or of an older format is built again and replaced)."""
        if path is None:
            return None
        try:
            with open(path, "rb") as file:
                if os.fstat(file.fileno()).st_mtime_ns < self._disk_since:
                    return None
                kept = cloudpickle.loads(file.read())
        except FileNotFoundError:
            return None
        except Exception as error:  # truncated, or classes that changed: anything unpickling raises
            log.info("Build on disk %s not read: %r", path, error)
            return None
        if not isinstance(kept, Build | ExplorerError):
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # the bound on disk removes the least recently used first
        return kept

    def _kept_build(self, kept: Build | ExplorerError, start: float) -> Build:
        self.read_from_disk += 1
        if isinstance(kept, ExplorerError):
            raise kept
        kept.timings_ms = {"read from disk": round((time.perf_counter() - start) * 1000, 2)}
        if not (self._here_until_ready and not self.ready.is_set()):
            self._highlight_the_rest(kept)  # as after a build in the processes
        return kept

    def _highlight_the_rest(self, built: Build) -> None:
        """The build's other code views, highlighted in a build process after it is shown
        (until then a page that opens one highlights it itself)."""
        rest = views_texts(built, [view for view in VIEW_LANGUAGES if view not in built.views_html])
        future = self._executor().submit(texts_html, rest)
        future.add_done_callback(lambda done: done.exception() is None and built.views_html.update(done.result()))

    def _build_here(self, spec: Spec, target: str, path: str | None = None) -> Build:
        self.built_here += 1
        outcome = build_source_only(spec, target, (), path, self.settings.build_disk_cache)
        if isinstance(outcome, ExplorerError):
            raise outcome
        return outcome

    def stats(self) -> dict:
        return {**self._cache.stats(), "workers": self.workers, "built in this process": self.built_here,
                "read from disk": self.read_from_disk}

    def _build_in_pool(self, spec: Spec, target: str, path: str | None = None) -> Build:
        start = time.perf_counter()
        outcome = self.run(build_source_only, spec, target, FIRST_VIEWS, path, self.settings.build_disk_cache)
        self._highlight_the_rest(outcome)
        outcome.timings_ms["pool round trip"] = round((time.perf_counter() - start) * 1000
                                                      - sum(outcome.timings_ms.values()), 2)
        return outcome


def _pool_init(root: str) -> None:
    site.addsitedir(root)
    os.environ[SOURCE_ONLY] = "1"


def _build_pool_init(root: str) -> None:
    """A build process of the pages: the app process keeps its builds (and the disk every
    process's), so this one keeps few."""
    _pool_init(root)
    keep_builds(POOL_BUILDS)


NOT_DIAGNOSED = "This server does not diagnose settings (EXPLORER_DIAGNOSE=0)."


def _not_diagnosed(*args) -> ExplorerError:
    return ExplorerError(NOT_DIAGNOSED)


def _background_pool_init(root: str) -> None:
    """A build process for the server's own work (diagnoses): the operating system runs the
    pages' builds first where cores are short."""
    _pool_init(root)
    os.nice(10)


def _pool_ready(warm_specs: tuple[Spec, ...] = (), target: str = "auto") -> int:
    """Import TVM (the slow part of a first build) and, by building one setting of each of
    ``warm_specs``' templates, whatever those import on first use (the tensor-core
    intrinsics take seconds)."""
    for spec in {spec.template: spec for spec in reversed(warm_specs)}.values():
        try:
            build(spec, target)
        except ExplorerError:
            pass  # a step this machine cannot build shows its own sentence when opened
    return os.getpid()


def build_source_only(spec: Spec, target: str, highlight: tuple[str, ...] = (), keep_at: str | None = None,
                      keep_at_most: int = 0) -> Build | ExplorerError:
    """In a pool process: the build without its runtime module (it cannot cross processes
    and the app never runs kernels), with its code views ``highlight`` highlighted (the app's
    one process then only sends them); an ExplorerError comes back as a value, intact.
    Either is also written to ``keep_at`` for the machine's other servers."""
    try:
        built = build(spec, target)
    except ExplorerError as error:
        outcome = error  # a setting that cannot be built stays unbuildable
    else:
        timings = dict(built.timings_ms)
        views = {}
        if highlight:
            start = time.perf_counter()
            views = views_html(built, highlight)
            timings["highlight"] = round((time.perf_counter() - start) * 1000, 2)
        outcome = dataclasses.replace(built, runtime_module=None, timings_ms=timings, views_html=views)
    if keep_at is not None:
        _keep(outcome, keep_at, keep_at_most)
    return outcome


# -- builds kept on disk, shared by a machine's servers --------------------------------------

PRUNE_EVERY = 64  # a process counts the files on disk at its first write and every 64th after
_kept = 0


def build_key(spec: Spec, target: str, tvm_version: str, source: str) -> str:
    """The name of ``spec``'s build for ``target`` on disk: everything its outcome depends on
    (``source``: :func:`source_fingerprint`)."""
    return hashlib.sha256(f"{tvm_version}|{source}|{target}|{spec!r}".encode()).hexdigest()


@functools.cache
def source_fingerprint() -> str:
    """The explorer package's source as this process first saw it: an edited checkout never
    reads a build made by the code before."""
    return package_fingerprint(Path(__file__).resolve().parent)


def package_fingerprint(package: Path) -> str:
    """A hash of the name, size and modification time of every Python file under ``package``."""
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        info = path.stat()
        digest.update(f"{path.relative_to(package)}|{info.st_size}|{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _keep(outcome: Build | ExplorerError, path: str, at_most: int) -> None:
    """Write ``outcome`` to ``path`` as the pool sends it back, whole or not at all (other
    processes may read it at once); past ``at_most`` files the oldest go."""
    global _kept
    partial = f"{path}.{os.getpid()}.{threading.get_ident()}.part"
    try:
        with open(partial, "wb") as file:
            file.write(cloudpickle.dumps(outcome, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(partial, path)
    except OSError as error:  # a full disk: the build is still shown, only not kept
        log.warning("Build not kept on disk: %s", error)
        with contextlib.suppress(OSError):
            os.remove(partial)
        return
    if _kept % PRUNE_EVERY == 0:
        _prune(os.path.dirname(path), at_most)
    _kept += 1


def _prune(directory: str, at_most: int) -> None:
    """Past ``at_most`` files in ``directory``, remove the least recently written or read down
    to 90 % of it (one count of the folder, not one per write)."""
    try:
        with os.scandir(directory) as found:
            entries = [entry for entry in found if entry.name.endswith((".pickle", ".part"))]
    except OSError:
        return
    if len(entries) <= at_most:
        return

    def modified(entry: os.DirEntry) -> int:
        try:
            return entry.stat().st_mtime_ns
        except OSError:  # removed by another process meanwhile
            return 0

    for entry in sorted(entries, key=modified)[:len(entries) - at_most * 9 // 10]:
        with contextlib.suppress(OSError):
            os.remove(entry.path)


# -- kernels compiled for measuring, in a pool of their own ---------------------------------


class CompileService(ProcessPool):
    """Compiles the kernels to measure on all the cores it is given, in processes that may
    compile binaries (unlike the build pool's): each returns the path of a library the
    measuring worker loads, or None where no library can be exported here (no C compiler),
    and the worker then compiles the kernel itself."""

    def __init__(self, settings: LiveSettings):
        super().__init__(settings, settings.compile_workers, _compile_pool_init, kernel_environment)

    def compile(self, spec: Spec, target: str) -> str | None:
        """The library of ``spec``'s kernel for ``target`` (raises ExplorerError); None while
        the processes are still starting (the worker then compiles the kernel itself)."""
        if not self.ready.is_set():
            return None
        return self.run(compile_library, spec, target, self.settings.library_dir, doing="Compiling this setting")


def _compile_pool_init(root: str) -> None:
    """A compile process: where cores are short, the operating system runs the pages' builds
    first (a student waits for the code before the latency)."""
    binary_process_init(root)
    os.nice(COMPILE_NICENESS)
    keep_builds(POOL_BUILDS)  # each setting is compiled once: its library is kept on disk


def library_path(spec: Spec, target: str, directory: str) -> str:
    """Where ``spec``'s compiled kernel for ``target`` is kept: one file per setting, TVM
    version and target."""
    key = hashlib.sha256(f"{tvm.__version__}|{target}|{spec!r}".encode()).hexdigest()
    return os.path.join(directory, key + ".so")


def compile_library(spec: Spec, target: str, directory: str) -> str | None | ExplorerError:
    """In a compile process: build ``spec`` (NVRTC compiles its CUDA, through the disk cache)
    and export it as a library; None where exporting fails (no C compiler); an ExplorerError
    comes back as a value, intact."""
    path = library_path(spec, target, directory)
    if os.path.exists(path):
        return path
    try:
        built = build(spec, target)
    except ExplorerError as error:
        return error
    os.makedirs(directory, exist_ok=True)
    partial = f"{path}.{os.getpid()}.so"
    try:
        built.runtime_module.export_library(partial)
    except Exception:  # no C compiler or linker on this machine: the worker compiles instead
        return None
    os.replace(partial, path)  # whole or absent: other processes may read it at once
    return path


# -- the server: builds, measurements, a warm GPU --------------------------------------------


class Live:
    """Everything one server shares between its sessions, and its one way to measure: the
    build service, the compile service, the measurement scheduler, the PyTorch baselines,
    the roofline's ceilings and the GPU's warm-up. Pages and the leaderboard call
    :meth:`request` (the page's latency, never blocking), :meth:`measure_now` (a lesson's
    steps, a submission, a sweep), :meth:`result`, :meth:`position`, :meth:`baseline`,
    :meth:`ceilings` and :meth:`stats`; nothing else in the app reaches the measuring worker.
    ``diagnoses`` computes each setting's diagnosis once, in a process of its own.

    :meth:`start` returns at once; in the background it starts the build and compile
    processes, warms the GPU (the measuring worker, CUDA, PyTorch, NVRTC's precompiled header),
    measures ``first`` (the page a student opens) and then the roofline's ceilings, so that the
    first latency a student waits for is a cached one or one warm measurement."""

    def __init__(self, settings: LiveSettings | None = None, measure_fn=None, warm_up_fn=None, compile_fn=None, *,
                 measuring: bool = True):
        self.settings = settings or LiveSettings()
        self.builds = BuildService(self.settings, here_until_ready=True)
        self.page_runs = PageRuns()
        # A process of its own: a diagnosis builds dozens of settings, and the pages' builds must
        # not queue behind it (a 2-core machine has one build process).
        self.diagnosing = ProcessPool(self.settings, 1, _background_pool_init)
        self.diagnoses = Diagnoses(self._diagnose if self.settings.diagnose else _not_diagnosed)
        if not measuring:  # an app process of a multi-process server: the measuring service measures
            return
        self.compiles = CompileService(self.settings)
        self.ready = threading.Event()
        self.warm = WarmUp()
        self._warm_up_fn = warm_up_fn or _warm_up_local_gpu
        # This process's ways to its GPUs (worker, queue, name, ceilings): the first GPU, or one per
        # GPU of ``settings.gpus``; a job takes whichever is free.
        self.gpus = [LOCAL_GPU, *(LocalGPU(str(index)) for index in range(1, self.settings.gpus))]
        self.gpu = self.gpus[0]
        self._free_gpus: queue.Queue = queue.Queue()
        for gpu in self.gpus:
            self._free_gpus.put(gpu)
        self.gpu_counts = [{"measured": 0, "crashed": 0} for _ in self.gpus]
        self._warm_other_gpus = warm_up_fn is None  # a stand-in warm-up stands in for every GPU
        if measure_fn is None:  # the real GPU: its kernels compiled on all cores first
            measure_fn, compile_fn = self._measure_on_a_gpu, compile_fn or self._compile_job
        self.scheduler = Scheduler(measure_fn, max_age_s=self.settings.measure_max_age_s,
                                   capacity=self.settings.measure_cache, ready=self.ready, compile_fn=compile_fn,
                                   compile_workers=self.settings.compile_workers, local_gpus=len(self.gpus))
        self.baselines: SingleFlight[tuple, object] = SingleFlight(256)
        self._baseline_started: set = set()
        self._ceilings = None
        self._lock = threading.Lock()

    def _diagnose(self, *args):
        return self.diagnosing.run(diagnose_in_process, *args, doing="Diagnosing this setting")

    # -- the API the pages use --------------------------------------------------------------

    def request(self, session, spec: Spec, target: str, remote=None, *, background: bool = False):
        """Ask for ``spec``'s measurement for ``session`` and return its job at once (done,
        or compiling/waiting/running: the page polls ``job.done`` or waits on ``job.wait``)."""
        return self.scheduler.request(session, spec, target, remote, background=background)

    def measure_now(self, spec: Spec, target: str = "auto", remote=None, timeout: float | None = None,
                    on_wait=None):
        """``spec``'s measurement, waiting for it (a lesson's steps, a leaderboard submission,
        a sweep's points); ``on_wait(ahead)`` hears how many measurements are ahead while it
        waits. A failed one raises MeasureError with its sentence."""
        job = self.request(("measure now", threading.get_ident(), time.monotonic()), spec, target, remote)
        deadline = None if timeout is None else time.monotonic() + timeout
        told = None
        while not job.wait(WAIT_REPORT_S):
            if deadline is not None and time.monotonic() > deadline:
                raise measure.MeasureError(f"The measurement did not finish within {timeout:g} s; it stays queued.")
            ahead = self.position(job)
            if on_wait is not None and ahead and ahead != told:
                on_wait(ahead)
                told = ahead
        if job.error is not None:
            raise measure.MeasureError(job.error)
        return job.result

    def measurer(self, target: str = "auto", remote=None):
        """``spec -> median µs`` through :meth:`measure_now` for a sweep (a wrong kernel
        raises WrongResult), or None where nothing can measure (no GPU and no tracker)."""
        if remote is None and not self.warm.gpu:
            return None

        def latency_us(spec: Spec) -> float:
            result = self.measure_now(spec, target, remote)
            if not result.correct:
                raise measure.WrongResult(f"The kernel's output is {result.check.describe()}; "
                                          "a wrong kernel gets no latency.")
            return result.median_us

        return latency_us

    def gpu_name(self) -> str | None:
        """The local GPU's name once the warm-up found one, else None."""
        return self.warm.device if self.warm.gpu else None

    def result(self, spec: Spec, target: str, remote=None):
        """The measurement of ``spec`` already taken, or None; asks for nothing."""
        return self.scheduler.result(spec, target, remote)

    def position(self, job) -> int | None:
        """Measurements ahead of ``job`` on its device (0: being measured; None: done or compiling)."""
        return self.scheduler.position(job)

    def ceilings(self):
        """The local GPU's measured roofline ceilings, or None (not measured, or no GPU)."""
        return self._ceilings

    def latest_ceilings(self):
        """The ceilings of the latest measurement that carries some (a remote GPU's too), or
        the local GPU's, or None."""
        latest = self.scheduler.latest(lambda r: getattr(r, "ceilings", None) is not None)
        return latest.ceilings if latest is not None else self._ceilings

    # -- starting -------------------------------------------------------------------------

    def start(self, first: Spec | None = None, target: str = "auto", build_ahead: tuple[Spec, ...] = (),
              measure_ahead: tuple[Spec, ...] = ()) -> None:
        """Warm up in the background; then, on a GPU, build ``build_ahead`` and measure
        ``measure_ahead`` (the lesson steps a class opens by link) while no student waits for
        the GPU."""
        threading.Thread(target=self._start, args=(first, target, build_ahead, measure_ahead), name="live-start",
                         daemon=True).start()

    def _start(self, first: Spec | None, target: str, build_ahead: tuple[Spec, ...] = (),
               measure_ahead: tuple[Spec, ...] = ()) -> None:
        self._warm_start(first, target, build_ahead, measure_ahead)
        if self.warm.gpu:  # a class's server; a laptop without a GPU keeps its cores for its one user
            self._build_ahead(build_ahead, target)
            self._measure_ahead(measure_ahead, target)

    def _warm_start(self, first: Spec | None, target: str, build_ahead: tuple[Spec, ...] = (),
                    measure_ahead: tuple[Spec, ...] = ()) -> None:
        """The GPU's warm-up first, with the build processes starting beside it: the first
        page's latency waits only for the measuring worker. The compile processes start once
        the GPU is warm; until they are, the worker compiles what it measures itself."""
        pool = threading.Thread(target=self._start_builds, name="build-pool-start", daemon=True)
        pool.start()
        others = [threading.Thread(target=self._warm_up_other, args=(index, first, target), daemon=True)
                  for index in range(1, len(self.gpus)) if self._warm_other_gpus]
        for thread in others:  # the machine's other GPUs warm up beside the first
            thread.start()
        try:
            device = self._warm_up_fn(first, target, self.warm)
            for thread in others:
                thread.join()
        except ExplorerError as error:
            self.warm.fail(str(error))
        else:
            self.warm.finish(device)
        finally:
            self.ready.set()
        if first is not None and self.warm.gpu:
            first_job = self.scheduler.request(None, first, target, background=True)
            self.baseline(first.workload)
            # The first page's latency (the worker compiles it) before the compile processes
            # start: each imports TVM and builds every lesson template, which on a server whose
            # app processes are starting too took the cores from it (13.9 s on a 16-core H100).
            first_job.wait(FIRST_MEASUREMENT_WAIT_S)
        if self.warm.gpu and self.scheduler.compiles:
            self.compiles.start(build_ahead or measure_ahead, target)
            self.warm.step("compile processes")
        pool.join()
        if first is not None and self.warm.gpu:
            self._measure_ceilings(target)

    def _warm_up_other(self, index: int, first: Spec | None, target: str) -> None:
        try:
            self.gpus[index].warm_up(first, target)
        except ExplorerError as error:  # its measurements say why, one by one
            self.warm.step(f"GPU {index} not warm ({error})")
        else:
            self.warm.step(f"GPU {index} warm")

    def _start_builds(self) -> None:
        self.builds.start()
        if self.builds.workers:  # none (EXPLORER_BUILD_WORKERS=0): the pages are built in this process
            self.warm.step("build processes")

    def _build_ahead(self, specs: tuple[Spec, ...], target: str) -> None:
        """Build ``specs`` on half the build processes: a link then shows its code at once, and
        the students arriving meanwhile keep the other half (the pool serves in order)."""
        def built(spec: Spec) -> bool:
            try:
                self.builds.build(spec, target)
            except ExplorerError:
                return False
            return True

        if specs:
            with ThreadPoolExecutor(max(1, self.settings.build_workers // 2)) as threads:
                count = sum(threads.map(built, specs))
            self.warm.step(f"{count} lesson steps built")

    def _measure_ahead(self, specs: tuple[Spec, ...], target: str) -> None:
        """Measure ``specs`` as background jobs: the device takes each only when no
        student's measurement waits, so a student waits behind at most one of them. At most
        half the compile processes hold steps ahead at a time: a student's compile never
        queues behind the whole list."""
        window = max(1, self.settings.compile_workers // 2)
        outstanding: deque = deque()
        unique = tuple(dict.fromkeys(specs))
        for spec in unique:
            if len(outstanding) >= window:
                outstanding.popleft().wait()
            outstanding.append(self.scheduler.request(None, spec, target, background=True))
        for job in outstanding:
            job.wait()
        if unique:
            self.warm.step(f"{len(unique)} lesson steps measured")

    def _measure_ceilings(self, target: str) -> None:
        """The roofline's ceilings of the local GPU, once, after the warm-up (a few seconds
        of the device's time); measurements from then on carry them."""
        start = time.time()
        self._ceilings = self.gpu.ceilings(target)
        for gpu in self.gpus[1:]:  # the machine's other GPUs are the same model
            gpu.share_ceilings(self.gpu)
        self.warm.step(f"roofline ceilings {time.time() - start:.1f} s" if self._ceilings is not None else
                       f"roofline ceilings not measured ({self.gpu.ceilings_error(target)}); published figures shown")

    def _measure_on_a_gpu(self, job):
        """``job`` on a free GPU of this machine (or its remote device). A GPU whose worker died
        mid-run (a crashing kernel, or the process killed) hands the job to another GPU once,
        where the machine has several."""
        if job.remote is not None:
            return _measure_job(job)
        for attempt in (1, 2):
            gpu = self._free_gpus.get()
            index = self.gpus.index(gpu)
            try:
                result = _measure_job(job, gpu)
                self.gpu_counts[index]["measured"] += 1
                return dataclasses.replace(result, gpu=str(index)) if len(self.gpus) > 1 else result
            except measure.KernelCrashed:
                self.gpu_counts[index]["crashed"] += 1
                if attempt == 2 or len(self.gpus) == 1:
                    raise
                log.warning("GPU %d: the measuring worker died mid-run; the job goes to another GPU", index)
            finally:
                self._free_gpus.put(gpu)  # last in line: the retry takes another GPU where one is free

    def _compile_job(self, job) -> str | None:
        return self.compiles.compile(job.spec, job.target)

    # -- PyTorch ---------------------------------------------------------------------------

    def baseline(self, workload) -> object | None:
        """PyTorch's time for ``workload`` on the local GPU when known; otherwise start
        measuring it (once per server, in the background) and return None."""
        result = self.baselines.peek((workload,))
        if result is not None:
            return result
        with self._lock:
            if workload in self._baseline_started:
                return None
            self._baseline_started.add(workload)
        threading.Thread(target=self._baseline, args=(workload,), name="baseline", daemon=True).start()
        return None

    def _baseline(self, workload) -> None:
        try:
            self.baseline_now(workload)
        except ExplorerError:
            pass  # PyTorch missing or failed: the panel simply shows no baseline

    def baseline_now(self, workload):
        """PyTorch's measurement of ``workload`` on the local GPU, waiting for it (once per
        server); raises MeasureError where PyTorch cannot run it."""
        self.ready.wait()
        return self.baselines.get((workload,), lambda: self.gpu.baseline(workload, measure.Settings()))

    def stats(self) -> dict:
        return {"builds": self.builds.stats(), "measurements": {**self.scheduler.stats(), "gpus": self.gpu_counts},
                "queues": self.scheduler.queue_lengths(), "baselines": self.baselines.stats(),
                "pages": self.page_runs.stats()}

    def close(self) -> None:
        self.diagnoses.close()
        self.diagnosing.close()
        self.builds.close()
        self.compiles.close()
        self.scheduler.close()


class PageRuns:
    """What a page run costs the server: the CPU time of each run's script thread (the
    latest ``window`` runs), which bounds how many students one app process carries."""

    def __init__(self, window: int = 1024):
        self._lock = threading.Lock()
        self._recent: deque[float] = deque(maxlen=window)
        self.count = 0

    def record(self, cpu_s: float) -> None:
        with self._lock:
            self._recent.append(cpu_s)
            self.count += 1

    def stats(self) -> dict:
        """Runs so far, and the median and 95th percentile of the recent ones' CPU (ms)."""
        with self._lock:
            recent = sorted(self._recent)
        if not recent:
            return {"runs": self.count, "p50_ms": None, "p95_ms": None}
        def at(q: float) -> float:
            return recent[min(len(recent) - 1, round(q * (len(recent) - 1)))] * 1000

        return {"runs": self.count, "p50_ms": at(0.5), "p95_ms": at(0.95)}


class WarmUp:
    """What the GPU's warm-up has done so far: shown as "warming up the GPU…" until ready."""

    def __init__(self):
        self.steps: list[tuple[str, float]] = []
        self.started = time.time()
        self.device: str | None = None
        self.error: str | None = None
        self.done = False

    @property
    def gpu(self) -> bool:
        return self.done and self.error is None

    def step(self, name: str) -> None:
        self.steps.append((name, round(time.time() - self.started, 2)))
        log.info("warm-up: %s (at %.1f s)", name, self.steps[-1][1])

    def finish(self, device: str) -> None:
        self.device, self.done = device, True
        self.step("ready")

    def fail(self, reason: str) -> None:
        self.error, self.done = reason, True
        self.step("no GPU")


def warm_up_gpu_early(first: Spec | None, target: str = "auto") -> None:
    """Start the measuring worker and warm the GPU before any page asks (a class server's
    launcher calls this before its port opens). The server's :class:`Live` warms up through
    the same worker when the first page arrives and finds it warm; it reports the outcome,
    so a failure here is left for it to say."""
    try:
        _warm_up_local_gpu(first, target, WarmUp())
    except ExplorerError:
        pass


def _warm_up_local_gpu(first: Spec | None, target: str, warm: WarmUp) -> str:
    if local_gpu_target() is None:  # no measuring worker to start on a machine without a GPU
        raise measure.NoDevice("No GPU on this machine: code and diagrams only.")
    report = measure.warm_up(first, target)
    for name, seconds in report.steps:
        warm.step(f"{name} {seconds:.1f} s")
    return report.device


def _measure_job(job, gpu: LocalGPU | None = None):
    """The scheduler's job on the device (``gpu``: one of this machine's, else the first or the
    job's remote one): the full budget, or the quick one while others wait."""
    settings = measure.QUICK_SETTINGS if job.quick else measure.Settings()
    if gpu is None:
        result = measure.measure(job.spec, target=job.target, remote=job.remote, settings=settings,
                                 library=job.compiled)
    else:
        result = gpu.measure(KernelJob(job.spec, job.spec.workload, job.target, settings, job.compiled))
    return dataclasses.replace(result, quick=job.quick)
