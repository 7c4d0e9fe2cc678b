"""``measure(spec)``: check a kernel against NumPy, then time it, on the local GPU (through
the worker process) or on a remote one (through TVM's RPC tracker), one kernel per GPU at a
time."""
from __future__ import annotations

import dataclasses
import os
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import tvm

from ..analysis import roofline
from ..analysis.roofline import Ceilings
from ..build import Spec
from ..errors import ExplorerError
from ..targets import resolve_target
from ..workloads import Workload
from . import worker
from .baseline import BaselineRun, torch_baseline
from .errors import NoDevice, WrongResult
from .gate import Check
from .remote import Remote, measure_remote
from .settings import MeasureSettings
from .timing import KernelRun, Timing
from .worker import COMPILE_LIMIT_S, LocalWorker, Trial

# The FP32 and bandwidth kernels take seconds; on a Hopper GPU two wgmma chains (TIRx
# lowering and NVRTC, ~5 s each) come on top.
CEILINGS_LIMIT_S = 150


@dataclass(frozen=True)
class Measurement:
    """One measured kernel. A wrong kernel has no timings: only the check (where it is wrong)."""

    workload: str
    target: str
    device: str
    check: Check
    timing: Timing | None
    ceilings: Ceilings | None  # the device's roofline ceilings (compute peaks, HBM and L2 bandwidth)
    flops: int
    compulsory_bytes: int
    compile_ms: float
    # Replayed from CUDA graphs, as the PyTorch baseline is (graphs.py); None without
    # PyTorch with CUDA where the kernel ran.
    graph: Timing | None = None
    # Timed with the short budget (QUICK_SETTINGS) while other students' measurements
    # waited; the server measures it again in full when the GPU is free.
    quick: bool = False
    # The types that choose the compute roof (roofline.compute_types: FP32, or the tensor cores' for the
    # 16-bit inputs of a kernel that multiplies them there).
    compute_types: tuple[str, ...] = (roofline.FP32,)
    # Which of the server's GPUs measured it, where it has several (its index among them);
    # ``device`` names the kind, which is what results are compared by.
    gpu: str | None = None

    @classmethod
    def of(cls, workload: Workload, run: KernelRun, types: tuple[str, ...] | None = None) -> Measurement:
        """The measurement of a kernel of ``workload`` under the compute roof of ``types``
        (roofline.compute_types of a template's setting; None: the inputs' types, as on the tensor cores)."""
        types = tuple(workload.input_dtypes()) if types is None else tuple(types)
        # No ceilings where they give the kernel no compute roof (16-bit inputs on tensor cores without their peak).
        ceilings = None if run.ceilings and roofline.no_roofline_reason(workload, run.ceilings, types) \
            else run.ceilings
        return cls(workload.label(), run.target, run.device, run.check, run.timing, ceilings, workload.flops,
                   workload.compulsory_bytes, run.compile_ms, run.graph, compute_types=types)

    @property
    def correct(self) -> bool:
        return self.check.correct

    @property
    def median_us(self) -> float | None:
        return self.timing.median_us if self.timing else None

    @property
    def gbps(self) -> float | None:
        """Compulsory bytes per second: the least traffic the kernel must have made."""
        return self.compulsory_bytes / self.median_us / 1e3 if self.timing else None

    @property
    def gflops(self) -> float | None:
        return self.flops / self.median_us / 1e3 if self.timing else None

    @property
    def roofline_us(self) -> float | None:
        """The least time the roofline allows this workload on this device: its FLOPs at the
        compute peak of its inputs or its compulsory bytes at the bandwidth ceiling, whichever
        is longer."""
        if not self.ceilings:
            return None
        return roofline.bound_us(self.ceilings, self.flops, self.compulsory_bytes, self.compute_types)

    @property
    def percent_of_roofline(self) -> float | None:
        """Percent of the attainable performance at the workload's intensity (the roofline
        placement): 100 % = on the roof."""
        return 100 * self.roofline_us / self.median_us if self.timing and self.ceilings else None

    @property
    def graph_us(self) -> float | None:
        """Median µs per launch replayed from a CUDA graph: the figure to set beside PyTorch's."""
        return self.graph.median_us if self.graph else None

    @property
    def versus_pytorch(self) -> tuple[float | None, str]:
        """The figure to set beside PyTorch's (timed from CUDA graphs): like with like when
        there is a graph timing, and how it was timed."""
        if self.graph:
            return self.graph_us, "both from CUDA graphs"
        return self.median_us, "TVM launched back to back, PyTorch from CUDA graphs"

    @property
    def graph_percent_of_roofline(self) -> float | None:
        """The roofline placement of the kernel replayed from a CUDA graph."""
        return 100 * self.roofline_us / self.graph_us if self.graph and self.ceilings else None

    def _roofline_text(self, percent: float) -> str:
        bandwidth, roof = self.ceilings.bandwidth_for(self.compulsory_bytes)
        peak, compute = self.ceilings.compute_roof(self.compute_types)
        return (f"{percent:.0f}% of the roofline (bound {self.roofline_us:.2f} µs at {bandwidth:,.0f} GB/s {roof} and "
                f"{peak:,.0f} GFLOP/s {compute}, {self.ceilings.source})")

    def summary(self) -> str:
        if not self.correct:
            return f"{self.workload}: WRONG, {self.check.describe()}; not timed."
        t = self.timing
        roofline = f", {self._roofline_text(self.percent_of_roofline)}" if self.ceilings else ""
        graph = ""
        if self.graph:
            graph = f" From a CUDA graph (as PyTorch is timed): median {self.graph_us:.2f} µs"
            if self.ceilings:
                graph += f", {self.graph_percent_of_roofline:.0f}% of the roofline"
            graph += "."
        return (f"{self.workload} on {self.device}: median {t.median_us:.2f} µs launched back to back (min "
                f"{t.min_us:.2f}, max {t.max_us:.2f}, std {t.std_us:.2f}; {t.launches} launches), "
                f"{self.gbps:.0f} GB/s, "
                f"{self.gflops:.0f} GFLOP/s{roofline}.{graph}")

    def to_dict(self) -> dict:
        check = self.check
        return {
            "workload": self.workload, "target": self.target, "device": self.device,
            "correct": check.correct, "max_error": check.max_error, "tolerance": check.tolerance,
            "wrong_count": check.wrong_count,
            "first_wrong_index": list(check.first_wrong_index) if check.first_wrong_index is not None else None,
            **(self.timing.to_dict() if self.timing else {"median_us": None}),
            "gbps": self.gbps, "gflops": self.gflops, "roofline_us": self.roofline_us,
            "percent_of_roofline": self.percent_of_roofline, "compile_ms": self.compile_ms,
            "cuda_graph": self.graph.to_dict() if self.graph else None,
            "cuda_graph_percent_of_roofline": self.graph_percent_of_roofline,
            "ceilings": self.ceilings.to_dict() if self.ceilings else None,
        }


@dataclass(frozen=True)
class Baseline:
    """The workload in PyTorch on the same GPU, measured with CUDA graphs."""

    workload: str
    library: str
    device: str
    check: Check
    timing: Timing | None
    flops: int
    compulsory_bytes: int

    @property
    def median_us(self) -> float | None:
        return self.timing.median_us if self.timing else None

    def to_dict(self) -> dict:
        return {
            "workload": self.workload, "library": self.library, "device": self.device, "correct": self.check.correct,
            "max_error": self.check.max_error, **(self.timing.to_dict() if self.timing else {"median_us": None}),
            "gflops": self.flops / self.median_us / 1e3 if self.timing else None,
        }


OnWait = Callable[[int], None]


def measure(spec: Spec, *, target: str | None = None, remote: Remote | None = None,
            settings: MeasureSettings | None = None, on_wait: OnWait | None = None,
            library: str | None = None) -> Measurement:
    """Check ``spec``'s kernel against the workload's reference and, if it is right, time
    it. ``target`` is a target name ("auto": the GPU it runs on); ``remote`` a tracker and
    key; ``on_wait(ahead)`` is told how many of this process's calls are ahead when the local
    GPU is busy (a remote request waits at the tracker, untold); ``library`` the kernel
    already compiled (``explorer/services/compiles.py``), which the local worker loads
    instead of compiling it."""
    return _measure(Trial(spec, spec.workload, target, settings or MeasureSettings(), library), remote, on_wait)


def measure_module(module: tvm.IRModule, workload: Workload, *, target: str, remote: Remote | None = None,
                   settings: MeasureSettings | None = None, on_wait: OnWait | None = None) -> Measurement:
    """The same for a hand-made TIR module whose ``main`` takes the workload's inputs and
    output (e.g. ``llvm`` kernels in tests, or a schedule from MetaSchedule)."""
    return _measure(Trial(module, workload, target, settings or MeasureSettings()), remote, on_wait)


def latency_us(spec: Spec, **options) -> float:
    """Median µs of a correct kernel (a ``measurer`` for sweeps and lessons); raises
    WrongResult for a kernel whose output is wrong."""
    result = measure(spec, **options)
    if not result.correct:
        raise WrongResult(f"The kernel's output is {result.check.describe()}; a wrong kernel gets no latency.")
    return result.median_us


def baseline(workload: Workload, *, settings: MeasureSettings | None = None, on_wait: OnWait | None = None) -> Baseline:
    """PyTorch on the local GPU (in the worker), in its turn like a kernel."""
    return LOCAL_GPU.baseline(workload, settings or MeasureSettings(), on_wait)


def local_gpu() -> str | None:
    """This machine's GPU name, or None (asked once, in the worker)."""
    return LOCAL_GPU.name()


# An NVIDIA driver's device files on Linux: the driver makes /dev/nvidiactl (a container given a
# GPU gets it too), WSL has /dev/dxg. (Module names, so that tests describe other machines.)
PLATFORM = sys.platform
DRIVER_DEVICES = ("/dev/nvidiactl", "/dev/dxg")


def no_nvidia_driver() -> bool:
    """Whether this is Linux with none of an NVIDIA driver's device files: there no CUDA library
    path can make a GPU appear; elsewhere the worker is asked."""
    return PLATFORM == "linux" and not any(os.path.exists(path) for path in DRIVER_DEVICES)


def _no_gpu_here(target: str | None) -> None:
    """Raise the worker's NoDevice here, without starting it, where it would raise it first thing: a CUDA
    target and no NVIDIA driver's device (worker.local_device)."""
    if no_nvidia_driver() and resolve_target(target).kind.name == "cuda":
        raise NoDevice(worker.NO_GPU)


def warm_up(first: Spec | None = None, target: str | None = None) -> worker.WarmUpReport:
    """Start the local measuring worker and warm it up (CUDA, PyTorch, NVRTC); raises
    NoDevice without a GPU."""
    return LOCAL_GPU.warm_up(first, target)


def shutdown() -> None:
    """Stop the local worker (it restarts on the next measurement)."""
    LOCAL_GPU.close()


def ceilings_error(target: str | None = None) -> str | None:
    """Why the ceilings could not be measured, or None."""
    return LOCAL_GPU.ceilings_error(target)


def ceilings(target: str | None = None):
    """The local device's measured ceilings, or None when they could not be measured
    (``ceilings_error`` says why). Measured once, when asked for (bench/ceilings.py, the
    CLI's roofline, a server after its warm-up): never on a student's knob change. Later
    measurements in this process carry them."""
    return LOCAL_GPU.ceilings(target)


def compute_types_of(trial: Trial) -> tuple[str, ...]:
    """The types that choose the compute roof of a trial's kernel: its template's (roofline.compute_types),
    or a hand-made module's inputs' types."""
    if isinstance(trial.kernel, Spec):
        return roofline.compute_types(trial.kernel)
    return tuple(trial.workload.input_dtypes())


def _measure(trial: Trial, remote: Remote | None, on_wait: OnWait | None) -> Measurement:
    if remote is not None:  # the tracker hands it a free server of the key
        return Measurement.of(trial.workload, measure_remote(trial, remote), compute_types_of(trial))
    return LOCAL_GPU.measure(trial, on_wait)


class LocalGPU:
    """A GPU of this machine as a process sees it: the measuring worker (kernels never run in
    the caller's process), its turn (two kernels are never timed on it at once), its name and
    its roofline ceilings, each found once. A process has one per GPU it measures on: the
    CLI's and a bench script's ``LOCAL_GPU``; a server's ``Live`` one per GPU, fed by the
    scheduler's line of the machine's GPUs (explorer/measure/scheduler.py), the one queue a
    server's measurements wait in."""

    def __init__(self, gpu: str | None = None):
        self.gpu = gpu  # the index (among the visible GPUs) of the one GPU it uses; None: the first
        self.worker = LocalWorker(gpu)
        # One caller at a time: a measurement's two calls, the baseline, the ceilings, the warm-up.
        self._turn = threading.Lock()
        self._callers = 0  # holding or waiting for the turn
        self._callers_lock = threading.Lock()
        self._name: list[str | None] = []
        self._ceilings: dict[str, Ceilings | str] = {}  # by target name: the ceilings, or why they are missing

    @contextmanager
    def turn(self, on_wait: OnWait | None = None) -> Iterator[None]:
        """Hold the GPU for the ``with`` body. ``on_wait(ahead)`` hears, before it waits, how
        many of this process's calls hold or wait for the GPU. The order of a server's
        measurements is the scheduler's, which gives each a free GPU: there, only the
        baseline or the ceilings are ever ahead."""
        with self._callers_lock:
            ahead = self._callers
            self._callers += 1
        try:
            if ahead and on_wait is not None:
                on_wait(ahead)
            with self._turn:
                yield
        finally:
            with self._callers_lock:
                self._callers -= 1

    def measure(self, trial: Trial, on_wait: OnWait | None = None) -> Measurement:
        _no_gpu_here(trial.target)
        with self.turn(on_wait):
            self.worker.call(worker.prepare, trial, timeout=COMPILE_LIMIT_S, doing="Compiling the kernel")
            run = self.worker.call(worker.run, timeout=trial.settings.time_limit_s)
        measured = self._ceilings.get(trial.target or "auto")  # by ceilings(), if it was asked for
        if trial.settings.roofline and run.timing is not None and isinstance(measured, Ceilings):
            run = dataclasses.replace(run, ceilings=measured)
        return Measurement.of(trial.workload, run, compute_types_of(trial))

    def share_ceilings(self, other: LocalGPU) -> None:
        """Use ``other``'s measured ceilings (an identical GPU of the same machine)."""
        self._ceilings.update(other._ceilings)

    def baseline(self, workload: Workload, settings: MeasureSettings, on_wait: OnWait | None = None) -> Baseline:
        with self.turn(on_wait):
            run: BaselineRun = self.worker.call(torch_baseline, workload, settings, timeout=COMPILE_LIMIT_S,
                                                doing="The PyTorch baseline")
        return Baseline(workload.label(), run.library, run.device, run.check, run.timing, workload.flops,
                        workload.compulsory_bytes)

    def name(self) -> str | None:
        """The GPU's name, or None; asked once, in the worker (which has the CUDA library
        paths that this process may lack), unless no NVIDIA driver shows a device here: then
        None without starting the worker (its start, TVM's import, is a second or more of CPU)."""
        if not self._name:
            self._name.append(None if no_nvidia_driver() else
                              self.worker.call(worker.gpu_name, timeout=COMPILE_LIMIT_S, doing="Looking for a GPU"))
        return self._name[0]

    def warm_up(self, first: Spec | None, target: str | None) -> worker.WarmUpReport:
        _no_gpu_here(target)
        with self.turn():
            return self.worker.call(worker.warm_up, first, target, timeout=COMPILE_LIMIT_S, doing="Warming up the GPU")

    def ceilings(self, target: str | None = None) -> Ceilings | None:
        """Measured once per target; if that fails or runs past its limit, it is not tried
        again and the roofline uses the published figures."""
        name = target or "auto"
        with self.turn():
            if name not in self._ceilings:
                try:
                    self._ceilings[name] = self.worker.call(worker.ceilings_for, target, timeout=CEILINGS_LIMIT_S,
                                                            doing="Measuring the roofline's ceilings")
                except ExplorerError as error:
                    self._ceilings[name] = str(error)
        found = self._ceilings[name]
        return found if isinstance(found, Ceilings) else None

    def ceilings_error(self, target: str | None = None) -> str | None:
        found = self._ceilings.get(target or "auto")
        return found if isinstance(found, str) else None

    def close(self) -> None:
        self.worker.close()


LOCAL_GPU = LocalGPU()
