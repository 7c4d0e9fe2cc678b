"""The local measuring worker: kernels run in this separate process, never in the app's or
the CLI's.

It is TVM's ``PopenWorker`` (``tvm.support.popen_pool``): a child Python process fed
pickled calls over pipes, with a time limit per call. A kernel that segfaults ends the
child (``ChildProcessError``); one that hangs is abandoned at the time limit
(``TimeoutError``) and the child killed; either way the next call starts a fresh one, and
the caller gets :class:`KernelCrashed` or :class:`KernelTimeout`. An illegal memory access
is a CUDA error that poisons the process's CUDA context for good, so after any error on the
device the worker is also restarted.

The worker rebuilds the kernel from the picklable :class:`~explorer.build.Spec` with
``explorer.build.build`` rather than receiving a compiled library: a TVM module does not
cross a process boundary except as an exported shared library, which needs a C linker and
temporary files; rebuilding takes ~0.2 s of lowering (plus NVRTC, which an exported
library would have needed too), the worker's own build cache makes re-measuring a spec
free, and the app's process never has to touch the GPU.

A measurement is two calls: ``prepare`` (load or compile the kernel, and the workload's data,
made once per workload and kept on the device: ``data.py``; a generous compile limit) and ``run``
(the kernel on the device; the user's time limit), so that a slow NVRTC compile is never mistaken
for a hung kernel. Each measurement's phases (load or compile, data, copy, check, time, graph: ms)
go into the run log (RUN_LOG_PATH), one line per measurement, which ``bench/worker_phases.py`` reads.
"""
from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import tvm
import tvm_ffi
from tvm.support.popen_pool import PopenWorker

from ..analysis.roofline import Ceilings
from ..build import Spec, build, runtime_module_of
from ..cuda_env import binary_process_init, kernel_environment
from ..errors import ExplorerError, summary_line
from ..processes import log_line, named_start
from ..targets import resolve_target
from ..workloads import Workload
from .ceilings import CEILING_SETTINGS, measure_ceilings
from .data import COUNTS, Kept, KeptData
from .errors import BaselineUnavailable, KernelCrashed, KernelTimeout, MeasureError, NoDevice
from .graphs import time_launches, time_tvm_graph
from .settings import GRAPH_UP_TO_US, QUICK_SETTINGS, MeasureSettings
from .timing import KernelRun, Timing, run_once, time_function

ROOT = str(Path(__file__).resolve().parents[2])  # so the worker can import explorer
# Schedule + lowering + NVRTC of a heavily unrolled kernel can take tens of seconds.
COMPILE_LIMIT_S = 300
NO_GPU = "no CUDA device found; use --rpc HOST:PORT --key KEY"
# The worker's output (TVM warnings, the backtrace of a crash) goes here, not into the
# caller's terminal or the CLI's JSON.
LOG_PATH = Path(tempfile.gettempdir()) / "explorer-measure-worker.log"
# One line per kernel run on the device ("pid start_ns end_ns label"): the record that shows
# no two kernels were ever timed at the same time (bench/classroom.py reads it).
RUN_LOG_PATH = Path(os.environ.get("EXPLORER_RUN_LOG", Path(tempfile.gettempdir()) / "explorer-kernel-runs.log"))


@dataclass(frozen=True)
class Trial:
    """One kernel put to the test, checked against the reference and then timed: the kernel
    (a template spec, or a hand-made IRModule in tests), its workload (inputs and reference),
    the target by name ("auto" is resolved where it runs: that GPU) and the measuring
    settings. What the worker process and a remote server measure; the scheduler's ``Job``
    (one setting on a device, shared by the sessions that asked) becomes one when it runs.
    (``explorer.build.Kernel`` is another thing: one CUDA kernel of a build and its launch.)"""

    kernel: Spec | tvm.IRModule
    workload: Workload
    target: str | None
    settings: MeasureSettings
    # The kernel already compiled by a compile process (``compile_library``): the worker
    # loads it instead of lowering and compiling it again.
    library: str | None = None


class _PinnedWorker(PopenWorker):
    """A worker process that sees one GPU of several (``CUDA_VISIBLE_DEVICES``; ``gpu``: its index
    among those this process sees), or, with ``gpu`` None, every GPU this process sees. The variable
    must be in its environment when it starts, since importing TVM initializes the CUDA driver; the
    child inherits ``os.environ`` as it is at that moment, so every worker starts under one lock: a
    worker of GPU 0 started while GPU 1's was being started would otherwise see GPU 1 alone and
    time its kernels there, beside GPU 1's."""

    def __init__(self, gpu: str | None, **options):
        super().__init__(**options)
        self.gpu = gpu

    def _start(self):
        with self.environment():
            super()._start()

    @contextlib.contextmanager
    def environment(self):
        """This process's environment as the child must inherit it, held for the start alone."""
        with _ENVIRON_LOCK:
            before = os.environ.get(VISIBLE)
            if self.gpu is not None:
                # The index counts the GPUs this process sees: the parent may see a few of the machine's.
                visible = [part.strip() for part in before.split(",")] if before else []
                index = int(self.gpu)
                os.environ[VISIBLE] = visible[index] if index < len(visible) else self.gpu
            try:
                yield
            finally:
                if before is None:
                    os.environ.pop(VISIBLE, None)
                else:
                    os.environ[VISIBLE] = before


VISIBLE = "CUDA_VISIBLE_DEVICES"
_ENVIRON_LOCK = threading.Lock()


class LocalWorker:
    """Parent side: one worker process, restarted after a crash or a hang; ``gpu``: the index of
    the one GPU it sees among this process's, where there are several (None: all, the first used)."""

    def __init__(self, gpu: str | None = None):
        self._lock = threading.Lock()
        self._worker: PopenWorker | None = None
        self._log = None
        self.gpu = gpu

    def call(self, fn, *args, timeout: float, doing: str = "Running the kernel"):
        """``fn(*args)`` in the worker; ``doing`` names the step in a time-limit message."""
        with self._lock:
            if self._worker is None:
                # The child inherits os.environ; the pip CUDA paths must be there before it starts.
                os.environ.update(kernel_environment())
                # Kept open: PopenWorker hands it to every restarted child.
                self._log = open(LOG_PATH, "ab")
                options = {"initializer": named_start, "initargs": ("measure worker", binary_process_init, ROOT),
                           "stdout": self._log, "stderr": self._log}
                self._worker = _PinnedWorker(self.gpu, **options)
            try:
                self._worker.send(_guarded, (fn, *args), timeout=timeout)
                outcome = self._worker.recv()
            except TimeoutError:
                raise KernelTimeout(
                    f"{doing} took longer than {timeout:g} s, so it was stopped; the measuring process was restarted."
                ) from None
            except ChildProcessError:
                raise KernelCrashed(
                    "The kernel crashed the measuring process (a segfault or an illegal memory access); "
                    f"it was restarted (details in {LOG_PATH})."
                ) from None
            if isinstance(outcome, KernelCrashed):
                self._worker.kill()  # its CUDA context is unusable after a device error
            if isinstance(outcome, ExplorerError):
                raise outcome
            return outcome

    def close(self) -> None:
        with self._lock:
            if self._worker is not None:
                self._worker.kill()
                self._log.close()
                self._worker = None


def _guarded(fn, *args):
    """Runs in the worker: ExplorerErrors come back as values (their message intact; the
    pool would replace it with a traceback), anything else as a MeasureError."""
    try:
        return fn(*args)
    except ExplorerError as error:
        return error
    except Exception as error:  # TVM raises TVMError/RuntimeError subclasses
        return MeasureError(f"The measurement failed: {summary_line(error)}")


# -- in the worker process ------------------------------------------------------------


@dataclass
class _Prepared:
    trial: Trial
    target: tvm.target.Target
    device: tvm.runtime.Device
    module: tvm.runtime.Module
    kept: Kept
    compile_ms: float
    phases_ms: dict  # where the worker's time went, for the run log
    facts: dict  # what else the run log says of the measurement


_prepared: _Prepared | None = None
# The latest workloads' data, kept where their kernels run (data.py).
KEPT = KeptData()


def prepare(trial: Trial) -> str:
    """Load (or compile) the kernel and get its workload's data; returns the resolved target."""
    global _prepared
    _prepared = None
    target = resolve_target(trial.target)
    device = local_device(target)
    start = time.perf_counter()
    module = load_library(trial.library) if trial.library else compile_kernel(trial.kernel, target)
    compile_ms = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    kept, made = KEPT.get(trial.workload, trial.settings.seed, device)
    phases = {"compile" if not trial.library else "load": compile_ms, "data": (time.perf_counter() - start) * 1e3}
    facts = {"data": "made" if made else "kept", "budget": budget_name(trial.settings)}
    _prepared = _Prepared(trial, target, device, module, kept, compile_ms, phases, facts)
    return str(target)


def budget_name(settings: MeasureSettings) -> str:
    """The run log's name for a measurement's budget: quick (while others wait), full, or other."""
    return "quick" if settings == QUICK_SETTINGS else "full" if settings == MeasureSettings() else "other"


def run() -> KernelRun:
    """Run the prepared kernel: check it, then time it (back to back, and from a CUDA graph)."""
    p = _prepared
    if p is None:
        raise MeasureError("Nothing to run: the measuring process was restarted between prepare and run.")
    settings = p.trial.settings
    target = str(p.target)
    timing = graph = None
    started = time.time_ns()
    clock = _Phases(p.phases_ms)
    try:
        args = p.kept.fresh_args()
        clock.lap("copy")
        check, first_s = run_once(p.module, p.device, args, p.kept.check)
        clock.lap("check")
        if not check.correct:  # never timed; it may have written past its output
            p.facts["check"] = "wrong"
            p.kept.after_wrong()
        else:
            timing = time_function(p.module, p.device, args, settings, first_s, _launches_timer(p, args))
            clock.lap("time")
            p.facts.update(kernel_us=f"{timing.median_us:.2f}", repeats=len(timing.samples_us),
                           launches=timing.launches_per_repeat)
            if settings.cuda_graph and p.target.kind.name == "cuda" and timing.median_us <= GRAPH_UP_TO_US:
                graph = _graph_timing(p, args)
                clock.lap("graph")
    except ExplorerError:
        raise
    except Exception as error:  # a CUDA error (illegal address, launch failure)
        raise KernelCrashed(f"The kernel failed on the device ({summary_line(error)}); "
                            f"the measuring process was restarted.") from None
    finally:
        _log_run(started, p.trial, p.phases_ms, p.facts)
    # The ceilings are measured apart (ceilings_for); the caller adds them.
    return KernelRun(target, device_name(p.device, p.target), check, timing, None, p.compile_ms, graph)


def _launches_timer(p: _Prepared, args):
    """Single launches timed on the device without a warm-up (graphs.time_launches), where the
    kernel's data is on the GPU with PyTorch; None elsewhere (TVM's evaluator times them)."""
    if not (p.kept.on_device and p.target.kind.name == "cuda"):
        return None
    main = p.module["main"]
    return lambda repeats: time_launches(lambda: main(*args), repeats)


class _Phases:
    """Milliseconds since the last lap, added to ``phases`` under a name."""

    def __init__(self, phases: dict):
        self.phases, self.last = phases, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.phases[name] = (now - self.last) * 1e3
        self.last = now


def _log_run(started_ns: int, trial: Trial, phases_ms: dict, facts: dict) -> None:
    """One line per measurement: ``pid start_ns end_ns template workload [gpu=N] | phase=ms ... |
    fact=value ...`` (bench/worker_phases.py and bench/classroom_logs.py read it: :func:`read_run_line`)."""
    label = trial.kernel.template if isinstance(trial.kernel, Spec) else "module"
    phases = " ".join(f"{name.replace(' ', '_')}={ms:.2f}" for name, ms in phases_ms.items())
    told = " ".join(f"{name}={value}" for name, value in facts.items())
    # Where the server measures on several GPUs, each worker sees one: the log says which.
    gpu = f" gpu={os.environ[VISIBLE]}" if os.environ.get(VISIBLE, "").isdigit() else ""
    log_line(str(RUN_LOG_PATH), f"{os.getpid()} {started_ns} {time.time_ns()} {label} {trial.workload.label()}{gpu} "
                                f"| {phases} | {told}")


@dataclass(frozen=True)
class RunLine:
    """One line of the run log."""

    pid: int
    start_ns: int
    end_ns: int
    template: str
    workload: str
    gpu: str  # "" where the server has one GPU
    phases_ms: dict
    facts: dict

    @property
    def held_ms(self) -> float:
        """The measurement's time in the worker, the GPU held: every phase."""
        return sum(self.phases_ms.values())


def read_run_line(line: str) -> RunLine:
    """A line of the run log (:func:`_log_run`; an older line has no facts)."""
    head, _, rest = line.partition("|")
    phases, _, facts = rest.partition("|")
    words = head.split()
    gpu = words[-1][len("gpu="):] if words[-1].startswith("gpu=") else ""
    workload = " ".join(words[4:-1] if gpu else words[4:])
    pairs = [word.partition("=") for word in phases.split()]
    return RunLine(int(words[0]), int(words[1]), int(words[2]), words[3], workload, gpu,
                   {name: float(ms) for name, _, ms in pairs}, dict(word.split("=", 1) for word in facts.split()))


def data_counts() -> dict:
    """(In the worker.) What it put where its kernels run, by (what, workload label): data.COUNTS."""
    return dict(COUNTS)


@dataclass(frozen=True)
class WarmUpReport:
    device: str
    steps: tuple[tuple[str, float], ...]  # (what, seconds it took)


def warm_up(first: Spec | None, target_name: str | None) -> WarmUpReport:
    """Everything a first measurement would otherwise pay: CUDA's context, PyTorch and its
    CUDA context, NVRTC's precompiled header (by compiling ``first``). Raises NoDevice
    without a GPU."""
    steps = []

    def step(name: str, start: float) -> None:
        steps.append((name, round(time.perf_counter() - start, 3)))

    start = time.perf_counter()
    target = resolve_target(target_name)
    device = local_device(target)
    step("CUDA", start)
    start = time.perf_counter()
    try:
        import torch

        torch.zeros(1, device="cuda")
        step("PyTorch", start)
    except Exception:  # PyTorch missing or without CUDA: no baseline, nothing to warm
        pass
    if first is not None:
        start = time.perf_counter()
        compile_kernel(first, target)
        step("NVRTC", start)
        start = time.perf_counter()
        KEPT.get(first.workload, MeasureSettings().seed, device)
        step("inputs", start)
    return WarmUpReport(device_name(device, target), tuple(steps))


def _graph_timing(p: _Prepared, args) -> Timing | None:
    """The kernel timed from CUDA graphs; None where PyTorch with CUDA is missing: the
    back-to-back timing still stands."""
    try:
        return time_tvm_graph(p.module, args, p.trial.settings, p.kept.check)
    except BaselineUnavailable:
        return None


def local_device(target: tvm.target.Target) -> tvm.runtime.Device:
    if target.kind.name == "cuda":
        device = tvm.cuda(0)
        if not device.exist:
            raise NoDevice(NO_GPU)
        return device
    return tvm.cpu(0)


def device_name(device, target: tvm.target.Target) -> str:
    return device.device_name if target.kind.name == "cuda" else "CPU"


def gpu_name() -> str | None:
    """The local GPU's name, or None (asked in the worker, which has the CUDA paths)."""
    device = tvm.cuda(0)
    return device.device_name if device.exist else None


def compile_kernel(kernel: Spec | tvm.IRModule, target: tvm.target.Target) -> tvm.runtime.Module:
    """A runnable module with a ``main`` function."""
    if isinstance(kernel, Spec):
        return tvm.runtime.Executable(runtime_module_of(build(kernel, target))).jit()
    host_target = tvm.target.Target(target, host="llvm") if target.kind.name == "cuda" else target
    try:
        return tvm.compile(kernel, target=host_target).jit()
    except Exception as error:
        raise MeasureError(f"TVM could not compile the kernel: {summary_line(error)}") from None


def load_library(path: str) -> tvm.runtime.Module:
    """A kernel that a compile process built and exported (its cubin inside). Unloaded once the
    worker drops it: TVM's own ``load_module`` keeps every library loaded for the life of the
    process, and a class loads one per setting (the worker's memory grew about 0.6 GiB a minute with
    100 students, and each library holds five memory maps of the 65,530 a process may have)."""
    try:
        return tvm_ffi.load_module(os.path.realpath(path), keep_module_alive=False)
    except Exception as error:
        raise MeasureError(f"The compiled kernel could not be loaded: {summary_line(error)}") from None


@functools.lru_cache(maxsize=4)
def ceilings_for(target_name: str | None) -> Ceilings:
    """Measure the roofline's ceilings of this process's device (once per target): a call of
    its own, with its own time limit, so that a ceiling kernel that misbehaves never holds
    up a student's measurement."""
    target = resolve_target(target_name)
    device = local_device(target)
    return measure_ceilings(lambda module, _name: compile_kernel(module, target), device, target,
                            device_name(device, target), CEILING_SETTINGS)
