"""The workloads: each one's single home. A ``te.compute`` definition, a NumPy reference,
FLOPs and bytes, and the same computation in PyTorch (the measured baseline).

Each workload is a frozen, validated parameter set (see knobs.py), so a shape that
exists is legal. ``prim_func(variant)`` gives the TensorIR function a template schedules
(and the exported script prints); stage (block) names are fixed here because the
templates look them up by name. A workload is registered through its templates
(explorer/schedules/__init__.py).
"""
from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .errors import InvalidWorkload
from .knobs import Params, knob

DTYPE = "float32"
BYTES_PER_ELEMENT = 4
# Input types of a matmul; float32 everywhere else.
MATMUL_DTYPES = ("float32", "float16", "bfloat16")
MANTISSA_BITS = {"float32": 23, "float16": 10, "bfloat16": 7}  # ε = 2^-bits
# Keep NumPy references and device buffers classroom-sized (a few hundred MB at most).
MAX_ELEMENTS = 1 << 26


@dataclass(frozen=True)
class Workload(Params):
    """Base: subclasses define shapes, ``_tensors`` and ``reference``."""

    noun: ClassVar[str] = "Shape parameter"
    error: ClassVar[type] = InvalidWorkload
    kind: ClassVar[str] = ""
    title: ClassVar[str] = ""
    input_names: ClassVar[tuple[str, ...]] = ()
    output_name: ClassVar[str] = ""
    variants: ClassVar[tuple[str, ...]] = ("default",)

    def __post_init__(self):
        super().__post_init__()
        for shape in (*self.input_shapes(), self.output_shape()):
            if min(shape) < 1:
                raise InvalidWorkload(f"{self.label()}: the output would be empty ({shape}); "
                                      f"make the input larger or the kernel smaller.")
            if math.prod(shape) > MAX_ELEMENTS:
                raise InvalidWorkload(
                    f"{self.label()}: a tensor of shape {shape} has more than {MAX_ELEMENTS:,} elements; "
                    f"choose a smaller shape."
                )

    # -- to override -------------------------------------------------------
    def input_shapes(self) -> tuple[tuple[int, ...], ...]:
        raise NotImplementedError

    def output_shape(self) -> tuple[int, ...]:
        raise NotImplementedError

    def input_dtypes(self) -> tuple[str, ...]:
        """TVM type names of the inputs."""
        return (DTYPE,) * len(self.input_shapes())

    def output_dtype(self) -> str:
        """TVM type name of the output: the type of the buffer a kernel writes (the NumPy
        reference stays float32, the more exact of the two)."""
        return DTYPE

    def _tensors(self, variant: str):
        """Return (inputs, output) te tensors."""
        raise NotImplementedError

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def torch_op(self, tensors: list) -> Callable | None:
        """A call that computes this workload from its input tensors (CUDA, in the input
        types) with PyTorch, for the baseline; None where PyTorch has no such op."""
        return None

    @property
    def flops(self) -> int:
        raise NotImplementedError

    def label(self) -> str:
        raise NotImplementedError

    # -- shared ------------------------------------------------------------
    def prim_func(self, variant: str = "default"):
        return _prim_func(self, variant)

    @property
    def compulsory_bytes(self) -> int:
        """Every input read once and the output written once."""
        typed_shapes = zip(self.input_shapes(), self.input_dtypes(), strict=True)
        inputs = sum(math.prod(shape) * numpy_dtype(dtype).itemsize for shape, dtype in typed_shapes)
        return inputs + math.prod(self.output_shape()) * numpy_dtype(self.output_dtype()).itemsize

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Uniform in [-1, 1), drawn in float32 and then rounded to each input's type."""
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1.0, 1.0, size=s).astype(DTYPE).astype(numpy_dtype(d))
                for s, d in zip(self.input_shapes(), self.input_dtypes(), strict=True)]

    def reduction_length(self) -> int:
        """Terms summed per output: sets the tolerance of a float32 comparison."""
        return max(1, self.flops // (2 * math.prod(self.output_shape())))


def numpy_dtype(name: str) -> np.dtype:
    """NumPy's type for a TVM dtype name; NumPy has no bfloat16, ml_dtypes (a TVM dependency) has."""
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


@functools.lru_cache(maxsize=256)
def _prim_func(workload: Workload, variant: str):
    from tvm import te

    if variant not in workload.variants:
        raise InvalidWorkload(f"{workload.kind} has no formulation '{variant}'; "
                              f"it has: {', '.join(workload.variants)}.")
    inputs, output = workload._tensors(variant)
    return te.create_prim_func([*inputs, output])


def _same_padding(size: int, kernel: int, stride: int) -> tuple[int, int, int]:
    """(output size, pad before, pad after) for TensorFlow-style SAME padding."""
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return out, total // 2, total - total // 2


@dataclass(frozen=True)
class DepthwiseConv2d(Workload):
    owner: ClassVar[str] = "depthwise_conv2d"
    kind: ClassVar[str] = "depthwise_conv2d"
    title: ClassVar[str] = "Depthwise conv2d (NCHW)"
    batch: int = knob(1, "Images in the batch (N).", low=1, high=16)
    channels: int = knob(256, "Input channels (C).", low=1, high=2048)
    height: int = knob(96, "Input height (H).", low=1, high=1024)
    width: int = knob(96, "Input width (W).", low=1, high=1024)
    multiplier: int = knob(1, "Channel multiplier: output channels per input channel.", low=1, high=4)
    kernel: int = knob(3, "Filter height and width.", low=1, high=11)
    stride: int = knob(1, "Stride in height and width.", low=1, high=4)
    padding: str = knob("SAME", "SAME keeps H×W (for stride 1); VALID adds no padding.", choices=("SAME", "VALID"))
    epilogue: bool = knob(False, "Follow the convolution by scale_shift + ReLU (the blog's fusion example).")

    @property
    def input_names(self):  # type: ignore[override]
        return ("Input", "Filter", "Scale", "Shift") if self.epilogue else ("Input", "Filter")

    @property
    def output_name(self):  # type: ignore[override]
        return "Relu" if self.epilogue else "DepthwiseConv2d"

    def _geometry(self):
        if self.padding == "SAME":
            oh, pt, pb = _same_padding(self.height, self.kernel, self.stride)
            ow, pl, pr = _same_padding(self.width, self.kernel, self.stride)
        else:
            oh = (self.height - self.kernel) // self.stride + 1
            ow = (self.width - self.kernel) // self.stride + 1
            pt = pb = pl = pr = 0
        return oh, ow, pt, pb, pl, pr

    def input_shapes(self):
        c = self.channels
        shapes = [(self.batch, c, self.height, self.width), (c, self.multiplier, self.kernel, self.kernel)]
        if self.epilogue:
            shapes += [(c * self.multiplier,), (c * self.multiplier,)]
        return tuple(shapes)

    def output_shape(self):
        oh, ow, *_ = self._geometry()
        return (self.batch, self.channels * self.multiplier, oh, ow)

    @property
    def padded_shape(self) -> tuple[int, int, int, int]:
        _, _, pt, pb, pl, pr = self._geometry()
        return (self.batch, self.channels, self.height + pt + pb, self.width + pl + pr)

    def _tensors(self, variant):
        from tvm import te, tirx

        oh, ow, pt, _, pl, _ = self._geometry()
        m, k, s = self.multiplier, self.kernel, self.stride
        data = te.placeholder(self.input_shapes()[0], name="Input")
        filt = te.placeholder(self.input_shapes()[1], name="Filter")
        padded = te.compute(
            self.padded_shape,
            lambda b, c, i, j: tirx.if_then_else(
                tirx.all(i >= pt, i - pt < self.height, j >= pl, j - pl < self.width),
                data[b, c, i - pt, j - pl],
                tirx.const(0.0, DTYPE),
            ),
            name="PaddedInput",
        )
        di = te.reduce_axis((0, k), name="di")
        dj = te.reduce_axis((0, k), name="dj")
        conv = te.compute(
            self.output_shape(),
            lambda b, c, i, j: te.sum(
                padded[b, c // m, i * s + di, j * s + dj] * filt[c // m, c % m, di, dj], axis=[di, dj]
            ),
            name="DepthwiseConv2d",
        )
        if not self.epilogue:
            return [data, filt], conv
        scale = te.placeholder(self.input_shapes()[2], name="Scale")
        shift = te.placeholder(self.input_shapes()[3], name="Shift")
        scaled = te.compute(conv.shape, lambda b, c, i, j: conv[b, c, i, j] * scale[c] + shift[c], name="ScaleShift")
        relu = te.compute(conv.shape, lambda *idx: te.max(scaled(*idx), tirx.const(0.0, DTYPE)), name="Relu")
        return [data, filt, scale, shift], relu

    def reference(self, data, filt, *epilogue):
        oh, ow, pt, pb, pl, pr = self._geometry()
        m, k, s = self.multiplier, self.kernel, self.stride
        x = np.pad(data.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        x = np.repeat(x, m, axis=1)  # output channel c reads input channel c // m
        w = filt.astype(np.float64).reshape(self.channels * m, k, k)
        out = np.zeros(self.output_shape())
        for di in range(k):
            for dj in range(k):
                window = x[:, :, di : di + (oh - 1) * s + 1 : s, dj : dj + (ow - 1) * s + 1 : s]
                out += window * w[None, :, di, dj, None, None]
        if epilogue:
            scale, shift = epilogue
            out = np.maximum(out * scale[None, :, None, None] + shift[None, :, None, None], 0.0)
        return out.astype(DTYPE)

    def torch_op(self, tensors):
        import torch
        import torch.nn.functional as F

        data, filt, *epilogue = tensors
        _, _, top, bottom, left, right = self._geometry()
        channels = self.channels * self.multiplier
        # Output channel c reads input channel c // multiplier: a grouped conv with one group per input channel.
        weight = filt.reshape(channels, 1, self.kernel, self.kernel)
        if (top, left) == (bottom, right):
            conv = lambda: F.conv2d(data, weight, stride=self.stride, padding=(top, left), groups=self.channels)  # noqa: E731
        else:  # SAME padding with an even kernel pads one more row/column after than before
            conv = lambda: F.conv2d(F.pad(data, (left, right, top, bottom)), weight, stride=self.stride,  # noqa: E731
                                    groups=self.channels)
        if not epilogue:
            return conv
        scale, shift = (t.reshape(1, channels, 1, 1) for t in epilogue)
        return lambda: torch.relu_(torch.addcmul(shift, conv(), scale))

    @property
    def flops(self):
        return 2 * math.prod(self.output_shape()) * self.kernel * self.kernel

    def label(self):
        fused = " + scale_shift + ReLU" if self.epilogue else ""
        return (
            f"depthwise [{self.batch},{self.channels},{self.height},{self.width}] "
            f"{self.kernel}x{self.kernel} m{self.multiplier} s{self.stride} {self.padding}{fused}"
        )


@dataclass(frozen=True)
class Conv1d(Workload):
    """Full 1-D convolution: output length M + N - 1 (``np.convolve``)."""

    owner: ClassVar[str] = "conv1d"
    kind: ClassVar[str] = "conv1d"
    title: ClassVar[str] = "1-D full convolution"
    input_names: ClassVar[tuple[str, ...]] = ("A", "W")
    output_name: ClassVar[str] = "B"
    # "full_reduction" is the 1-D blog's naive formulation: sum over all M+N-1 positions.
    variants: ClassVar[tuple[str, ...]] = ("default", "full_reduction")

    input_length: int = knob(16384, "Input length M.", low=1, high=1 << 22)
    filter_length: int = knob(32, "Filter length N.", low=1, high=4096)

    def input_shapes(self):
        return ((self.input_length,), (self.filter_length,))

    def output_shape(self):
        return (self.input_length + self.filter_length - 1,)

    def _tensors(self, variant):
        from tvm import te, tirx

        m, n = self.input_length, self.filter_length
        a = te.placeholder((m,), name="A")
        w = te.placeholder((n,), name="W")
        zero = tirx.const(0.0, DTYPE)
        if variant == "full_reduction":
            k = te.reduce_axis((0, m + n - 1), name="k")
            b = te.compute(
                self.output_shape(),
                lambda i: te.sum(
                    tirx.if_then_else(tirx.any(k >= m, i - k < 0, i - k >= n), zero, a[k] * w[i - k]), axis=k
                ),
                name="B",
            )
        else:
            r = te.reduce_axis((0, n), name="r")
            b = te.compute(
                self.output_shape(),
                lambda i: te.sum(tirx.if_then_else(tirx.all(i - r >= 0, i - r < m), a[i - r], zero) * w[r], axis=r),
                name="B",
            )
        return [a, w], b

    def reference(self, a, w):
        return np.convolve(a.astype(np.float64), w.astype(np.float64)).astype(DTYPE)

    def torch_op(self, tensors):
        import torch
        import torch.nn.functional as F

        signal, filt = tensors
        n = self.filter_length
        # np.convolve flips the filter; conv1d is a correlation: flip once, outside the timed op.
        flipped = torch.flip(filt, (0,)).reshape(1, 1, n)
        return lambda: F.conv1d(signal.reshape(1, 1, -1), flipped, padding=n - 1).reshape(-1)

    @property
    def flops(self):
        return 2 * self.input_length * self.filter_length

    def reduction_length(self):
        return self.filter_length

    def label(self):
        return f"conv1d M={self.input_length} N={self.filter_length}"


@dataclass(frozen=True)
class Conv2d(Workload):
    """conv2d NCHW with batch 1, as in the AutoTVM tutorial."""

    owner: ClassVar[str] = "conv2d"
    kind: ClassVar[str] = "conv2d"
    title: ClassVar[str] = "Conv2d (NCHW, batch 1)"
    input_names: ClassVar[tuple[str, ...]] = ("data", "kernel")
    output_name: ClassVar[str] = "conv"

    in_channels: int = knob(512, "Input channels (CI).", low=1, high=2048)
    out_channels: int = knob(512, "Output channels (CO).", low=1, high=2048)
    height: int = knob(7, "Input height (H).", low=1, high=512)
    width: int = knob(7, "Input width (W).", low=1, high=512)
    kernel_h: int = knob(3, "Filter height (KH).", low=1, high=11)
    kernel_w: int = knob(3, "Filter width (KW).", low=1, high=11)
    stride: int = knob(1, "Stride in height and width.", low=1, high=4)
    padding: int = knob(1, "Zero padding on each side.", low=0, high=5)

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.padding - self.kernel_h) // self.stride + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.padding - self.kernel_w) // self.stride + 1

    def input_shapes(self):
        return (
            (1, self.in_channels, self.height, self.width),
            (self.out_channels, self.in_channels, self.kernel_h, self.kernel_w),
        )

    def output_shape(self):
        return (1, self.out_channels, self.out_height, self.out_width)

    def _tensors(self, variant):
        from tvm import te, tirx

        p, s = self.padding, self.stride
        data = te.placeholder(self.input_shapes()[0], name="data")
        kernel = te.placeholder(self.input_shapes()[1], name="kernel")
        padded = te.compute(
            (1, self.in_channels, self.height + 2 * p, self.width + 2 * p),
            lambda n, c, y, x: tirx.if_then_else(
                tirx.all(y >= p, y - p < self.height, x >= p, x - p < self.width),
                data[n, c, y - p, x - p],
                tirx.const(0.0, DTYPE),
            ),
            name="pad_temp",
        )
        rc = te.reduce_axis((0, self.in_channels), name="rc")
        ry = te.reduce_axis((0, self.kernel_h), name="ry")
        rx = te.reduce_axis((0, self.kernel_w), name="rx")
        conv = te.compute(
            self.output_shape(),
            lambda n, f, y, x: te.sum(
                padded[n, rc, y * s + ry, x * s + rx] * kernel[f, rc, ry, rx], axis=[rc, ry, rx]
            ),
            name="conv",
        )
        return [data, kernel], conv

    def reference(self, data, kernel):
        p, s = self.padding, self.stride
        x = np.pad(data[0].astype(np.float64), ((0, 0), (p, p), (p, p)))
        w = kernel.astype(np.float64)
        oh, ow = self.out_height, self.out_width
        out = np.zeros((self.out_channels, oh, ow))
        for ky in range(self.kernel_h):
            for kx in range(self.kernel_w):
                window = x[:, ky : ky + (oh - 1) * s + 1 : s, kx : kx + (ow - 1) * s + 1 : s]
                out += np.einsum("fc,cyx->fyx", w[:, :, ky, kx], window)
        return out[None].astype(DTYPE)

    def torch_op(self, tensors):
        import torch.nn.functional as F

        data, kernel = tensors
        return lambda: F.conv2d(data, kernel, stride=self.stride, padding=self.padding)

    @property
    def flops(self):
        return 2 * math.prod(self.output_shape()) * self.in_channels * self.kernel_h * self.kernel_w

    def label(self):
        return (
            f"conv2d [1,{self.in_channels},{self.height},{self.width}] x "
            f"[{self.out_channels},{self.in_channels},{self.kernel_h},{self.kernel_w}] s{self.stride} p{self.padding}"
        )


@dataclass(frozen=True)
class Matmul(Workload):
    owner: ClassVar[str] = "matmul"
    kind: ClassVar[str] = "matmul"
    title: ClassVar[str] = "Matrix multiply"
    input_names: ClassVar[tuple[str, ...]] = ("A", "B")
    output_name: ClassVar[str] = "C"

    # Up to 16384: a language model's layers reach 11008 (LLaMA-7B's MLP) and 14336.
    m: int = knob(1024, "Rows of A and C (M).", low=1, high=16384)
    n: int = knob(1024, "Columns of B and C (N).", low=1, high=16384)
    k: int = knob(1024, "Columns of A, rows of B (K): the reduction.", low=1, high=16384)
    dtype: str = knob(DTYPE, "Element type of A and B; products are summed in float32.", choices=MATMUL_DTYPES)
    out_dtype: str = knob(DTYPE, "Element type of C: float32 (the sums as they are), or the inputs' type "
                          "(each sum rounded once when stored: half the bytes written).", choices=MATMUL_DTYPES)

    def __post_init__(self):
        super().__post_init__()
        if self.out_dtype not in (DTYPE, self.dtype):
            raise InvalidWorkload(f"{self.label()}: C is written in float32 or in the inputs' type "
                                  f"({self.dtype}), not in {self.out_dtype}.")

    def input_shapes(self):
        return ((self.m, self.k), (self.k, self.n))

    def output_shape(self):
        return (self.m, self.n)

    def _tensors(self, variant):
        from tvm import te

        a = te.placeholder((self.m, self.k), self.dtype, name="A")
        b = te.placeholder((self.k, self.n), self.dtype, name="B")
        r = te.reduce_axis((0, self.k), name="r")
        if self.dtype == DTYPE:
            body = lambda i, j: te.sum(a[i, r] * b[r, j], axis=r)  # noqa: E731
        else:  # half-precision inputs, float32 accumulation
            body = lambda i, j: te.sum(a[i, r].astype(DTYPE) * b[r, j].astype(DTYPE), axis=r)  # noqa: E731
        if self.out_dtype == DTYPE:
            return [a, b], te.compute((self.m, self.n), body, name="C")
        # A reduction keeps the type it sums in: the float32 sums, then one rounding per element.
        sums = te.compute((self.m, self.n), body, name="C_float32")
        return [a, b], te.compute((self.m, self.n), lambda i, j: sums[i, j].astype(self.out_dtype), name="C")

    def reference(self, a, b):
        # The inputs are already rounded to their type: the reference is exact up to float64.
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(DTYPE)

    def torch_op(self, tensors):
        """fp16/bf16 inputs stay in that type: PyTorch runs cuBLAS's half-precision GEMM, on tensor cores."""
        import torch

        a, b = tensors
        return lambda: torch.matmul(a, b)

    def input_dtypes(self):
        return (self.dtype, self.dtype)

    def output_dtype(self):
        return self.out_dtype

    def reduction_length(self):
        """For fp16/bf16 inputs a library may write C in the input type (PyTorch does; so does
        this workload with out_dtype = dtype), and tensor cores may sum in another order: one
        rounding to the input type is allowed on top of the float32 sum, counted as the float32
        terms it is worth (ε_dtype / ε32)."""
        k = super().reduction_length()
        if self.dtype == DTYPE:
            return k
        return k + 2 ** (MANTISSA_BITS[DTYPE] - MANTISSA_BITS[self.dtype])

    @property
    def flops(self):
        return 2 * self.m * self.n * self.k

    def label(self):
        typed = "" if self.dtype == DTYPE else f" {self.dtype}"
        out = "" if self.out_dtype == DTYPE else f", C {self.out_dtype}"
        return f"matmul {self.m}x{self.n}x{self.k}{typed}{out}"


# The longest run of float32 additions into one accumulator that a sum template makes: a thread's
# serial sum before the tree (the templates refuse longer runs), plus the tree's steps. It sets the
# sum's tolerance (Sum.reduction_length).
SUM_MAX_RUN = 1024


@dataclass(frozen=True)
class Sum(Workload):
    """A float32 vector summed to one float32 (the classic parallel reduction)."""

    owner: ClassVar[str] = "sum"
    kind: ClassVar[str] = "sum"
    title: ClassVar[str] = "Sum of a vector (parallel reduction)"
    input_names: ClassVar[tuple[str, ...]] = ("A",)
    output_name: ClassVar[str] = "B"

    n: int = knob(1 << 26, "Elements summed (2^26 float32 = 256 MB streams from HBM; 2^22 = 16 MB fits in "
                  "the H100's L2).", low=1, high=MAX_ELEMENTS)

    def input_shapes(self):
        return ((self.n,),)

    def output_shape(self):
        return (1,)

    def _tensors(self, variant):
        from tvm import te

        a = te.placeholder((self.n,), name="A")
        k = te.reduce_axis((0, self.n), name="k")
        b = te.compute((1,), lambda _: te.sum(a[k], axis=k), name="B")
        return [a], b

    def reference(self, a):
        return np.array([a.astype(np.float64).sum()]).astype(DTYPE)

    def torch_op(self, tensors):
        import torch

        (a,) = tensors
        return lambda: torch.sum(a).reshape(1)

    @property
    def flops(self):
        """n additions: every kernel here (and PyTorch's) adds each element once to an accumulator
        that starts at zero, so a sum of n elements is n additions (not the n − 1 a sum needs at
        least): one FLOP per 4 bytes read."""
        return self.n

    def reduction_length(self):
        """The gate's tolerance is ε × this × |sum|. Counting all n terms (the base class) would allow
        ε·n·|sum|: 32 times the sum itself at n = 2^26, which accepts a kernel that drops whole
        blocks of terms. What bounds the rounding is how many additions feed one accumulator in a
        row: a thread's serial run (at most SUM_MAX_RUN) and the steps of the trees above it
        (log2 n). A float32 tree sum of 2^26 uniform terms is off by about 10^-3; one block's
        missing partial sum is off by about its size (√(terms/3), 9 for 256 terms)."""
        return min(self.n, SUM_MAX_RUN + max(1, self.n - 1).bit_length())

    def label(self):
        return f"sum n={self.n:,}"
