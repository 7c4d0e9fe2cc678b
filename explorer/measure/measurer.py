"""The GPU measurer a search ranks by: ``spec -> median µs`` through the measurement
queue, with settings suited to ranking many settings rather than reporting one."""
from __future__ import annotations

import functools
import os
from collections.abc import Callable

from ..build import Spec
from ..cuda_env import kernel_environment
from .measurement import latency_us, local_gpu
from .settings import MeasureSettings

# A sweep ranks: the median of 10 repeats is plenty, the roofline is the same for
# every point, and back-to-back launches rank kernels as graphs do except below a few µs,
# where the launch cost dominates both (bench/kernels.py measures the winners with the
# full default settings, graphs included).
SWEEP_SETTINGS = MeasureSettings(repeats=10, roofline=False, cuda_graph=False)


def gpu_measurer(target: str | None = None, remote=None, settings=None) -> Callable[[Spec], float] | None:
    """``spec -> median µs`` through the measurement queue (checked against NumPy first,
    one kernel at a time), on this machine's GPU or on ``remote`` (an
    ``explorer.measure.Remote``); None without either: the sweep then ranks by the static
    analyses. ``settings`` default to SWEEP_SETTINGS."""
    if remote is None and local_gpu() is None:
        return None
    # Compile workers started from now on find the CUDA libraries the measuring worker
    # uses, so they compile the binaries (in parallel) that it then finds in the cache.
    os.environ.update(kernel_environment())
    return functools.partial(latency_us, target=target, remote=remote,
                             settings=settings or SWEEP_SETTINGS)
