"""Run a compiled kernel once, check it, then time it with TVM's ``time_evaluator``.

The same functions run in the local worker process and, through an RPC session, against a
remote device: ``module`` is a runtime module with a ``main`` function (local, or loaded on
the remote) and ``device`` a local or remote device.
"""
from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm

from ..analysis.roofline import Ceilings
from ..workloads import numpy_dtype
from .gate import Check, compare
from .settings import MeasureSettings, repeats_within

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

    @property
    def spread_percent(self) -> float:
        """max − min, in percent of the median."""
        return 100 * (self.max_us - self.min_us) / self.median_us if self.median_us else 0.0

    def describe(self) -> str:
        """Its repeats and their spread in words: how far to trust the median (a slow kernel gets few repeats)."""
        launches = f"{self.launches_per_repeat} launches each" if self.launches_per_repeat > 1 else "one launch each"
        return (f"{len(self.samples_us)} timed repeats ({launches}): min {self.min_us:.2f}, max {self.max_us:.2f} µs, "
                f"{self.spread_percent:.1f}% apart")

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


def launches_for(per_launch_s: float, min_repeat_s: float) -> int:
    """Back-to-back launches that make one repeat last at least ``min_repeat_s``."""
    per_launch_s = max(per_launch_s, 1e-9)
    return max(1, min(MAX_LAUNCHES_PER_REPEAT, math.ceil(min_repeat_s / per_launch_s)))


def flush_bytes(l2_bytes: int | None) -> int:
    """Bytes to write between launches so that the L2 holds none of a kernel's inputs."""
    return FLUSH_L2_TIMES * l2_bytes if l2_bytes else FLUSH_UNKNOWN_L2_BYTES


# Repeats of one launch each, launched after the check's launch with no warm-up: (repeats) -> Timing.
TimeLaunches = Callable[[int], Timing]


def time_function(module, device, args, settings: MeasureSettings, first_s: float | None = None,
                  time_launches: TimeLaunches | None = None) -> Timing:
    """TVM's evaluator launches from C++ back to back and times on the device (CUDA events
    on a GPU; TVM also makes one untimed warm-up call). We choose the launches per repeat
    rather than TVM's ``min_repeat_ms`` so that their number is known and reported, and a
    single launch is not trusted because its timer overhead can exceed a tiny kernel.

    ``first_s``, the check's launch host to host (:func:`run_once`), bounds the kernel's time from
    above. A kernel that took ``min_repeat_us`` or more there is a slow one: one launch a repeat,
    as many repeats as the budget holds (at least MIN_REPEATS), and nothing else, where
    ``time_launches`` can time launches without a warm-up (the check's launch was one); should they
    take less than half a repeat, the first launch was slow for another reason (the CUDA module is
    loaded then) and the kernel is timed as a fast one. A faster kernel is probed first: one launch
    or a few, then straight to a repeat's worth (a probe that lasted a repeat is one, and counts),
    so the probes cost about one repeat."""
    if settings.cold_l2:
        return time_cold(module, device, args, settings)
    if first_s is not None and first_s >= settings.min_repeat_s:
        repeats = repeats_within(first_s, settings)
        if time_launches is not None:
            timing = time_launches(repeats)
        else:
            timing = Timing.from_seconds(module.time_evaluator("main", device, number=1, repeat=repeats)(*args).results,
                                         1)
        if timing.median_us * 1e-6 >= settings.min_repeat_s / 2:
            return timing
        # A fast kernel whose first launch was slow for another reason (its module loaded then): probed.
        first_s = timing.median_us * 1e-6
    number = 1 if first_s is None else max(1, min(MAX_LAUNCHES_PER_REPEAT, int(PROBE_S / max(first_s, 1e-9))))
    while True:  # the evaluator's results are seconds per launch
        per_launch = module.time_evaluator("main", device, number=number, repeat=1)(*args).results[0]
        if per_launch * number >= PROBE_S or number >= MAX_LAUNCHES_PER_REPEAT:
            break
        # Straight to a repeat's worth of launches, at most a hundred times as many (a probe too short
        # for the timer to see says little).
        number = min(MAX_LAUNCHES_PER_REPEAT, 100 * number,
                     max(2 * number, launches_for(per_launch, settings.min_repeat_s)))
    lasted = per_launch * number >= 0.99 * settings.min_repeat_s  # (rounding aside) a repeat's worth: one
    launches = number if lasted else launches_for(per_launch, settings.min_repeat_s)
    repeats = repeats_within(per_launch * launches, settings)
    samples = [per_launch] if lasted else []
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


# The output (a TVM tensor) -> its check against the reference.
CheckOutput = Callable[[object], Check]


def host_check(reference: np.ndarray, reduction_length: int, floor: float = 1.0) -> CheckOutput:
    """The check of an output brought to the host, against the NumPy ``reference``."""
    return lambda output: compare(output.numpy(), reference, reduction_length, floor)


def run_once(module, device, args, check: CheckOutput) -> tuple[Check, float]:
    """One launch on ``args`` (:func:`device_args`: the output last, unwritten), then
    ``check(output)``; with the launch's seconds host to host (the call and the wait for the
    device), at least the kernel's time, which sizes its timing (:func:`time_function`)."""
    main = module["main"]
    start = time.perf_counter()
    main(*args)
    device.sync()
    first_s = time.perf_counter() - start
    return check(args[-1]), first_s


def run_checked(module, device, args, settings: MeasureSettings, check: CheckOutput) -> tuple[Check, Timing | None]:
    """Run once and check (:func:`run_once`); time only a correct kernel."""
    checked, first_s = run_once(module, device, args, check)
    if not checked.correct:
        return checked, None
    return checked, time_function(module, device, args, settings, first_s)
