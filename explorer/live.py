"""The live loop of one server shared by many sessions (a class of students on one GPU machine).

:class:`Live` is the server's one way to measure (:meth:`Live.request`, :meth:`Live.measure_now`,
:meth:`Live.baseline`, :meth:`Live.ceilings`, :meth:`Live.stats`): every page and the
leaderboard go through it. It holds the services the pages and measurements are computed in
(``explorer/server/``: the build pool and its builds on disk, the compile pool), the
measurement scheduler (``explorer/server/scheduler.py``) and the GPUs it feeds, the
diagnosing process, the PyTorch baselines, the roofline's ceilings and the GPU's warm-up
(``explorer/server/warm_up.py``).

Nothing here imports streamlit: the app holds one :class:`Live` per server
(``st.cache_resource``) and the tests drive it directly.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import queue
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from . import measure
from .analysis.tiling import keep_tilings
from .build import Spec
from .errors import ExplorerError
from .measure.measurement import LOCAL_GPU, LocalGPU
from .measure.worker import Trial
from .server.builds import BuildService
from .server.compiles import CompileService
from .server.diagnosing import Diagnoses, diagnose_in_process
from .server.page_runs import PageRuns
from .server.pool import ProcessPool, source_only_process_init
from .server.scheduler import Scheduler
from .server.settings import DIAGNOSE_NICENESS, ServerSettings
from .server.single_flight import SingleFlight
from .server.warm_up import WarmUp, warm_up_local_gpu

CLOSE_WAIT_S = 30  # the longest close() waits for the warm-up to end
WAIT_REPORT_S = 0.25  # how often a caller waiting for a measurement hears its place in the queue
FIRST_MEASUREMENT_WAIT_S = 30  # the compile processes start after the first page's measurement, or this

log = logging.getLogger(__name__)

DIAGNOSIS_TILINGS = 8  # tilings the diagnosing process keeps (explorer.analysis.tiling's cache)
NOT_DIAGNOSED = "This server does not diagnose settings (EXPLORER_DIAGNOSE=0)."


def _not_diagnosed(*args) -> ExplorerError:
    return ExplorerError(NOT_DIAGNOSED)


def _background_pool_init(root: str) -> None:
    """A build process for the server's own work (diagnoses): the operating system runs the
    pages' builds first where cores are short. It keeps explorer.build's 128 builds (a setting
    is diagnosed again once measured, and its neighbours are then built from the cache) but few
    tilings: a diagnosis reads a few numbers from each neighbour's, which takes milliseconds to
    make again, and 64 of them held ~150 MiB (bench/worker_memory.py)."""
    source_only_process_init(root)
    os.nice(DIAGNOSE_NICENESS)
    keep_tilings(DIAGNOSIS_TILINGS)


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

    def __init__(self, settings: ServerSettings | None = None, measure_fn=None, warm_up_fn=None, compile_fn=None, *,
                 measuring: bool = True):
        self.settings = settings or ServerSettings()
        self.builds = BuildService(self.settings, here_until_ready=True)
        self.page_runs = PageRuns()
        # A process of its own: a diagnosis builds dozens of settings, and the pages' builds must
        # not queue behind it (a 2-core machine has one build process).
        # Each diagnosis frees most of what its builds allocated: the heap's free pages go back.
        self.diagnosing = ProcessPool(self.settings, 1, _background_pool_init, release_heap=True,
                                       name="diagnose worker")
        self.diagnoses = Diagnoses(self._diagnose if self.settings.diagnose else _not_diagnosed)
        if not measuring:  # an app process of a multi-process server: the measuring service measures
            return
        self.compiles = CompileService(self.settings)
        self.ready = threading.Event()
        self.warm = WarmUp()
        self._warm_up_fn = warm_up_fn or warm_up_local_gpu
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
        self._starting = threading.Thread(target=self._start, args=(first, target, build_ahead, measure_ahead),
                                          name="live-start", daemon=True)
        self._starting.start()

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
            # start: each imports TVM and builds a lesson template, which on a server whose
            # app processes are starting too took the cores from it (13.9 s on a 16-core H100).
            # Not once students wait for the GPU, though: until the compile processes are up, the
            # worker compiles each measurement itself, one at a time (a class of 200 connecting at
            # once had 136 waiting while the compile processes waited for this background job).
            self.warm.step(f"compile processes starting: {self._wait_first(first_job)}")
        if self.warm.gpu and self.scheduler.compiles:
            self.compiles.start(build_ahead or measure_ahead, target)
            self.warm.step("compile processes")
        pool.join()
        if first is not None and self.warm.gpu:
            self._measure_ceilings(target)

    def _wait_first(self, first_job, poll_s: float = 0.1) -> str:
        """Until ``first_job`` is measured, a student's measurement waits, or FIRST_MEASUREMENT_WAIT_S;
        which of them ended the wait (for the server's log)."""
        deadline = time.monotonic() + FIRST_MEASUREMENT_WAIT_S
        while not first_job.wait(poll_s):
            if self.scheduler.stats()["waiting"]:
                return "a student's measurement waits"
            if time.monotonic() >= deadline:
                return f"the first page not measured after {FIRST_MEASUREMENT_WAIT_S:g} s"
        return "the first page measured"

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
        return self.baselines.get((workload,), lambda: self.gpu.baseline(workload, measure.MeasureSettings()))

    def stats(self) -> dict:
        return {"builds": self.builds.stats(), "measurements": {**self.scheduler.stats(), "gpus": self.gpu_counts},
                "queues": self.scheduler.queue_lengths(), "baselines": self.baselines.stats(),
                "pages": self.page_runs.stats()}

    def close(self) -> None:
        starting = getattr(self, "_starting", None)
        if starting is not None and starting is not threading.current_thread():
            starting.join(CLOSE_WAIT_S)  # a warm-up still holding the GPU would hold it for the next user
        self.diagnoses.close()
        self.diagnosing.close()
        self.builds.close()
        self.compiles.close()
        self.scheduler.close()


def _measure_job(job, gpu: LocalGPU | None = None):
    """The scheduler's job on the device (``gpu``: one of this machine's, else the first or the
    job's remote one): the full budget, or the quick one while others wait."""
    settings = measure.QUICK_SETTINGS if job.quick else measure.MeasureSettings()
    if gpu is None:
        result = measure.measure(job.spec, target=job.target, remote=job.remote, settings=settings,
                                 library=job.compiled)
    else:
        result = gpu.measure(Trial(job.spec, job.spec.workload, job.target, settings, job.compiled))
    return dataclasses.replace(result, quick=job.quick)
