"""Measuring in this process: the measurement queue (``scheduler.py``), the compile processes
(``compiles.py``), this machine's GPUs with their measuring workers (``local_gpus.py``), PyTorch's
baselines, the roofline's ceilings and the GPU's warm-up (``warm_up.py``).

A server of one app process measures here; so does the measuring service of a server of several
(``service.py``), for every app process. The tests give it stand-ins for the GPU (``measure_fn``,
``warm_up_fn``) and the compile processes (``compile_fn``).
"""
from __future__ import annotations

import logging
import threading
import time
from collections import deque

from ..build import Spec
from ..errors import ExplorerError
from ..measure import MeasureError, MeasureSettings
from .compiles import CompileService
from .local_gpus import LocalGPUs
from .measure_store import SERVER, GPUBusy, MeasurementStore, describe, gpu_turn
from .measuring import Measuring
from .scheduler import CompileFn, MeasureFn, Scheduler
from .settings import ServerSettings
from .single_flight import SingleFlight
from .warm_up import WarmUp, warm_up_local_gpu

CLOSE_WAIT_S = 30  # what close() waits for a call on a GPU before it stops the GPUs' workers
FIRST_MEASUREMENT_WAIT_S = 30  # the compile processes start after the first page's measurement, or this
POLL_S = 0.2  # how often a wait looks whether the server closes

log = logging.getLogger(__name__)


class MeasuringInProcess(Measuring):
    """The queue, the compile processes, the GPUs, the baselines, the ceilings and the warm-up of
    a server, in this process.

    :meth:`start` returns at once; in the background it warms the GPU (the measuring worker, CUDA,
    PyTorch, NVRTC's precompiled header), measures ``first`` (the page a student opens), starts the
    compile processes and measures the roofline's ceilings, so that the first latency a student
    waits for is a cached one or one warm measurement."""

    def __init__(self, settings: ServerSettings | None = None, measure_fn: MeasureFn | None = None,
                 warm_up_fn=None, compile_fn: CompileFn | None = None):
        self.settings = settings or ServerSettings()
        self.compiles = CompileService(self.settings)
        self.ready = threading.Event()  # the warm-up has ended (with or without a GPU)
        self._started = threading.Event()  # ... and what follows it too: the compile processes, the ceilings
        self.warm = WarmUp()
        self._warm_up_fn = warm_up_fn or warm_up_local_gpu
        self.gpus = LocalGPUs(self.settings.gpus)
        self._warm_other_gpus = warm_up_fn is None  # a stand-in warm-up stands in for every GPU
        if measure_fn is None:  # the real GPUs: their kernels compiled on all cores first
            measure_fn, compile_fn = self.gpus.measure, compile_fn or self.compiles.compile
        self.scheduler = Scheduler(measure_fn, max_age_s=self.settings.measure_max_age_s,
                                   capacity=self.settings.measure_cache, ready=self.ready, compile_fn=compile_fn,
                                   compile_workers=self.settings.compile_workers, local_gpus=len(self.gpus),
                                   on_finished=self._keep)
        # The measurements kept on disk (measure_store.py): opened once the warm-up has named the GPU;
        # what this server read there at its start, for its Device page. ``measured_by``: who this side
        # says measured what it keeps there ("prepare": python -m explorer prepare).
        self.store: MeasurementStore | None = None
        self.stored: dict = {"loaded": 0}
        self.measured_by = SERVER
        self._gpu_turn = None  # the lock file that takes the GPU in turn with a prepare (measure_store.gpu_turn)
        self.baselines: SingleFlight[tuple, object] = SingleFlight(256)
        self._baseline_started: set = set()
        self._ceilings = None
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._threads: list[threading.Thread] = []  # every thread this side starts: close() ends them

    # -- measuring --------------------------------------------------------------------------

    def request(self, session, spec: Spec, target: str, remote=None, *, background: bool = False,
                settings: MeasureSettings | None = None):
        return self.scheduler.request(session, spec, target, remote, background=background, settings=settings)

    def find(self, key: tuple):
        """The job of ``key`` under way, else its last result's, else None (the measuring service's look)."""
        return self.scheduler.find(key)

    def result(self, spec: Spec, target: str, remote=None):
        return self.scheduler.result(spec, target, remote)

    def position(self, job) -> int | None:
        return self.scheduler.position(job)

    def ceilings(self):
        latest = self.scheduler.latest(lambda r: getattr(r, "ceilings", None) is not None)
        return latest.ceilings if latest is not None else self._ceilings

    def warm_up_state(self) -> WarmUp:
        return self.warm

    def baseline(self, workload):
        result = self.baselines.peek((workload,))
        if result is not None:
            return result
        with self._lock:
            if workload in self._baseline_started or self._closing.is_set():
                return None
            self._baseline_started.add(workload)
        self._thread(self._baseline, (workload,), "baseline")
        return None

    def _baseline(self, workload) -> None:
        try:
            self.baseline_now(workload)
        except ExplorerError:
            pass  # PyTorch missing or failed: the panel simply shows no baseline

    def baseline_now(self, workload):
        while not self.ready.wait(POLL_S):
            if self._closing.is_set():
                raise MeasureError("The server closed before PyTorch's time was measured.")
        return self.baselines.get((workload,), lambda: self.gpus.first.baseline(workload, MeasureSettings()))

    def stats(self) -> dict:
        return {"measurements": {**self.scheduler.stats(), "gpus": self.gpus.counts, "stored": self.stored},
                "queues": self.scheduler.queue_lengths(), "baselines": self.baselines.stats()}

    # -- starting ---------------------------------------------------------------------------

    def start(self, first: Spec | None = None, target: str = "auto", ahead: tuple[Spec, ...] = (), *,
              ceilings: bool = False) -> None:
        """``ceilings``: measure the roofline's ceilings after the warm-up even without a ``first`` page
        (a prepare: every measurement it keeps carries them)."""
        self._thread(self._start, (first, target, ahead, ceilings), "measuring-start")

    def wait_started(self) -> None:
        """Until the warm-up and what follows it (the compile processes, the ceilings) have ended, or the close."""
        while not self._started.wait(POLL_S):
            if self._closing.is_set():
                return

    def _start(self, first: Spec | None, target: str, ahead: tuple[Spec, ...] = (), ceilings: bool = False) -> None:
        try:
            self._warm_start(first, target, ahead, ceilings)
        finally:
            self._started.set()

    def _warm_start(self, first: Spec | None, target: str, ahead: tuple[Spec, ...] = (),
                    ceilings: bool = False) -> None:
        """The GPU's warm-up, then the first page's measurement, then the compile processes (until
        they are up the measuring worker compiles what it measures itself), then the ceilings."""
        others = [self._thread(self._warm_up_other, (index, first, target), f"gpu-{index}-warm-up")
                  for index in range(1, len(self.gpus)) if self._warm_other_gpus]
        try:
            device = self._warm_up_fn(first, target, self.warm)
            for thread in others:  # the machine's other GPUs warm up beside the first
                thread.join()
        except ExplorerError as error:
            self.warm.fail(str(error))
        else:
            self._open_store(device)  # before any job runs: what was measured before is not measured again
            self.warm.finish(device)
        finally:
            self.ready.set()
        if self._closing.is_set() or not self.warm.gpu:
            return
        if first is not None:
            first_job = self.scheduler.request(None, first, target, background=True)
            self.baseline(first.workload)
            # The first page's latency (the worker compiles it) before the compile processes
            # start: each imports TVM and builds a lesson template, which on a server whose
            # app processes are starting too took the cores from it (13.9 s on a 16-core H100).
            # Not once students wait for the GPU, though: until the compile processes are up, the
            # worker compiles each measurement itself, one at a time (a class of 200 connecting at
            # once had 136 waiting while the compile processes waited for this background job).
            self.warm.step(f"compile processes starting: {self._wait_first(first_job)}")
        if self.scheduler.compiles and not self._closing.is_set():
            self.compiles.start(ahead, target)
            self.warm.step("compile processes")
        if (first is not None or ceilings) and not self._closing.is_set():
            self._measure_ceilings(target)

    def _open_store(self, device: str) -> None:
        """Open the measurements kept on disk for ``device`` and take the fresh ones as this server's; take
        the GPU in turn with a prepare on this machine (a prepare holds it alone)."""
        if self.measured_by == SERVER:
            try:
                self._gpu_turn = gpu_turn(self.settings.measure_dir, alone=False)
            except GPUBusy:
                log.warning("A prepare (python -m explorer prepare) is measuring on this machine's GPU: this "
                            "server's timings are disturbed until it ends.")
        store = MeasurementStore.open(self.settings.measure_dir, device, self.settings.measure_max_age_s)
        if store is None:
            return
        try:
            loaded = store.fresh(self.settings.measure_cache)
            self.scheduler.preload((kept.spec, kept.target, kept.result, kept.measured_at) for kept in loaded)
        except Exception as error:  # a bug here must not stop the warm-up: the server measures as before
            log.warning("Measurements on disk not read: %r", error)
            loaded = []
        self.stored = describe(loaded)
        self.store = store
        if loaded:
            self.warm.step(f"{len(loaded)} measurements read from the disk")

    def _keep(self, job) -> None:
        """A job just measured, on disk where a page shows it as the setting's latency (measure_store.py)."""
        store = self.store
        if (store is not None and job.error is None and job.result is not None and not job.quick
                and job.settings is None and job.remote is None):
            store.put(job.spec, job.target, job.result, job.finished_at, self.measured_by)

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
            self.gpus.all[index].warm_up(first, target)
        except ExplorerError as error:  # its measurements say why, one by one
            self.warm.step(f"GPU {index} not warm ({error})")
        else:
            self.warm.step(f"GPU {index} warm")

    def measure_ahead(self, specs: tuple[Spec, ...], target: str = "auto") -> None:
        """As background jobs: the device takes each only when no student's measurement waits, so a
        student waits behind at most one of them. At most half the compile processes hold steps
        ahead at a time: a student's compile never queues behind the whole list. They start once the
        warm-up has ended, the ceilings measured: each of their measurements carries them."""
        while not self._started.wait(POLL_S):
            if self._closing.is_set():
                return
        window = max(1, self.settings.compile_workers // 2)
        outstanding: deque = deque()
        unique = tuple(dict.fromkeys(specs))
        for spec in unique:
            if len(outstanding) >= window and not self._wait(outstanding.popleft()):
                return
            outstanding.append(self.scheduler.request(None, spec, target, background=True))
        for job in outstanding:
            if not self._wait(job):
                return
        if unique:
            self.warm.step(f"{len(unique)} lesson steps measured")

    def _wait(self, job) -> bool:
        """Wait for ``job``; False if the server closes meanwhile."""
        while not job.wait(POLL_S):
            if self._closing.is_set():
                return False
        return not self._closing.is_set()

    def _measure_ceilings(self, target: str) -> None:
        """The roofline's ceilings of the local GPU, once, after the warm-up (a few seconds of the
        device's time); measurements from then on carry them."""
        start = time.time()
        self._ceilings = self.gpus.first.ceilings(target)
        self.gpus.share_ceilings()
        self.warm.step(f"roofline ceilings {time.time() - start:.1f} s" if self._ceilings is not None else
                       f"roofline ceilings not measured ({self.gpus.first.ceilings_error(target)}); "
                       "published figures shown")

    # -- stopping ---------------------------------------------------------------------------

    def _thread(self, target, args: tuple, name: str) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()
        return thread

    def close(self) -> None:
        """No measurement starts any more and none waits; returns once this side's threads have
        ended. A call on a GPU (a warm-up, a measurement, the ceilings) ends within its own limit;
        one still running after CLOSE_WAIT_S stops with the GPUs' measuring workers, which start
        again on the next measurement (a warm-up left holding the GPU would hold it for the next user)."""
        self._closing.set()
        self.scheduler.close()
        self.compiles.close()
        still = self._join(CLOSE_WAIT_S)
        if still:
            log.warning("Stopping the measuring workers: %s still running after %d s",
                        ", ".join(thread.name for thread in still), CLOSE_WAIT_S)
            self.gpus.stop_workers()
            still = self._join(CLOSE_WAIT_S)
        if still:
            log.warning("Threads still running after close: %s", ", ".join(thread.name for thread in still))
        if self.store is not None:
            self.store.close()
        if self._gpu_turn is not None:
            self._gpu_turn.close()

    def _join(self, timeout: float) -> list[threading.Thread]:
        deadline = time.monotonic() + timeout
        with self._lock:
            threads = [thread for thread in self._threads if thread is not threading.current_thread()]
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return [thread for thread in threads if thread.is_alive()] + self.scheduler.join(
            max(0.0, deadline - time.monotonic()))
