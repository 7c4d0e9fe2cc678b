"""Export a schedule as a standalone Python script that needs only TVM 0.27 and NumPy.

The script defines the workload with ``te.compute`` (written out from the workload's
parameters, one small emitter per workload kind), a NumPy reference, and the schedule as
TVM's own trace printer writes it (``Trace.as_python()``: every primitive with the chosen
values as literals). Run, it prints the scheduled TensorIR and the CUDA source, and on a
machine with an NVIDIA GPU checks the kernel against NumPy and times it.

Only numbers from validated dataclasses and TVM's printed trace go into the code; any
text (preset title, workload label, target) is written with ``repr``, and the result is
parsed once before it is returned.
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap

import tvm
from tvm.s_tir import Schedule

from .build import Spec, pass_config
from .errors import ExplorerError
from .schedules import tensor_intrinsics
from .targets import resolve_target
from .workloads import DTYPE, Conv1d, Conv2d, DepthwiseConv2d, Matmul, Workload

_HEADER = '''\
#!/usr/bin/env python3
"""A TVM schedule exported by the TVM schedule explorer (python -m explorer export).

Needs only apache-tvm==0.27.0.post1 and NumPy. Run it: it prints the scheduled TensorIR and
the generated CUDA source; with an NVIDIA GPU it also checks the kernel against NumPy and
times it.
"""
import numpy as np
import tvm
from tvm import te, tirx
from tvm.s_tir import Schedule

'''

_MAIN = '''

def main():
    print(f"# {TITLE}")
    sch = schedule(workload())
    print(sch.mod.script())
    device = tvm.cuda(0)
    target = tvm.target.Target.from_device(device) if device.exist else tvm.target.Target(TARGET)
    with tvm.transform.PassContext(config=PASS_CONFIG):
        executable = tvm.compile(sch.mod, target=tvm.target.Target(target, host="llvm"))
    print(executable.mod.imports[0].inspect_source("cuda"))
    if not device.exist:
        print("No CUDA GPU here: run this file on a machine with an NVIDIA GPU to check and time the kernel.")
        return
    rng = np.random.default_rng(0)
    inputs = [rng.uniform(-1.0, 1.0, size=shape).astype(numpy_dtype(INPUT_DTYPE)) for shape in INPUT_SHAPES]
    output = tvm.runtime.empty(OUTPUT_SHAPE, "float32", device)
    kernel = executable.jit()
    args = [tvm.runtime.tensor(x, device) for x in inputs] + [output]
    kernel["main"](*args)
    # float32 sums drift with the number of terms summed per output.
    np.testing.assert_allclose(output.numpy(), reference(*inputs), rtol=1e-4, atol=1e-5 * REDUCTION_LENGTH)
    seconds = kernel.time_evaluator("main", device, number=100, repeat=5, min_repeat_ms=0)(*args).median
    print(f"{LABEL} on {device.device_name}: correct, median {seconds * 1e6:.2f} us, "
          f"{FLOPS / seconds / 1e9:.1f} GFLOP/s")


def numpy_dtype(name):
    if name == "bfloat16":  # NumPy has no bfloat16; ml_dtypes (installed with TVM) has
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)


if __name__ == "__main__":
    main()
'''


def snippet(spec: Spec, target: str | tvm.target.Target | None = None, title: str = "") -> str:
    """The standalone script for ``spec``; ``target`` is used where no GPU is present."""
    sch = spec.template_def.apply(spec.workload, spec.knobs)
    # Template names and knob values are validated identifiers, numbers and choices.
    return schedule_snippet(spec.workload, sch, target, title,
                            made_with=f"template '{spec.template}' and knobs {spec.knobs.to_dict()!r}")


def schedule_snippet(workload: Workload, sch: Schedule, target: str | tvm.target.Target | None = None,
                     title: str = "", made_with: str = "") -> str:
    """The standalone script for any schedule of ``workload`` (a template's or a tuned
    one); ``made_with`` (one line, no user text) says where the schedule came from."""
    target = target if isinstance(target, tvm.target.Target) else resolve_target(target)
    variant = _variant_of(sch, workload)
    constants = "\n".join([
        f"TITLE = {(title or workload.label())!r}",
        f"LABEL = {workload.label()!r}",
        f"# Made with {made_with};",
        "# schedule() below has their values written in.",
        f"TARGET = {str(target)!r}  # used for the CUDA source when there is no GPU",
        f"INPUT_SHAPES = {list(workload.input_shapes())!r}",
        f"INPUT_DTYPE = {getattr(workload, 'dtype', DTYPE)!r}",
        f"PASS_CONFIG = {_literal_config(sch)!r}  # TVM pass options the schedule needs (e.g. cp.async)",
        f"OUTPUT_SHAPE = {workload.output_shape()!r}",
        f"FLOPS = {workload.flops!r}",
        f"REDUCTION_LENGTH = {workload.reduction_length()!r}",
    ])
    steps = textwrap.indent("\n".join(sch.trace.as_python()), "    ")
    code = (
        _HEADER + constants + "\n\n\n" + _intrinsics_code(sch)
        + workload_code(workload, variant)
        + "\n\n"
        + "def schedule(func):\n"
        + '    """The schedule, as TVM prints its trace: one primitive per line."""\n'
        + '    sch = Schedule(tvm.IRModule({"main": func}))\n'
        + steps + "\n    return sch\n"
        + _MAIN
    )
    ast.parse(code)  # a generated script that does not parse is a bug here, not the user's
    return code


def _intrinsics_code(sch: Schedule) -> str:
    """Registration of the tensor intrinsics the trace names: TVM's own register on import;
    the bfloat16 ones are derived here (tensor_intrinsics.py), so their code goes in too."""
    steps = "\n".join(sch.trace.as_python())
    if "tensorize" not in steps:
        return ""
    code = "import tvm.s_tir.tensor_intrin.cuda  # registers TVM's tensor-core intrinsics\n"
    derived = sorted(set(re.findall(r'"explorer_(\w+)_bf16"', steps)))
    if derived:
        code += (
            "import functools\nimport re\n\nfrom tvm.s_tir import TensorIntrin\n\n"
            + "\n\n".join(inspect.getsource(f) for f in (tensor_intrinsics._bfloat16, tensor_intrinsics._renamed))
            + f"\n\n_LDMATRIX_CALL = re.compile({tensor_intrinsics._LDMATRIX_CALL.pattern!r}, re.M)\n"
            + "".join(f"_bfloat16({name!r})\n" for name in derived)
        )
    return code + "\n\n"


def _literal_config(sch: Schedule) -> dict:
    return {key: bool(value) for key, value in pass_config(sch.mod).items()}


def workload_code(workload: Workload, variant: str = "default") -> str:
    """Source of ``workload()`` (te.compute → PrimFunc) and ``reference(*inputs)`` (NumPy)
    for this workload, its shape written out as literals."""
    define, reference = EMITTERS[workload.kind](workload, variant)
    return (
        f"def workload():\n    {workload.title + ' as te.compute; returns the PrimFunc to schedule.'!r}\n"
        + textwrap.indent(define, "    ")
        + "\n\n"
        + f"def reference({', '.join(workload.input_names)}):\n"
        + '    """The same computation in NumPy (float64, then float32)."""\n'
        + textwrap.indent(reference, "    ")
    )


def _variant_of(sch: Schedule, workload: Workload) -> str:
    """Which formulation of the workload the template scheduled: the one on which the
    trace replays to the same module."""
    for variant in workload.variants:
        replay = Schedule(tvm.IRModule({"main": workload.prim_func(variant)}))
        try:
            sch.trace.apply_to_schedule(replay, remove_postproc=False)
            tvm.ir.assert_structural_equal(replay.mod, sch.mod)
        except Exception:  # TVM's errors: the trace does not fit, or the result differs
            continue
        return variant
    raise ExplorerError("This schedule cannot be exported: its trace does not replay on the workload's definition.")


# -- one emitter per workload kind: (body of workload(), body of reference()) ------------
# Each writes the same te.compute as workloads.py with the shape as literals; the export
# round-trip test checks that the scheduled module is structurally equal to the app's.


def _depthwise(w: DepthwiseConv2d, variant: str) -> tuple[str, str]:
    oh, ow, pt, pb, pl, pr = w._geometry()
    m, k, s = w.multiplier, w.kernel, w.stride
    shapes = w.input_shapes()
    define = f'''\
Input = te.placeholder({shapes[0]}, name="Input")
Filter = te.placeholder({shapes[1]}, name="Filter")
PaddedInput = te.compute(
    {w.padded_shape},
    lambda b, c, i, j: tirx.if_then_else(
        tirx.all(i >= {pt}, i - {pt} < {w.height}, j >= {pl}, j - {pl} < {w.width}),
        Input[b, c, i - {pt}, j - {pl}],
        tirx.const(0.0, "float32"),
    ),
    name="PaddedInput",
)
di = te.reduce_axis((0, {k}), name="di")
dj = te.reduce_axis((0, {k}), name="dj")
DepthwiseConv2d = te.compute(
    {w.output_shape()},
    lambda b, c, i, j: te.sum(
        PaddedInput[b, c // {m}, i * {s} + di, j * {s} + dj] * Filter[c // {m}, c % {m}, di, dj], axis=[di, dj]
    ),
    name="DepthwiseConv2d",
)
'''
    reference = f'''\
x = np.pad(Input.astype(np.float64), ((0, 0), (0, 0), ({pt}, {pb}), ({pl}, {pr})))
x = np.repeat(x, {m}, axis=1)  # output channel c reads input channel c // {m}
w = Filter.astype(np.float64).reshape({w.channels * m}, {k}, {k})
out = np.zeros({w.output_shape()})
for di in range({k}):
    for dj in range({k}):
        out += x[:, :, di : di + {(oh - 1) * s + 1} : {s}, dj : dj + {(ow - 1) * s + 1} : {s}] \
* w[None, :, di, dj, None, None]
'''
    if not w.epilogue:
        return define + "return te.create_prim_func([Input, Filter, DepthwiseConv2d])\n", reference + \
            'return out.astype("float32")\n'
    define += f'''\
Scale = te.placeholder({shapes[2]}, name="Scale")
Shift = te.placeholder({shapes[3]}, name="Shift")
ScaleShift = te.compute(
    DepthwiseConv2d.shape, lambda b, c, i, j: DepthwiseConv2d[b, c, i, j] * Scale[c] + Shift[c], name="ScaleShift"
)
Relu = te.compute(DepthwiseConv2d.shape, lambda *idx: te.max(ScaleShift(*idx), tirx.const(0.0, "float32")), name="Relu")
return te.create_prim_func([Input, Filter, Scale, Shift, Relu])
'''
    reference += '''\
out = np.maximum(out * Scale[None, :, None, None] + Shift[None, :, None, None], 0.0)
return out.astype("float32")
'''
    return define, reference


def _conv1d(w: Conv1d, variant: str) -> tuple[str, str]:
    m, n = w.input_length, w.filter_length
    head = f'''\
A = te.placeholder(({m},), name="A")
W = te.placeholder(({n},), name="W")
zero = tirx.const(0.0, "float32")
'''
    if variant == "full_reduction":
        body = f'''\
k = te.reduce_axis((0, {m + n - 1}), name="k")
B = te.compute(
    ({m + n - 1},),
    lambda i: te.sum(tirx.if_then_else(tirx.any(k >= {m}, i - k < 0, i - k >= {n}), zero, A[k] * W[i - k]), axis=k),
    name="B",
)
'''
    else:
        body = f'''\
r = te.reduce_axis((0, {n}), name="r")
B = te.compute(
    ({m + n - 1},),
    lambda i: te.sum(tirx.if_then_else(tirx.all(i - r >= 0, i - r < {m}), A[i - r], zero) * W[r], axis=r),
    name="B",
)
'''
    define = head + body + "return te.create_prim_func([A, W, B])\n"
    reference = 'return np.convolve(A.astype(np.float64), W.astype(np.float64)).astype("float32")\n'
    return define, reference


def _conv2d(w: Conv2d, variant: str) -> tuple[str, str]:
    p, s = w.padding, w.stride
    oh, ow = w.out_height, w.out_width
    shapes = w.input_shapes()
    define = f'''\
data = te.placeholder({shapes[0]}, name="data")
kernel = te.placeholder({shapes[1]}, name="kernel")
pad_temp = te.compute(
    (1, {w.in_channels}, {w.height + 2 * p}, {w.width + 2 * p}),
    lambda n, c, y, x: tirx.if_then_else(
        tirx.all(y >= {p}, y - {p} < {w.height}, x >= {p}, x - {p} < {w.width}),
        data[n, c, y - {p}, x - {p}],
        tirx.const(0.0, "float32"),
    ),
    name="pad_temp",
)
rc = te.reduce_axis((0, {w.in_channels}), name="rc")
ry = te.reduce_axis((0, {w.kernel_h}), name="ry")
rx = te.reduce_axis((0, {w.kernel_w}), name="rx")
conv = te.compute(
    {w.output_shape()},
    lambda n, f, y, x: te.sum(pad_temp[n, rc, y * {s} + ry, x * {s} + rx] * kernel[f, rc, ry, rx], axis=[rc, ry, rx]),
    name="conv",
)
return te.create_prim_func([data, kernel, conv])
'''
    reference = f'''\
x = np.pad(data[0].astype(np.float64), ((0, 0), ({p}, {p}), ({p}, {p})))
w = kernel.astype(np.float64)
out = np.zeros(({w.out_channels}, {oh}, {ow}))
for ky in range({w.kernel_h}):
    for kx in range({w.kernel_w}):
        window = x[:, ky : ky + {(oh - 1) * s + 1} : {s}, kx : kx + {(ow - 1) * s + 1} : {s}]
        out += np.einsum("fc,cyx->fyx", w[:, :, ky, kx], window)
return out[None].astype("float32")
'''
    return define, reference


def _matmul(w: Matmul, variant: str) -> tuple[str, str]:
    product = "A[i, r] * B[r, j]" if w.dtype == DTYPE else f'A[i, r].astype("{DTYPE}") * B[r, j].astype("{DTYPE}")'
    define = f'''\
A = te.placeholder(({w.m}, {w.k}), "{w.dtype}", name="A")
B = te.placeholder(({w.k}, {w.n}), "{w.dtype}", name="B")
r = te.reduce_axis((0, {w.k}), name="r")
C = te.compute(({w.m}, {w.n}), lambda i, j: te.sum({product}, axis=r), name="C")
return te.create_prim_func([A, B, C])
'''
    reference = 'return (A.astype(np.float64) @ B.astype(np.float64)).astype("float32")\n'
    return define, reference


EMITTERS = {
    DepthwiseConv2d.kind: _depthwise,
    Conv1d.kind: _conv1d,
    Conv2d.kind: _conv2d,
    Matmul.kind: _matmul,
}


def file_name(spec: Spec, preset: str | None = None) -> str:
    """A download name such as ``dw-blog-final-96_schedule.py`` (ids are [a-z0-9-])."""
    stem = preset if preset else spec.template
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in stem) + "_schedule.py"
