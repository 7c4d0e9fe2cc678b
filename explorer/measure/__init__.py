"""Measuring kernels on a real GPU: only a kernel that computed the right result gets a
latency, and it is measured the same way as what it is compared with.

- :func:`measure` (``measurement.py``): seeded inputs, one run checked against the
  workload's NumPy reference (``gate.py``), then TVM's ``time_evaluator`` (``timing.py``);
  the record has median/min/max/std µs, launches, GB/s, GFLOP/s and its place on the
  roofline (``ceilings.py``: the device's FP32 peak, HBM/L2 bandwidth and, on Hopper, the
  tensor cores' peak per 16-bit type, measured once). A wrong
  kernel gets the first wrong index instead of a latency.
- Each workload's data (``data.py``): seeded inputs, the NaN-filled output and the float64
  reference, made once per workload where the kernels run (on a GPU with PyTorch, drawn there)
  and kept (an LRU within a share of the device's memory); each run gets device copies.
- Isolation (``worker.py``): kernels run in TVM's ``PopenWorker`` process, never in the
  caller's; a crash or a hang restarts it and raises KernelCrashed / KernelTimeout.
- One kernel at a time per GPU (``LocalGPU.turn``); a server's measurements wait in one queue
  per device, the scheduler's (``scheduler.py``: one job per setting, target and device).
- Remote GPUs (``remote.py``): ``remote=Remote.parse("HOST:PORT", "KEY")`` goes through
  TVM's RPC tracker; ``python -m explorer.measure.server`` starts a GPU server.
- Ranking many settings (``measurer.py``): :func:`gpu_measurer` gives a search its
  ``spec -> µs`` with lighter settings (``SWEEP_SETTINGS``), or None without a GPU.
- The PyTorch baseline (``baseline.py``): :func:`baseline`, CUDA graphs, TF32 off. TVM
  kernels are also replayed from CUDA graphs (``graphs.py``) when PyTorch is there, so that
  the comparison is like with like (``Measurement.versus_pytorch``).

``target="llvm"`` works everywhere for hand-made modules (:func:`measure_module`), so CI
exercises the whole path without a GPU.
"""
from .errors import (
                     BaselineUnavailable,
                     InvalidMeasureSettings,
                     KernelCrashed,
                     KernelTimeout,
                     MeasureError,
                     NoDevice,
                     RemoteError,
                     WrongResult,
)
from .gate import Check
from .measurement import (
                     Baseline,
                     Measurement,
                     baseline,
                     ceilings,
                     ceilings_error,
                     latency_us,
                     local_gpu,
                     measure,
                     measure_module,
                     shutdown,
                     warm_up,
)
from .measurer import SWEEP_SETTINGS, gpu_measurer
from .remote import Remote
from .settings import QUICK_SETTINGS, MeasureSettings, describe_budget
from .timing import Timing
from .worker import NO_GPU

__all__ = [
    "Baseline", "BaselineUnavailable", "Check", "InvalidMeasureSettings", "KernelCrashed", "KernelTimeout",
    "MeasureError", "MeasureSettings", "Measurement", "NO_GPU", "NoDevice", "Remote", "RemoteError", "Timing",
    "WrongResult",
    "baseline", "latency_us", "local_gpu", "measure", "measure_module", "shutdown", "warm_up",
    "ceilings", "ceilings_error", "SWEEP_SETTINGS", "QUICK_SETTINGS", "describe_budget", "gpu_measurer",
]
