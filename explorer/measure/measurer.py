"""What a sweep ranks by: ``spec -> median µs``, measured with settings suited to ranking many
settings rather than reporting one, the same way wherever the sweep runs (``python -m explorer
sweep`` in this process, the Sweep page through the class server's queue)."""
from __future__ import annotations

import os
from collections.abc import Callable

from ..build import Spec
from ..cuda_env import kernel_environment
from .errors import WrongResult
from .measurement import local_gpu, measure
from .settings import MeasureSettings

# A sweep ranks: the median of 10 repeats is plenty, the roofline is the same for
# every point, and back-to-back launches rank kernels as graphs do except below a few µs,
# where the launch cost dominates both (bench/kernels.py measures the winners with the
# full default settings, graphs included).
SWEEP_SETTINGS = MeasureSettings(repeats=10, roofline=False, cuda_graph=False)


def sweep_measurer(measure_with: Callable, **where) -> Callable[[Spec], float]:
    """``spec -> median µs`` of a correct kernel, measured by ``measure_with(spec, settings=SWEEP_SETTINGS,
    **where)`` (:func:`~.measurement.measure`, or a server's ``measure_now``); a wrong kernel raises
    WrongResult: it gets no latency."""
    def latency_us(spec: Spec) -> float:
        result = measure_with(spec, settings=SWEEP_SETTINGS, **where)
        if not result.correct:
            raise WrongResult(f"The kernel's output is {result.check.describe()}; a wrong kernel gets no latency.")
        return result.median_us

    return latency_us


def gpu_measurer(target: str | None = None, remote=None) -> Callable[[Spec], float] | None:
    """A sweep's ``spec -> median µs`` in this process (checked against NumPy first, one kernel at a
    time), on this machine's GPU or on ``remote`` (an ``explorer.measure.Remote``); None without
    either: the sweep then ranks by the static analyses."""
    if remote is None and local_gpu() is None:
        return None
    # Compile workers started from now on find the CUDA libraries the measuring worker
    # uses, so they compile the binaries (in parallel) that it then finds in the cache.
    os.environ.update(kernel_environment())
    return sweep_measurer(measure, target=target, remote=remote)
