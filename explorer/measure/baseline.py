"""The fair baseline: the same workload in PyTorch (cuDNN / cuBLAS), measured like TVM's.

Fair means: the same inputs and the same NumPy check as the TVM kernel; float32 with TF32
off (TF32 would round the inputs to 10-bit mantissas); cuDNN's autotuner on
(``cudnn.benchmark``), so PyTorch runs the fastest algorithm it has; and timed with CUDA
graphs (``graphs.py``): each PyTorch call from Python costs 20-60 µs of host time, more than
many of these kernels take, and replaying a captured graph removes it. TVM kernels are
timed both back to back (``time_evaluator``) and with CUDA graphs; the graph figure is the
one to compare with this baseline.

Runs in the measuring worker (it needs the GPU); imports torch only when called.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..workloads import Conv1d, Conv2d, DepthwiseConv2d, Matmul, Workload
from .errors import BaselineUnavailable
from .gate import Check, compare
from .graphs import cuda_torch, time_cuda_graph
from .settings import Settings
from .timing import Timing
from .worker import workload_data


@dataclass(frozen=True)
class BaselineRun:
    library: str  # e.g. "PyTorch 2.11.0, cuDNN 91002"
    device: str
    check: Check
    timing: Timing | None  # None when PyTorch's output does not match the reference


def torch_baseline(workload: Workload, settings: Settings) -> BaselineRun:
    torch = cuda_torch()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    inputs, reference = workload_data(workload, settings.seed)
    op = torch_op(workload, [torch_tensor(x).cuda() for x in inputs])
    output = op()
    torch.cuda.synchronize()
    # fp16/bf16 matmuls return C in the input type; the check reads it as float32.
    check = compare(output.float().cpu().numpy(), reference, workload.reduction_length())
    timing = time_cuda_graph(op, settings) if check.correct else None
    library = f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
    return BaselineRun(library, torch.cuda.get_device_name(0), check, timing)


def torch_tensor(array):
    """A CPU tensor of a NumPy array; bfloat16 (ml_dtypes, which torch does not read) goes
    through its 16-bit pattern."""
    import torch

    if array.dtype.name == "bfloat16":
        return torch.from_numpy(array.view("uint16")).view(torch.bfloat16)
    return torch.from_numpy(array)


def torch_op(workload: Workload, tensors: list) -> Callable:
    """A call that computes ``workload`` from its input tensors (CUDA; float32, or a matmul's
    fp16/bf16 in that type: PyTorch runs cuBLAS's half-precision GEMM, on tensor cores)."""
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
