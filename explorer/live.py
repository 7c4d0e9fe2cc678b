"""The live loop of one server shared by many sessions (a class of students on one GPU machine).

- :class:`SingleFlight`: a bounded LRU of results where a key being computed is computed
  once; every other caller for that key waits for the same result.
- :class:`BuildService`: builds (lowering, verification, CUDA *source*) in a pool of
  processes (TVM's ``PopenPoolExecutor``), so compiles of different settings run on all
  cores instead of one after another under one GIL. The pool's processes never compile
  CUDA binaries (``TVM_COMPILE_FORCE_FALLBACK``): the one binary compile of a kernel
  happens in the measuring worker, with NVRTC's precompiled header and the disk cache.
- :class:`LiveSettings`: how big the caches are and how old a measurement may get.

Nothing here imports streamlit: the app holds one :class:`BuildService` per server
(``st.cache_resource``) and the tests drive it directly.
"""
from __future__ import annotations

import dataclasses
import os
import site
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

from .build import Build, Spec, build
from .errors import ExplorerError
from .measure.cuda_env import SOURCE_ONLY

ROOT = str(Path(__file__).resolve().parents[1])  # so pool processes can import explorer
AHEAD = "server: lesson steps ahead of the class"  # the measurement slot of what the server measures ahead
IDLE_POLL_S = 0.05  # how often measuring ahead looks whether a student's measurement waits

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class LiveSettings:
    """Server-wide sizes and ages, from the environment (``EXPLORER_*``) with reasoned defaults."""

    # One process per core: a class's knob changes are compiled side by side.
    build_workers: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_WORKERS", os.cpu_count() or 2))
    # A build holds its TIR modules (~100 KB); 512 covers a class exploring for an hour.
    build_cache: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_CACHE", 512))
    # A measurement is a few hundred bytes; the cache bounds memory, not the age.
    measure_cache: int = field(default_factory=lambda: _env_int("EXPLORER_MEASURE_CACHE", 4096))
    # Clocks, other tenants and driver updates drift; after this a setting is timed again.
    measure_max_age_s: int = field(default_factory=lambda: _env_int("EXPLORER_MEASURE_MAX_AGE_S", 1800))
    # Lowering a heavily unrolled kernel takes seconds; past this the build is abandoned.
    build_time_limit_s: int = field(default_factory=lambda: _env_int("EXPLORER_BUILD_TIME_LIMIT_S", 120))


def _env_int(name: str, default: int) -> int:
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    if not text.isdigit() or int(text) < 1:
        raise ExplorerError(f"{name} must be a positive whole number, not '{text}'.")
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


# -- builds in a process pool --------------------------------------------------------------


class BuildService:
    """Builds for the whole server: once per (spec, target), in parallel processes."""

    def __init__(self, settings: LiveSettings | None = None):
        self.settings = settings or LiveSettings()
        self._cache: SingleFlight[tuple, Build] = SingleFlight(self.settings.build_cache)
        self._pool = None
        self._pool_lock = threading.Lock()

    def build(self, spec: Spec, target: str) -> Build:
        """The build of ``spec`` for the target named ``target`` (raises ExplorerError)."""
        return self._cache.get((spec, target), lambda: self._build_in_pool(spec, target))

    def stats(self) -> dict:
        return {**self._cache.stats(), "workers": self.settings.build_workers}

    def start(self) -> None:
        """Start the pool's processes now (each imports TVM, a second or two) rather than
        on a student's first knob change."""
        pool = self._executor()
        for future in [pool.submit(_pool_ready) for _ in range(self.settings.build_workers)]:
            future.result()

    def close(self) -> None:
        with self._pool_lock:
            if self._pool is not None:
                self._pool.shutdown(wait=False)
                self._pool = None

    def _executor(self):
        from tvm.support.popen_pool import PopenPoolExecutor

        with self._pool_lock:
            if self._pool is None:
                self._pool = PopenPoolExecutor(max_workers=self.settings.build_workers,
                                               timeout=self.settings.build_time_limit_s,
                                               initializer=_pool_init, initargs=(ROOT,))
            return self._pool

    def _build_in_pool(self, spec: Spec, target: str) -> Build:
        start = time.perf_counter()
        try:
            outcome = self._executor().submit(build_source_only, spec, target).result()
        except TimeoutError:
            raise ExplorerError(f"Building this setting took longer than {self.settings.build_time_limit_s} s, "
                                "so it was stopped; try fewer unrolled or smaller loops.") from None
        except ChildProcessError:
            raise ExplorerError("The compile process crashed on this setting; it was restarted. "
                                "Try another setting.") from None
        if isinstance(outcome, ExplorerError):
            raise outcome
        outcome.timings_ms["pool round trip"] = round((time.perf_counter() - start) * 1000
                                                      - sum(outcome.timings_ms.values()), 2)
        return outcome


def _pool_init(root: str) -> None:
    site.addsitedir(root)
    os.environ[SOURCE_ONLY] = "1"


def _pool_ready() -> int:
    import explorer.build  # noqa: F401  (imports TVM: the slow part of a first build)

    return os.getpid()


def build_source_only(spec: Spec, target: str) -> Build | ExplorerError:
    """In a pool process: the build without its runtime module (it cannot cross processes
    and the app never runs kernels); an ExplorerError comes back as a value, intact."""
    try:
        built = build(spec, target)
    except ExplorerError as error:
        return error
    return dataclasses.replace(built, runtime_module=None, timings_ms=dict(built.timings_ms))


# -- the server: builds, measurements, a warm GPU --------------------------------------------


class Live:
    """Everything one server shares between its sessions: the build service, the
    measurement scheduler, the PyTorch baselines, and the GPU's warm-up.

    :meth:`start` returns at once; in the background it starts the build processes, warms
    the GPU (the measuring worker, CUDA, PyTorch, NVRTC's precompiled header), measures
    ``first`` (the page a student opens) and then the roofline's ceilings, so that the first
    latency a student waits for is a cached one or one warm measurement."""

    def __init__(self, settings: LiveSettings | None = None, measure_fn=None, warm_up_fn=None):
        from .measure.scheduler import Scheduler

        self.settings = settings or LiveSettings()
        self.builds = BuildService(self.settings)
        self.ready = threading.Event()
        self.warm = WarmUp()
        self._warm_up_fn = warm_up_fn or _warm_up_local_gpu
        self.scheduler = Scheduler(measure_fn or _measure_job, max_age_s=self.settings.measure_max_age_s,
                                   capacity=self.settings.measure_cache, ready=self.ready)
        self.baselines: SingleFlight[tuple, object] = SingleFlight(256)
        self._baseline_started: set = set()
        self._lock = threading.Lock()

    def start(self, first: Spec | None = None, target: str = "auto", build_ahead: tuple[Spec, ...] = (),
              measure_ahead: tuple[Spec, ...] = ()) -> None:
        """Warm up in the background; then, on a GPU, build ``build_ahead`` and measure
        ``measure_ahead`` (the lesson steps a class opens by link) while no student waits for
        the GPU."""
        threading.Thread(target=self._start, args=(first, target, build_ahead, measure_ahead), name="live-start",
                         daemon=True).start()

    def _start(self, first: Spec | None, target: str, build_ahead: tuple[Spec, ...] = (),
               measure_ahead: tuple[Spec, ...] = ()) -> None:
        self._warm_start(first, target)
        if self.warm.gpu:  # a class's server; a laptop without a GPU keeps its cores for its one user
            self._build_ahead(build_ahead, target)
            self._measure_ahead(measure_ahead, target)

    def _warm_start(self, first: Spec | None, target: str) -> None:
        self.builds.start()
        self.warm.step("build processes")
        try:
            device = self._warm_up_fn(first, target, self.warm)
        except ExplorerError as error:
            self.warm.fail(str(error))
        else:
            self.warm.finish(device)
        finally:
            self.ready.set()
        if first is not None and self.warm.gpu:
            self.scheduler.request("server warm-up", first, target)
            self.baseline(first.workload)
            self._measure_ceilings(target)

    def _build_ahead(self, specs: tuple[Spec, ...], target: str) -> None:
        """Build ``specs`` on all build processes at once: a link then shows its code at once."""
        def built(spec: Spec) -> bool:
            try:
                self.builds.build(spec, target)
            except ExplorerError:
                return False
            return True

        if specs:
            with ThreadPoolExecutor(self.settings.build_workers) as threads:
                count = sum(threads.map(built, specs))
            self.warm.step(f"{count} lesson steps built")

    def _measure_ahead(self, specs: tuple[Spec, ...], target: str) -> None:
        """Measure ``specs`` one at a time, each only when no student's measurement waits, so
        a student waits behind at most one of them."""
        for spec in specs:
            while any(self.scheduler.queue_lengths().values()):
                time.sleep(IDLE_POLL_S)
            self.scheduler.request(AHEAD, spec, target).wait()
        if specs:
            self.warm.step(f"{len(specs)} lesson steps measured")

    def _measure_ceilings(self, target: str) -> None:
        """The roofline's ceilings of the local GPU, once, after the warm-up (a few seconds
        of the device's time); measurements from then on carry them."""
        from . import measure

        start = time.time()
        found = measure.ceilings(target)
        self.warm.step(f"roofline ceilings {time.time() - start:.1f} s" if found is not None else
                       f"roofline ceilings not measured ({measure.ceilings_error(target)}); published figures shown")

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
        from . import measure

        self.ready.wait()
        try:
            self.baselines.get((workload,), lambda: measure.baseline(workload))
        except ExplorerError:
            pass  # PyTorch missing or failed: the panel simply shows no baseline

    def stats(self) -> dict:
        return {"builds": self.builds.stats(), "measurements": self.scheduler.stats(),
                "queues": self.scheduler.queue_lengths(), "baselines": self.baselines.stats()}

    def close(self) -> None:
        self.builds.close()


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

    def finish(self, device: str) -> None:
        self.device, self.done = device, True
        self.step("ready")

    def fail(self, reason: str) -> None:
        self.error, self.done = reason, True
        self.step("no GPU")


def _warm_up_local_gpu(first: Spec | None, target: str, warm: WarmUp) -> str:
    from . import measure
    from .targets import local_gpu_target

    if local_gpu_target() is None:  # no measuring worker to start on a machine without a GPU
        raise measure.NoDevice("No GPU on this machine: code and diagrams only.")
    report = measure.warm_up(first, target)
    for name, seconds in report.steps:
        warm.step(f"{name} {seconds:.1f} s")
    return report.device


def _measure_job(job):
    from . import measure

    return measure.measure(job.spec, target=job.target, remote=job.remote)
