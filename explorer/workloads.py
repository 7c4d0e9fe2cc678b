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

    # The smallest output scale of the correctness gate (explorer.measure.gate.tolerance): inputs
    # uniform in [-1, 1] make the terms of a sum up to 1 in size, whatever the outputs.
    tolerance_floor: ClassVar[float] = 1.0

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


# -- row-wise kernels: one reduction (or two) per row, then an elementwise pass over it -----------

ROWWISE_DTYPES = ("float32", "float16")


@dataclass(frozen=True)
class RowWise(Workload):
    """Base of the row-wise workloads: ``rows`` independent rows of ``cols`` elements, each
    reduced by the stages named in ``reductions`` (in order; float32 whatever the input type)
    and then written out elementwise by stage ``output_name``. The template ``rowwise``
    schedules these stages by name."""

    output_name: ClassVar[str] = "Y"
    reductions: ClassVar[tuple[str, ...]] = ()

    rows: int = knob(4096, "Rows: each is reduced and normalized on its own.", low=1, high=1 << 16)
    cols: int = knob(4096, "Elements per row: the reduction length.", low=1, high=1 << 16)
    dtype: str = knob(DTYPE, "Element type of the input and output; the arithmetic inside is float32.",
                      choices=ROWWISE_DTYPES)

    def output_shape(self):
        return (self.rows, self.cols)

    def input_dtypes(self):
        return (self.dtype,) * len(self.input_shapes())

    def output_dtype(self):
        return self.dtype

    def _load(self, tensor, *index):
        """An input element in float32, the type of the arithmetic."""
        value = tensor[index]
        return value if self.dtype == DTYPE else value.astype(DTYPE)

    def _store(self, value):
        return value if self.dtype == DTYPE else value.astype(self.dtype)

    def reduction_length(self):
        """Terms summed per row; a 16-bit output adds one rounding, counted as the float32 terms it is
        worth (ε16 / ε32), as for a matmul."""
        extra = 0 if self.dtype == DTYPE else 2 ** (MANTISSA_BITS[DTYPE] - MANTISSA_BITS[self.dtype])
        return self.cols + extra


@dataclass(frozen=True)
class Softmax(RowWise):
    kind: ClassVar[str] = "softmax"
    title: ClassVar[str] = "Softmax over rows"
    input_names: ClassVar[tuple[str, ...]] = ("X",)
    reductions: ClassVar[tuple[str, ...]] = ("row_max", "exp_sum")
    # Probabilities (~1 / cols) summed from positive terms: each output's error is relative to itself,
    # and a floor of 1 would pass a kernel that writes zeros.
    tolerance_floor: ClassVar[float] = 0.0

    def input_shapes(self):
        return ((self.rows, self.cols),)

    def _tensors(self, variant):
        from tvm import te

        x = te.placeholder((self.rows, self.cols), self.dtype, name="X")
        k = te.reduce_axis((0, self.cols), name="k")
        row_max = te.compute((self.rows,), lambda i: te.max(self._load(x, i, k), axis=k), name="row_max")
        k2 = te.reduce_axis((0, self.cols), name="k")
        exp_sum = te.compute((self.rows,), lambda i: te.sum(te.exp(self._load(x, i, k2) - row_max[i]), axis=k2),
                             name="exp_sum")
        y = te.compute((self.rows, self.cols),
                       lambda i, j: self._store(te.exp(self._load(x, i, j) - row_max[i]) / exp_sum[i]), name="Y")
        return [x], y

    def reference(self, x):
        x = x.astype(np.float64)
        e = np.exp(x - x.max(axis=1, keepdims=True))
        return (e / e.sum(axis=1, keepdims=True)).astype(DTYPE)

    def torch_op(self, tensors):
        import torch

        (x,) = tensors
        return lambda: torch.softmax(x, dim=-1)

    @property
    def flops(self):
        # 7 per element, exp counted as one: the max's compare; subtract, exp, add for the sum;
        # subtract, exp, divide for the output.
        return 7 * self.rows * self.cols

    def label(self):
        return f"softmax {self.rows}x{self.cols} {self.dtype}"


LAYER_NORM_EPS = 1e-5


def _square(value):
    """value × value: one multiply (``power(value, 2)`` becomes a call to powf in CUDA)."""
    return value * value


@dataclass(frozen=True)
class LayerNorm(RowWise):
    kind: ClassVar[str] = "layer_norm"
    title: ClassVar[str] = "LayerNorm over rows"
    input_names: ClassVar[tuple[str, ...]] = ("X", "gamma", "beta")
    reductions: ClassVar[tuple[str, ...]] = ("row_sum", "centered_sq_sum")

    rows: int = knob(8192, "Rows (tokens): each is normalized on its own.", low=1, high=1 << 16)
    cols: int = knob(4096, "Hidden size: elements per row, the reduction length.", low=1, high=1 << 16)
    dtype: str = knob("float16", "Element type of X, γ, β and Y; mean and variance are float32.",
                      choices=ROWWISE_DTYPES)

    def input_shapes(self):
        return ((self.rows, self.cols), (self.cols,), (self.cols,))

    def _tensors(self, variant):
        from tvm import te, tirx

        n = self.cols
        x = te.placeholder((self.rows, n), self.dtype, name="X")
        gamma = te.placeholder((n,), self.dtype, name="gamma")
        beta = te.placeholder((n,), self.dtype, name="beta")
        k = te.reduce_axis((0, n), name="k")
        row_sum = te.compute((self.rows,), lambda i: te.sum(self._load(x, i, k), axis=k), name="row_sum")
        k2 = te.reduce_axis((0, n), name="k")
        # Two passes (mean, then the squares of x - mean): no cancellation, as on data kept on chip.
        centered_sq_sum = te.compute(
            (self.rows,), lambda i: te.sum(_square(self._load(x, i, k2) - row_sum[i] / n), axis=k2),
            name="centered_sq_sum")
        y = te.compute(
            (self.rows, n),
            lambda i, j: self._store((self._load(x, i, j) - row_sum[i] / n)
                                     * tirx.rsqrt(centered_sq_sum[i] / n + LAYER_NORM_EPS)
                                     * self._load(gamma, j) + self._load(beta, j)),
            name="Y")
        return [x, gamma, beta], y

    def reference(self, x, gamma, beta):
        x = x.astype(np.float64)
        centered = x - x.mean(axis=1, keepdims=True)
        variance = (centered**2).mean(axis=1, keepdims=True)
        return (centered / np.sqrt(variance + LAYER_NORM_EPS) * gamma.astype(np.float64)
                + beta.astype(np.float64)).astype(DTYPE)

    def torch_op(self, tensors):
        import torch.nn.functional as F

        x, gamma, beta = tensors
        return lambda: F.layer_norm(x, (self.cols,), gamma, beta, LAYER_NORM_EPS)

    @property
    def flops(self):
        # 8 per element: the mean's add; subtract, square, add for the variance; subtract, scale by
        # the reciprocal deviation, × γ, + β for the output (the per-row rsqrt not counted).
        return 8 * self.rows * self.cols

    def label(self):
        return f"layer_norm {self.rows}x{self.cols} {self.dtype}"


@dataclass(frozen=True)
class RMSNorm(RowWise):
    kind: ClassVar[str] = "rms_norm"
    title: ClassVar[str] = "RMSNorm over rows"
    input_names: ClassVar[tuple[str, ...]] = ("X", "gamma")
    reductions: ClassVar[tuple[str, ...]] = ("sq_sum",)

    rows: int = knob(8192, "Rows (tokens): each is normalized on its own.", low=1, high=1 << 16)
    cols: int = knob(4096, "Hidden size: elements per row, the reduction length.", low=1, high=1 << 16)
    dtype: str = knob("float16", "Element type of X, γ and Y; the mean of squares is float32.",
                      choices=ROWWISE_DTYPES)

    def input_shapes(self):
        return ((self.rows, self.cols), (self.cols,))

    def _tensors(self, variant):
        from tvm import te, tirx

        n = self.cols
        x = te.placeholder((self.rows, n), self.dtype, name="X")
        gamma = te.placeholder((n,), self.dtype, name="gamma")
        k = te.reduce_axis((0, n), name="k")
        sq_sum = te.compute((self.rows,), lambda i: te.sum(_square(self._load(x, i, k)), axis=k), name="sq_sum")
        y = te.compute(
            (self.rows, n),
            lambda i, j: self._store(self._load(x, i, j) * tirx.rsqrt(sq_sum[i] / n + LAYER_NORM_EPS)
                                     * self._load(gamma, j)),
            name="Y")
        return [x, gamma], y

    def reference(self, x, gamma):
        x = x.astype(np.float64)
        rms = np.sqrt((x**2).mean(axis=1, keepdims=True) + LAYER_NORM_EPS)
        return (x / rms * gamma.astype(np.float64)).astype(DTYPE)

    def torch_op(self, tensors):
        import torch
        import torch.nn.functional as F

        x, gamma = tensors
        if hasattr(F, "rms_norm"):  # PyTorch 2.4 and later
            return lambda: F.rms_norm(x, (self.cols,), gamma, LAYER_NORM_EPS)
        return lambda: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + LAYER_NORM_EPS)
                        * gamma.float()).to(x.dtype)

    @property
    def flops(self):
        # 4 per element: square and add for the sum of squares; scale by the reciprocal RMS and × γ
        # for the output (the per-row rsqrt not counted).
        return 4 * self.rows * self.cols

    def label(self):
        return f"rms_norm {self.rows}x{self.cols} {self.dtype}"


# -- attention: softmax(Q·Kᵀ·scale)·V per head --------------------------------------------------

ATTENTION_DTYPE = "float16"
HEAD_DIMS = (64, 128)


@dataclass(frozen=True)
class Attention(Workload):
    """Scaled dot-product attention, forward: for every batch b and head h,
    O = softmax(Q·Kᵀ / √head_dim)·V, with queries and keys of the same length ``seq``.
    Q, K, V and O are float16; products are summed and the softmax computed in float32.

    The definition is the three-step formulation, stage by stage (the templates look the stages
    up by name): ``S`` the scores Q·Kᵀ·scale (float32), the row statistics ``row_max`` and
    ``exp_sum`` as in :class:`Softmax`, ``P`` the probabilities, ``O_float32`` = P·V and ``O``
    its float16 rounding. With ``causal``, query i sees keys j ≤ i only: the masked scores take
    no part in the statistics and get probability 0 (S itself is computed whole)."""

    kind: ClassVar[str] = "attention"
    title: ClassVar[str] = "Attention (scaled dot-product, forward)"
    input_names: ClassVar[tuple[str, ...]] = ("Q", "K", "V")
    output_name: ClassVar[str] = "O"
    # O is a weighted mean of rows of V (the weights sum to 1): its elements are far smaller than the
    # values they average, and a floor of 1 would pass a kernel that drops a tile of keys; the
    # error is measured against the outputs themselves, as for softmax.
    tolerance_floor: ClassVar[float] = 0.0

    batch: int = knob(4, "Sequences in the batch (B).", low=1, high=64)
    heads: int = knob(32, "Attention heads (H): each attends on its own.", low=1, high=128)
    seq: int = knob(2048, "Sequence length: queries and keys per head (N).", low=1, high=1 << 15)
    head_dim: int = knob(64, "Elements per query, key and value vector (d).", choices=HEAD_DIMS)
    causal: bool = knob(False, "Query i attends to keys 0 … i only (a decoder's mask).")

    @property
    def scale(self) -> float:
        return 1.0 / math.sqrt(self.head_dim)

    def input_shapes(self):
        return (self.output_shape(),) * 3

    def output_shape(self):
        return (self.batch, self.heads, self.seq, self.head_dim)

    def input_dtypes(self):
        return (ATTENTION_DTYPE,) * 3

    def output_dtype(self):
        return ATTENTION_DTYPE

    def _tensors(self, variant):
        from tvm import te, tirx

        shape = self.output_shape()
        q, k, v = (te.placeholder(shape, ATTENTION_DTYPE, name=name) for name in self.input_names)
        rows = shape[:3]
        scores = (*rows, self.seq)
        d = te.reduce_axis((0, self.head_dim), name="d")
        s = te.compute(scores, lambda b, h, i, j: te.sum(
            q[b, h, i, d].astype(DTYPE) * k[b, h, j, d].astype(DTYPE) * tirx.const(self.scale, DTYPE), axis=d),
            name="S")

        def seen(i, j, value, masked):
            return tirx.if_then_else(j <= i, value, masked) if self.causal else value

        j = te.reduce_axis((0, self.seq), name="j")
        row_max = te.compute(rows, lambda b, h, i: te.max(
            seen(i, j, s[b, h, i, j], tirx.min_value(DTYPE)), axis=j), name="row_max")
        j2 = te.reduce_axis((0, self.seq), name="j")
        zero = tirx.const(0.0, DTYPE)
        exp_sum = te.compute(rows, lambda b, h, i: te.sum(
            seen(i, j2, te.exp(s[b, h, i, j2] - row_max[b, h, i]), zero), axis=j2), name="exp_sum")
        p = te.compute(scores, lambda b, h, i, j: seen(
            i, j, te.exp(s[b, h, i, j] - row_max[b, h, i]) / exp_sum[b, h, i], zero), name="P")
        j3 = te.reduce_axis((0, self.seq), name="j")
        o32 = te.compute(shape, lambda b, h, i, e: te.sum(p[b, h, i, j3] * v[b, h, j3, e].astype(DTYPE), axis=j3),
                         name="O_float32")
        o = te.compute(shape, lambda *index: o32(*index).astype(ATTENTION_DTYPE), name="O")
        return [q, k, v], o

    def reference(self, q, k, v):
        """In float64, one head at a time (a whole batch's scores would take gigabytes)."""
        out = np.empty(self.output_shape(), DTYPE)
        hidden = np.triu(np.ones((self.seq, self.seq), bool), 1) if self.causal else None
        for b in range(self.batch):
            for h in range(self.heads):
                s = q[b, h].astype(np.float64) @ k[b, h].astype(np.float64).T * self.scale
                if hidden is not None:
                    s[hidden] = -np.inf
                e = np.exp(s - s.max(axis=1, keepdims=True))
                out[b, h] = (e / e.sum(axis=1, keepdims=True)) @ v[b, h].astype(np.float64)
        return out

    def torch_op(self, tensors):
        import torch.nn.functional as F

        q, k, v = tensors
        return lambda: F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)

    @property
    def flops(self):
        """Two products of 2·N·N·d each per head (Q·Kᵀ and P·V), softmax not counted. Causal: half of
        them, the half whose scores are not masked (what a kernel that skips masked tiles computes,
        and how FLOP rates of causal attention are usually reported)."""
        full = 4 * self.batch * self.heads * self.seq * self.seq * self.head_dim
        return full // 2 if self.causal else full

    def reduction_length(self):
        """2·N terms per output (d products per score, N scores per row: the base class's count
        without the mask), plus one float16 rounding of O, counted as the float32 terms it is worth."""
        return 2 * self.seq + 2 ** (MANTISSA_BITS[DTYPE] - MANTISSA_BITS[ATTENTION_DTYPE])

    def label(self):
        mask = " causal" if self.causal else ""
        return f"attention B{self.batch} H{self.heads} N{self.seq} d{self.head_dim}{mask}"


# The longest run of float32 additions into one accumulator that a sum template makes: a thread's
# serial sum before the tree (the templates refuse longer runs), plus the tree's steps. It sets the
# sum's tolerance (Sum.reduction_length).
SUM_MAX_RUN = 1024


@dataclass(frozen=True)
class Sum(Workload):
    """A float32 vector summed to one float32 (the classic parallel reduction)."""

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
