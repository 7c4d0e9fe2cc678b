"""Run a compiled kernel once, check it, then time it with TVM's ``time_evaluator``.

The same functions run in the local worker process and, through an RPC session, against a
remote device: ``module`` is a runtime module with a ``main`` function (local, or loaded on
the remote) and ``device`` a local or remote device.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

import numpy as np
import tvm

from ..analysis.roofline import Ceilings
from ..workloads import numpy_dtype
from .gate import Check, compare
from .settings import MIN_REPEATS, MeasureSettings, repeats_within

# A kernel faster than ~0.1 µs is an empty one; this bounds the launches per repeat.
MAX_LAUNCHES_PER_REPEAT = 100_000
PROBE_S = 1e-4  # a probe this long estimates the time per launch to a few percent
# Cold L2: the buffer written before each timed launch is this many times the L2 (whatever
# the replacement policy keeps of the kernel's inputs, four L2s of other lines push out) ...
FLUSH_L2_TIMES = 4
FLUSH_UNKNOWN_L2_BYTES = 256 << 20  # ... or this where the device does not say its L2's size (> any GPU's L2)


@dataclass(frozen=True)
class Timing:
    """Per-launch times of one kernel: one sample per repeat, each the mean of
    ``launches_per_repeat`` back-to-back launches."""

    samples_us: tuple[float, ...]
    launches_per_repeat: int

    @classmethod
    def from_seconds(cls, seconds, launches_per_repeat: int) -> Timing:
        return cls(tuple(float(s) * 1e6 for s in seconds), launches_per_repeat)

    @property
    def median_us(self) -> float:
        return statistics.median(self.samples_us)

    @property
    def min_us(self) -> float:
        return min(self.samples_us)

    @property
    def max_us(self) -> float:
        return max(self.samples_us)

    @property
    def std_us(self) -> float:
        return statistics.pstdev(self.samples_us)

    @property
    def launches(self) -> int:
        return self.launches_per_repeat * len(self.samples_us)

    def to_dict(self) -> dict:
        return {
            "median_us": self.median_us, "min_us": self.min_us, "max_us": self.max_us, "std_us": self.std_us,
            "launches": self.launches, "repeats": len(self.samples_us), "samples_us": list(self.samples_us),
        }


@dataclass(frozen=True)
class KernelRun:
    """What one run on a device found: the check, and the timings of a correct kernel."""

    target: str
    device: str
    check: Check
    timing: Timing | None  # None for a wrong kernel
    ceilings: Ceilings | None  # the device's roofline ceilings, when asked for
    compile_ms: float
    # The kernel replayed from a CUDA graph, as the PyTorch baseline is (graphs.py); None
    # where PyTorch with CUDA is not available (e.g. a remote server).
    graph: Timing | None = None


def launches_for(per_launch_s: float, min_repeat_ms: int) -> int:
    """Back-to-back launches that make one repeat last at least ``min_repeat_ms``."""
    per_launch_s = max(per_launch_s, 1e-9)
    return max(1, min(MAX_LAUNCHES_PER_REPEAT, math.ceil(min_repeat_ms * 1e-3 / per_launch_s)))


def flush_bytes(l2_bytes: int | None) -> int:
    """Bytes to write between launches so that the L2 holds none of a kernel's inputs."""
    return FLUSH_L2_TIMES * l2_bytes if l2_bytes else FLUSH_UNKNOWN_L2_BYTES


def time_function(module, device, args, settings: MeasureSettings) -> Timing:
    """TVM's evaluator launches from C++ back to back and times on the device (CUDA events
    on a GPU; TVM also makes one untimed warm-up call). Short probes, ten times longer each
    until one lasts PROBE_S, size the launches per repeat: we choose that number rather
    than TVM's ``min_repeat_ms`` so that the number of launches is known and reported, and
    a single launch is not trusted because its timer overhead can exceed a tiny kernel.
    A probe of the launches per repeat the timing wants (a kernel of ``min_repeat_ms`` or
    more: one launch) is already timed repeats: they count, and only the rest are launched."""
    if settings.cold_l2:
        return time_cold(module, device, args, settings)
    number = 1
    while True:
        probe = module.time_evaluator("main", device, number=number, repeat=MIN_REPEATS)(*args).results
        per_launch = min(probe)
        if per_launch * number >= PROBE_S or number >= MAX_LAUNCHES_PER_REPEAT:
            break
        number = min(number * 10, MAX_LAUNCHES_PER_REPEAT)
    launches = launches_for(per_launch, settings.min_repeat_ms)
    repeats = repeats_within(per_launch * launches, settings)
    samples = list(probe[:repeats]) if launches == number else []
    if len(samples) < repeats:
        samples += module.time_evaluator("main", device, number=launches, repeat=repeats - len(samples))(*args).results
    return Timing.from_seconds(samples, launches)


def time_cold(module, device, args, settings: MeasureSettings) -> Timing:
    """One launch per repeat, each after TVM's evaluator copies a buffer of :func:`flush_bytes`
    on the device (its ``cache_flush_bytes``), so that the launch reads its inputs from device
    memory. A single launch pays the timer's few µs: this is for kernels of tens of µs or more."""
    probe_s = min(module.time_evaluator("main", device, number=1, repeat=2)(*args).results)
    l2_bytes = int(getattr(device, "l2_cache_size_bytes", 0) or 0)
    evaluator = module.time_evaluator("main", device, number=1, repeat=repeats_within(probe_s, settings),
                                      cache_flush_bytes=flush_bytes(l2_bytes))
    return Timing.from_seconds(evaluator(*args).results, 1)


def device_args(inputs, reference: np.ndarray, output_dtype: str, device) -> list:
    """The kernel's arguments on ``device``: the inputs, then an output of the workload's
    output type (the float32 reference may be more exact than it) that starts as NaN so that
    an element the kernel never writes is caught."""
    args = [tvm.runtime.tensor(x, device) for x in inputs]
    args.append(tvm.runtime.tensor(np.full(reference.shape, np.nan, dtype=numpy_dtype(output_dtype)), device))
    return args


def run_checked(module, device, args, reference: np.ndarray, reduction_length: int,
                settings: MeasureSettings, check_output=None, floor: float = 1.0) -> tuple[Check, Timing | None]:
    """Run once on ``args`` (:func:`device_args`) and compare with the reference; time
    only a correct kernel. ``check_output(output)`` replaces the comparison on the CPU (the
    worker compares on the GPU)."""
    module["main"](*args)
    device.sync()
    check = (check_output(args[-1]) if check_output is not None
             else compare(args[-1].numpy(), reference, reduction_length, floor))
    if not check.correct:
        return check, None
    return check, time_function(module, device, args, settings)
