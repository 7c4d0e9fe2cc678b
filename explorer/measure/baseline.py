"""The fair baseline: the same workload in PyTorch (cuDNN / cuBLAS), measured like TVM's.

Fair means: the same inputs and the same NumPy check as the TVM kernel; float32 with TF32
off (TF32 would round the inputs to 10-bit mantissas); cuDNN's autotuner on
(``cudnn.benchmark``), so PyTorch runs the fastest algorithm it has; and timed with CUDA
graphs. TVM's ``time_evaluator`` launches back to back from C++, while each PyTorch call
from Python costs 20-60 µs of host time, more than many of these kernels take; replaying a
captured graph removes that host overhead, so both sides measure device time per launch.

Runs in the measuring worker (it needs the GPU); imports torch only when called.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

from ..workloads import Conv1d, Conv2d, DepthwiseConv2d, Matmul, Workload
from .errors import BaselineUnavailable
from .gate import Check, compare
from .settings import Settings
from .timing import Timing, launches_for
from .worker import workload_data

# Ops captured in one graph; a repeat replays the graph as often as it needs.
MAX_OPS_PER_GRAPH = 100
PROBE_OPS = 10


@dataclass(frozen=True)
class BaselineRun:
    library: str  # e.g. "PyTorch 2.11.0, cuDNN 91002"
    device: str
    check: Check
    timing: Timing | None  # None when PyTorch's output does not match the reference


def torch_baseline(workload: Workload, settings: Settings) -> BaselineRun:
    torch = _torch()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    inputs, reference = workload_data(workload, settings.seed)
    op = torch_op(workload, [torch.from_numpy(x).cuda() for x in inputs])
    output = op()
    torch.cuda.synchronize()
    check = compare(output.cpu().numpy(), reference, workload.reduction_length())
    timing = time_cuda_graph(op, settings) if check.correct else None
    library = f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
    return BaselineRun(library, torch.cuda.get_device_name(0), check, timing)


def torch_op(workload: Workload, tensors: list) -> Callable:
    """A call that computes ``workload`` from its input tensors (CUDA, float32)."""
    import torch
    import torch.nn.functional as F

    if isinstance(workload, DepthwiseConv2d):
        data, filt, *epilogue = tensors
        _, _, top, bottom, left, right = workload._geometry()
        channels = workload.channels * workload.multiplier
        # Output channel c reads input channel c // multiplier: a grouped conv with one group per input channel.
        weight = filt.reshape(channels, 1, workload.kernel, workload.kernel)
        if (top, left) == (bottom, right):
            conv = lambda: F.conv2d(data, weight, stride=workload.stride, padding=(top, left), groups=workload.channels)  # noqa: E731
        else:  # SAME padding with an even kernel pads one more row/column after than before
            conv = lambda: F.conv2d(F.pad(data, (left, right, top, bottom)), weight, stride=workload.stride,  # noqa: E731
                                    groups=workload.channels)
        if not epilogue:
            return conv
        scale, shift = (t.reshape(1, channels, 1, 1) for t in epilogue)
        return lambda: torch.relu_(torch.addcmul(shift, conv(), scale))
    if isinstance(workload, Conv1d):
        signal, filt = tensors
        n = workload.filter_length
        # np.convolve flips the filter; conv1d is a correlation: flip once, outside the timed op.
        flipped = torch.flip(filt, (0,)).reshape(1, 1, n)
        return lambda: F.conv1d(signal.reshape(1, 1, -1), flipped, padding=n - 1).reshape(-1)
    if isinstance(workload, Conv2d):
        data, kernel = tensors
        return lambda: F.conv2d(data, kernel, stride=workload.stride, padding=workload.padding)
    if isinstance(workload, Matmul):
        a, b = tensors
        return lambda: torch.matmul(a, b)
    raise BaselineUnavailable(f"There is no PyTorch baseline for {workload.title}.")


def time_cuda_graph(op: Callable, settings: Settings) -> Timing:
    """Per-op device time: ops captured back to back in one CUDA graph, the graph replayed
    until a repeat lasts ``settings.min_repeat_ms``; CUDA events around each repeat."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as graph capture requires
        for _ in range(3):
            op()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    probe_ms = _time_graph(_capture(op, PROBE_OPS), 1)[0] / PROBE_OPS
    per_repeat = launches_for(probe_ms * 1e-3, settings.min_repeat_ms)
    ops_per_graph = min(per_repeat, MAX_OPS_PER_GRAPH)
    replays = math.ceil(per_repeat / ops_per_graph)
    graph = _capture(op, ops_per_graph)
    launches = ops_per_graph * replays
    samples_ms = [elapsed / launches for elapsed in _time_graph(graph, replays, settings.repeats)]
    return Timing(tuple(ms * 1e3 for ms in samples_ms), launches)


def _capture(op: Callable, count: int):
    import torch

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(count):
            op()
    graph.replay()  # the first replay uploads the graph; not timed
    torch.cuda.synchronize()
    return graph


def _time_graph(graph, replays: int, repeats: int = 1) -> list[float]:
    """Milliseconds of each repeat of ``replays`` back-to-back replays."""
    import torch

    out = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(replays):
            graph.replay()
        end.record()
        end.synchronize()
        out.append(start.elapsed_time(end))
    return out


def _torch():
    try:
        import torch
    except ImportError:
        raise BaselineUnavailable("PyTorch is not installed where the kernels run, so there is no baseline.") from None
    if not torch.cuda.is_available():
        raise BaselineUnavailable("PyTorch cannot see a CUDA GPU where the kernels run, so there is no baseline.")
    return torch
