"""The fair baseline: the same workload in PyTorch (cuDNN / cuBLAS), measured like TVM's.

Fair means: the same inputs and the same check as the TVM kernel (the worker's kept data of the
workload, ``data.py``); float32 with TF32
off (TF32 would round the inputs to 10-bit mantissas); cuDNN's autotuner on
(``cudnn.benchmark``), so PyTorch runs the fastest algorithm it has; and timed with CUDA
graphs (``graphs.py``): each PyTorch call from Python costs 20-60 µs of host time, more than
many of these kernels take, and replaying a captured graph removes it. TVM kernels are
timed both back to back (``time_evaluator``) and with CUDA graphs; the graph figure is the
one to compare with this baseline.

Runs in the measuring worker (it needs the GPU); imports torch only when called. The
PyTorch op itself is the workload's (``Workload.torch_op``). ``python -m
explorer.measure.baseline WORKLOAD_JSON CALLS`` calls it CALLS times and nothing else: the
program Nsight Compute profiles for PyTorch's kernel durations (``bench/kernels.py --ncu``).
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass

import tvm

from ..schedules import workload_from_mapping
from ..workloads import Workload
from .errors import BaselineUnavailable
from .gate import Check
from .graphs import cuda_torch, time_cuda_graph, torch_tensor
from .settings import MeasureSettings
from .timing import Timing
from .worker import KEPT


@dataclass(frozen=True)
class BaselineRun:
    library: str  # e.g. "PyTorch 2.11.0, cuDNN 91002"
    device: str
    check: Check
    timing: Timing | None  # None when PyTorch's output does not match the reference


def torch_baseline(workload: Workload, settings: MeasureSettings) -> BaselineRun:
    torch = cuda_torch()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    kept, _ = KEPT.get(workload, settings.seed, tvm.cuda(0))
    # The kept inputs themselves: a PyTorch op writes none of its inputs.
    op = workload.torch_op([torch.from_dlpack(x) for x in kept.pristine[:-1]])
    if op is None:
        raise BaselineUnavailable(f"There is no PyTorch baseline for {workload.title}.")
    output = op()
    torch.cuda.synchronize()
    # fp16/bf16 matmuls return C in the input type, as the kernels' output is.
    check = kept.check(output.reshape(workload.output_shape()))
    timing = time_cuda_graph(op, settings) if check.correct else None
    library = f"PyTorch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}"
    return BaselineRun(library, torch.cuda.get_device_name(0), check, timing)


def workload_to_json(workload: Workload) -> str:
    return json.dumps({"kind": workload.kind, "workload": workload.to_dict()})


def call_torch_op(workload_json: str, calls: int) -> None:
    """The profiled program: the workload's PyTorch op on the seeded inputs, ``calls`` times,
    TF32 off as in :func:`torch_baseline`; the inputs are copied to the GPU, which launches
    no kernel, so every launch profiled is the op's."""
    data = json.loads(workload_json)
    workload = workload_from_mapping(data["kind"], data["workload"])
    torch = cuda_torch()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    op = workload.torch_op([torch_tensor(x).cuda() for x in workload.random_inputs(0)])
    if op is None:
        raise BaselineUnavailable(f"There is no PyTorch baseline for {workload.title}.")
    for _ in range(calls):
        op()
    torch.cuda.synchronize()


if __name__ == "__main__":
    call_torch_op(sys.argv[1], int(sys.argv[2]))
