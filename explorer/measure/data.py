"""Each workload's data where its kernels run, made once and kept there: the seeded inputs, the
output a kernel writes (NaN before each run, so that an element it never writes is caught) and the
float32 reference computed in float64. The measuring worker keeps the latest workloads' (an LRU
within a share of the device's memory, :class:`KeptData`), so a new setting of a workload it has
seen copies nothing from the host: in a class, every student's setting of a lesson step.

On a GPU with PyTorch the inputs are drawn there (PyTorch's generator, seeded: uniform in [-1, 1)
in float32, then rounded to each input's type, as the NumPy inputs are) and the reference is the
workload's PyTorch op in float64 on them, there too (NumPy's, on the inputs brought to the host
once, where the op has no float64 kernel). Elsewhere (the CPU, a GPU without PyTorch) the NumPy
inputs (``Workload.random_inputs``) are uploaded once and NumPy computes the reference; tests keep
NumPy the referee.

A kernel never gets the kept inputs themselves but copies made on the device before each run
(:meth:`Kept.fresh_args`, a tenth of a millisecond for a few hundred MB), so a kernel that writes
its inputs leaves the next one's as they were. One that writes far past its buffers could reach the
kept ones: their digest is checked before each run where that is cheap (on the device with
PyTorch, or on the CPU) and after a wrong result elsewhere, and inputs found changed are made again.
"""
from __future__ import annotations

import functools
import math
from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tvm

from ..workloads import Workload, numpy_dtype
from .gate import Check, compare, compare_on_gpu, tolerance, tolerance_at
from .graphs import torch_tensor

# The share of a GPU's memory its workloads' data may hold (an H100's 80 GB: 20 GB, a class's
# lessons about 10); on the CPU, a fixed amount.
GPU_SHARE = 4
CPU_KEEP_BYTES = 1 << 30
# What the worker put where its kernels run, by (what, workload label): "inputs" (made: drawn there
# or uploaded), "uploads" (inputs or a reference copied from the host), "references" (computed),
# "remade" (inputs found changed and made again), "evicted" (dropped for a newer workload's).
COUNTS: Counter = Counter()


def torch_cuda() -> bool:
    """Whether PyTorch is importable here and sees a CUDA GPU."""
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # no PyTorch, or one without CUDA
        return False


@dataclass(eq=False)
class Kept:
    """One workload's data on one device. ``pristine`` and ``args`` are TVM tensors there (the
    inputs, then the output); a kernel only ever gets ``args``."""

    workload: Workload
    seed: int
    pristine: list  # never passed to a kernel: the inputs, then the output full of NaN
    args: list  # the kernel's arguments, copied from ``pristine`` before each run
    reference: object  # float32: a PyTorch tensor on the device (``on_device``), else a NumPy array
    tolerance: float
    on_device: bool  # drawn, kept and checked there with PyTorch
    check_each_run: bool  # the digest is cheap to take: checked before every run
    digest: tuple = ()

    def __post_init__(self):
        self.digest = self._digest()

    @property
    def nbytes(self) -> int:
        return kept_bytes(self.workload)

    def fresh_args(self) -> list:
        """The kernel's arguments for one run: the kept inputs and the NaN output copied on the
        device (the kept ones checked first, where that is cheap)."""
        if self.check_each_run:
            self.check_kept()
        for kept, arg in zip(self.pristine, self.args, strict=True):
            kept.copyto(arg)
        return list(self.args)

    def after_wrong(self) -> None:
        """A kernel was wrong: it may have written anywhere, the kept data too."""
        if not self.check_each_run:
            self.check_kept()

    def check_kept(self) -> None:
        """Make the inputs again if a kernel wrote into the kept ones (seeded: the same again)."""
        if self._digest() != self.digest:
            COUNTS["remade", self.workload.label()] += 1
            for kept, again in zip(self.pristine, _inputs_again(self), strict=True):
                kept.copyfrom(again)

    def check(self, output) -> Check:
        """``output`` (a TVM tensor, the kernel's) against the reference."""
        n, floor = self.workload.reduction_length(), self.workload.tolerance_floor
        if not self.on_device:
            return compare(output.numpy(), self.reference, n, floor)
        import torch

        tensor = output if isinstance(output, torch.Tensor) else torch.from_dlpack(output)
        return compare_on_gpu(tensor, self.reference, self.tolerance,
                              lambda: compare(tensor.float().cpu().numpy(), self.reference_array(), n, floor))

    def reference_array(self) -> np.ndarray:
        """The reference on the host (brought back from the device only when asked: a wrong result)."""
        return self.reference.cpu().numpy() if self.on_device else self.reference

    def _digest(self) -> tuple:
        if self.on_device:
            import torch

            return tuple(torch.stack([_words(torch.from_dlpack(t)).sum(dtype=torch.int64)
                                      for t in self.pristine]).tolist())
        return tuple(int(_words(t.numpy()).sum(dtype=np.int64)) for t in self.pristine)


def _words(array):
    """A tensor's (or array's) bytes as 32-bit words where they divide into them, else bytes."""
    flat = array.reshape(-1)
    raw = flat.view(np.uint8) if isinstance(flat, np.ndarray) else flat.view(_torch_uint8())
    if raw.shape[0] % 4:
        return raw
    return raw.view(np.int32) if isinstance(raw, np.ndarray) else raw.view(_torch_int32())


def _torch_uint8():
    import torch

    return torch.uint8


def _torch_int32():
    import torch

    return torch.int32


def kept_bytes(workload: Workload) -> int:
    """What a workload's kept data holds: its inputs and output twice (kept and copied), the reference."""
    return 2 * workload.compulsory_bytes + 4 * math.prod(workload.output_shape())


def keep_budget(device) -> int:
    """The bytes of workload data kept on ``device``."""
    if _is_gpu(device):
        return int(device.total_global_memory) // GPU_SHARE
    return CPU_KEEP_BYTES


def _is_gpu(device) -> bool:
    return device.dlpack_device_type() != tvm.cpu(0).dlpack_device_type()


def make_kept(workload: Workload, seed: int, device) -> Kept:
    """``workload``'s data on ``device``: drawn there with PyTorch on a GPU it sees, else uploaded."""
    if _is_gpu(device) and torch_cuda():
        return kept_on_device(workload, seed, device)
    return kept_from_host(workload, seed, device)


def kept_from_host(workload: Workload, seed: int, device) -> Kept:
    """The NumPy inputs uploaded once, and NumPy's reference."""
    label = workload.label()
    inputs = workload.random_inputs(seed)
    reference = workload.reference(*inputs)
    COUNTS["inputs", label] += 1
    COUNTS["uploads", label] += 1
    COUNTS["references", label] += 1
    nan = np.full(reference.shape, np.nan, dtype=numpy_dtype(workload.output_dtype()))
    pristine = [tvm.runtime.tensor(x, device) for x in (*inputs, nan)]
    args = [tvm.runtime.empty(t.shape, t.dtype, device) for t in pristine]
    return Kept(workload, seed, pristine, args, reference,
                tolerance(reference, workload.reduction_length(), workload.tolerance_floor),
                on_device=False, check_each_run=not _is_gpu(device))


def kept_on_device(workload: Workload, seed: int, device) -> Kept:
    """The inputs drawn by PyTorch where the kernels run, and the reference computed there."""
    import torch

    label = workload.label()
    where = torch.device("cuda" if _is_gpu(device) else "cpu", device.index)
    inputs = drawn_inputs(workload, seed, where)
    reference = torch_reference(workload, inputs)
    if reference is None:  # the op has no float64 kernel: NumPy's, on the inputs brought to the host once
        reference = torch.from_numpy(workload.reference(*[_host_array(x) for x in inputs])).to(where)
        COUNTS["uploads", label] += 1
    COUNTS["inputs", label] += 1
    COUNTS["references", label] += 1
    nan = torch.full(workload.output_shape(), float("nan"), dtype=_torch_dtype(workload.output_dtype()),
                     device=where)
    pristine = [tvm.runtime.from_dlpack(x) for x in (*inputs, nan)]
    args = [tvm.runtime.from_dlpack(torch.empty_like(x)) for x in (*inputs, nan)]
    largest = float(reference.abs().max()) if reference.numel() else 0.0
    tol = tolerance_at(largest, workload.reduction_length(), workload.tolerance_floor)
    if where.type == "cuda":
        torch.cuda.empty_cache()  # the float64 reference's intermediates (an attention's scores: gigabytes)
    return Kept(workload, seed, pristine, args, reference, tol, on_device=True, check_each_run=True)


def _inputs_again(kept: Kept) -> list:
    """The inputs made again (then the NaN output), to copy into kept ones a kernel wrote into."""
    if kept.on_device:
        import torch

        device = torch.from_dlpack(kept.pristine[0]).device
        return [tvm.runtime.from_dlpack(x) for x in drawn_inputs(kept.workload, kept.seed, device)] + \
               [tvm.runtime.from_dlpack(torch.full_like(torch.from_dlpack(kept.pristine[-1]), float("nan")))]
    COUNTS["uploads", kept.workload.label()] += 1
    nan = np.full(kept.pristine[-1].shape, np.nan, dtype=numpy_dtype(kept.workload.output_dtype()))
    return [*kept.workload.random_inputs(kept.seed), nan]


def drawn_inputs(workload: Workload, seed: int, where) -> list:
    """The seeded inputs drawn by PyTorch on ``where`` (a torch device): uniform in [-1, 1) in
    float32, then rounded to each input's type."""
    import torch

    generator = torch.Generator(device=where)
    generator.manual_seed(seed)
    out = []
    for shape, dtype in zip(workload.input_shapes(), workload.input_dtypes(), strict=True):
        uniform = torch.rand(shape, generator=generator, device=where, dtype=torch.float32).mul_(2).sub_(1)
        out.append(uniform.to(_torch_dtype(dtype)))
    return out


def torch_reference(workload: Workload, inputs: list):
    """The workload's output computed in float64 by its PyTorch op on ``inputs`` (PyTorch tensors),
    rounded to float32; None where the op is missing or has no float64 kernel."""
    import torch

    op = workload.torch_op([x.double() for x in inputs])
    if op is None:
        return None
    try:
        with torch.backends.cudnn.flags(enabled=True, allow_tf32=False):
            return op().float().reshape(workload.output_shape())
    except RuntimeError:  # an op without a float64 kernel
        return None


def _torch_dtype(name: str):
    import torch

    return getattr(torch, name)


def _host_array(tensor) -> np.ndarray:
    """A PyTorch tensor on the host in NumPy's type for it (bfloat16 through its 16-bit pattern)."""
    import torch

    if tensor.dtype == torch.bfloat16:
        return tensor.cpu().view(torch.int16).numpy().view(numpy_dtype("bfloat16"))
    return tensor.cpu().numpy()


class KeptData:
    """The kept data of the latest workloads, the least recently used dropped first to keep
    within ``budget(device)`` bytes; ``make(workload, seed, device)`` makes one (:func:`make_kept`)."""

    def __init__(self, make: Callable[..., Kept] = make_kept, budget: Callable[[object], int] = keep_budget):
        self._make, self._budget = make, budget
        self._kept: OrderedDict[tuple, Kept] = OrderedDict()

    def get(self, workload: Workload, seed: int, device) -> tuple[Kept, bool]:
        """``workload``'s data on ``device``, and whether it was made now."""
        key = (workload, seed, device)
        kept = self._kept.get(key)
        made = kept is None
        if made:
            room = self._budget(device) - kept_bytes(workload)
            while self._kept and sum(k.nbytes for k in self._kept.values()) > room:
                COUNTS["evicted", self._kept.popitem(last=False)[1].workload.label()] += 1
            kept = self._kept[key] = self._make(workload, seed, device)
        self._kept.move_to_end(key)
        return kept, made

    def __len__(self) -> int:
        return len(self._kept)


# -- on the host (a remote device's inputs are made here and uploaded) -----------------------


# The lessons of a class use about a dozen workloads; the largest (4096² matrices) hold ~200 MB.
@functools.lru_cache(maxsize=16)
def workload_data(workload: Workload, seed: int) -> tuple[list, np.ndarray]:
    """The seeded NumPy inputs and the reference output, once per (workload, seed) per process:
    computed in float64 on the GPU by the workload's PyTorch op where there is one (a 4096³
    matrix product takes seconds in NumPy), else by NumPy."""
    inputs = workload.random_inputs(seed)
    return inputs, gpu_reference(workload, inputs) if torch_cuda() else workload.reference(*inputs)


def gpu_reference(workload: Workload, inputs: list[np.ndarray]) -> np.ndarray:
    """The workload's output in float64 on the GPU (:func:`torch_reference`) from NumPy inputs;
    NumPy's where the op is missing or cannot run in float64."""
    reference = torch_reference(workload, [torch_tensor(x).cuda() for x in inputs])
    return workload.reference(*inputs) if reference is None else reference.cpu().numpy()
