"""How a kernel is measured: one frozen, validated dataclass with reasoned defaults."""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..knobs import Params, knob
from .errors import InvalidMeasureSettings

MIN_REPEATS = 2

@dataclass(frozen=True)
class MeasureSettings(Params):
    noun: ClassVar[str] = "Measurement setting"
    error: ClassVar[type] = InvalidMeasureSettings
    owner: ClassVar[str] = "measure"

    # A correct classroom kernel runs in microseconds to milliseconds; ten seconds is
    # far past any of them and short enough that a hung kernel does not stall the queue.
    time_limit_s: int = knob(10, "A kernel still running after this many seconds is stopped and its worker restarted.",
                             low=1, high=600)
    # The median of 20 repeats is stable to about 1% on an idle GPU.
    repeats: int = knob(20, "Timed repeats; the median, min, max and spread are over these.", low=1, high=1000)
    # At >= 1 ms per repeat, event-timer resolution (~µs) and the first launch's wait for the host vanish.
    min_repeat_us: int = knob(1000, "Each repeat launches the kernel enough times to last at least this many µs.",
                              low=10, high=1_000_000)
    # A slow kernel's run-to-run spread is small next to its time: a few repeats give a stable
    # median (the spread is shown), and twenty of a 100 ms kernel would hold a class's GPU for seconds.
    timing_budget_ms: int = knob(100, "The timed repeats stop once they would take longer than this (at least "
                                 f"{MIN_REPEATS} repeats are timed).", low=1, high=600_000)
    seed: int = knob(0, "Seed of the random inputs (uniform in [-1, 1]).", low=0, high=2**31 - 1)
    roofline: bool = knob(True, "Also place the kernel on the roofline: the device's compute peaks and bandwidth "
                       "ceilings, measured once per device.")
    # Back to back, a launch finds in L2 what the previous one left there: a workload that
    # fits (50 MB on an H100) is timed warm, as in a loop; cold, as the first use of its inputs.
    cold_l2: bool = knob(False, "Time one launch per repeat, each after writing a buffer several times larger than "
                         "the L2 cache, so that the kernel reads its inputs from device memory (the PyTorch baseline "
                         "too); off: launches back to back.")
    # Needs PyTorch with CUDA in the worker; without it the kernel is timed back to back only.
    cuda_graph: bool = knob(True, "Also time the kernel replayed from a CUDA graph, as the PyTorch baseline is, so "
                            "that neither side pays a launch from the host.")

    @property
    def min_repeat_s(self) -> float:
        return self.min_repeat_us * 1e-6


# A kernel this long pays no visible launch cost (a launch is a few µs): a CUDA graph's
# replay would time it again for nothing.
GRAPH_UP_TO_US = 500.0

# While other students' measurements wait: 3 repeats of >= 0.5 ms of launches (2 of a kernel of a
# millisecond or more, timed after the check's launch with nothing else), a median within a few
# percent, and no replay from a CUDA graph; the GPU holds such a measurement about 3 ms plus 3 of
# the kernel's launches, and the server measures the setting again in full when idle.
QUICK_SETTINGS = MeasureSettings(repeats=3, min_repeat_us=500, timing_budget_ms=2, cuda_graph=False)


def repeats_within(repeat_s: float, settings: MeasureSettings) -> int:
    """Repeats of ``repeat_s`` each that fit the timing budget: ``settings.repeats`` at
    most, and at least MIN_REPEATS (or all of them, where fewer are asked for)."""
    fitting = int(settings.timing_budget_ms * 1e-3 // max(repeat_s, 1e-9))
    return min(settings.repeats, max(MIN_REPEATS, fitting))


def describe_budget(settings: MeasureSettings) -> str:
    """The timing budget in words: what a student is told of a measurement timed with it."""
    graph = "" if settings.cuda_graph else ", no CUDA graph"
    return (f"{settings.repeats} repeats of at least {settings.min_repeat_us / 1000:g} ms of launches within "
            f"{settings.timing_budget_ms:,} ms (at least {MIN_REPEATS}, one launch each for a slow kernel){graph}")
