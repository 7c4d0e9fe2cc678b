"""Export a schedule as a standalone Python script that needs only TVM 0.27 and NumPy.

The script holds the workload as TensorIR, printed by TVM from the workload's own
definition (TVMScript: the PrimFunc that ``te.create_prim_func`` makes of its
``te.compute``), and the schedule as TVM's own trace printer writes it
(``Trace.as_python()``: every primitive with the chosen values as literals). Run, it
prints the scheduled TensorIR and the CUDA source, and on a machine with an NVIDIA GPU
checks the kernel against the same TensorIR under TVM's default GPU schedule (dlight's
fallback) with the explorer's own gate (the source of ``explorer.measure.gate``'s rule,
copied into the script: one definition, no import of the explorer) and times it.

Only numbers from validated dataclasses, text that TVM prints and the library's own source
go into the code; any text (preset title, workload label, target) is written with ``repr``,
and the result is parsed once before it is returned.
"""
from __future__ import annotations

import ast
import inspect
import re
import textwrap

import tvm
from tvm.s_tir import Schedule

from .build import Spec, arch_target, lowering_config, skipped_passes
from .errors import ExplorerError
from .measure import gate
from .schedules import tensor_intrinsics
from .targets import resolve_target
from .workloads import Workload

_HEADER = '''\
#!/usr/bin/env python3
"""A TVM schedule exported by the TVM schedule explorer (python -m explorer export).

Needs only apache-tvm==0.27.0.post1 and NumPy. Run it: it prints the scheduled TensorIR and
the generated CUDA source; with an NVIDIA GPU it also checks the kernel against the same
workload under TVM's default GPU schedule and times it.
"""
import numpy as np
import tvm
from tvm.s_tir import Schedule
from tvm.s_tir import dlight as dl

'''

# The end of every script but the gate's rule and the entry point: the reference, the check, NumPy's name for an
# input type.
_TAIL = '''

def reference(target):
    """The workload under TVM's default GPU schedule (dlight's fallback: one thread per
    output, no tiling): a kernel scheduled independently of the one above, to check it."""
    with target:
        module = dl.ApplyDefaultSchedule(dl.gpu.Fallback())(Workload)
    return tvm.compile(module, target=tvm.target.Target(target, host="llvm")).jit()


def check(output, expected):
    """The explorer's check of the kernel's output against the reference's, with its gate's own rule
    (GATE below): every element within the tolerance, which grows with the terms a float32 sum adds
    per output (REDUCTION_LENGTH) and the reference's largest magnitude (at least TOLERANCE_FLOOR);
    NaN and ±inf are always wrong."""
    expected = expected.numpy()
    bound = tolerance(expected, REDUCTION_LENGTH, TOLERANCE_FLOOR)
    error = errors(output.numpy(), expected)
    wrong = wrong_elements(error, bound)
    if wrong.any():
        raise AssertionError(f"wrong: {np.count_nonzero(wrong)} outputs off by more than {bound:.3g} "
                             f"(largest error {error.max():.3g})")


def numpy_dtype(name):
    if name == "bfloat16":  # NumPy has no bfloat16; ml_dtypes (installed with TVM) has
        import ml_dtypes

        return ml_dtypes.bfloat16
    return np.dtype(name)
'''

_ENTRY = '''

if __name__ == "__main__":
    main()
'''

_KERNEL_HEADER = '''\
#!/usr/bin/env python3
"""A TVM kernel exported by the TVM schedule explorer (python -m explorer export).

Needs only apache-tvm==0.27.0.post1 and NumPy. Run it: it prints the kernel (TVM's TIRx
dialect) and the generated CUDA source; with an NVIDIA GPU (a Hopper, sm_90a, for a kernel that
uses wgmma and TMA) it also checks the kernel against the same workload under TVM's default GPU
schedule and times it.
"""
import numpy as np
import tvm
from tvm.s_tir import Schedule
from tvm.s_tir import dlight as dl

'''

_MAIN = '''

def main():
    print(f"# {TITLE}")
    sch = schedule(Workload)
    print(sch.mod.script())
    device = tvm.cuda(0)
    target = tvm.target.Target.from_device(device) if device.exist else tvm.target.Target(TARGET)
    # In the target's scope: where CUDA is installed but no GPU is visible (a login node), TVM
    # compiles the kernel with NVRTC and takes the architecture from there.
    with tvm.transform.PassContext(config=PASS_CONFIG, disabled_pass=SKIPPED_PASSES), target:
        executable = tvm.compile(sch.mod, target=tvm.target.Target(target, host="llvm"))
    print(executable.mod.imports[0].inspect_source("cuda"))
    if not device.exist:
        print("No CUDA GPU here: run this file on a machine with an NVIDIA GPU to check and time the kernel.")
        return
    rng = np.random.default_rng(0)
    inputs = [tvm.runtime.tensor(rng.uniform(-1.0, 1.0, size=shape).astype("float32").astype(numpy_dtype(dtype)),
                                 device) for shape, dtype in INPUTS]
    output, expected = (tvm.runtime.empty(OUTPUT_SHAPE, OUTPUT_DTYPE, device) for _ in range(2))
    kernel = executable.jit()
    kernel["main"](*inputs, output)
    reference(target)["main"](*inputs, expected)
    check(output, expected)
    seconds = kernel.time_evaluator("main", device, number=100, repeat=5, min_repeat_ms=0)(*inputs, output).median
    print(f"{LABEL} on {device.device_name}: correct, median {seconds * 1e6:.2f} us, "
          f"{FLOPS / seconds / 1e9:.1f} GFLOP/s")

'''


def snippet(spec: Spec, target: str | tvm.target.Target | None = None, title: str = "") -> str:
    """The standalone script for ``spec``; ``target`` is used where no GPU is present."""
    sch = spec.template_def.apply(spec.workload, spec.knobs)
    if spec.template_def.pipeline == "tirx":
        return kernel_snippet(spec, sch.mod, target, title)
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
        f"INPUTS = {list(zip(workload.input_shapes(), workload.input_dtypes(), strict=True))!r}  # (shape, type)",
        f"PASS_CONFIG = {_literal_config(sch)!r}  # TVM pass options: no CSE temporaries; cp.async where asked",
        f"SKIPPED_PASSES = {skipped_passes(target)!r}  # Hexagon's DMA lowering: nothing to do on CUDA",
        f"OUTPUT_SHAPE = {workload.output_shape()!r}",
        f"OUTPUT_DTYPE = {workload.output_dtype()!r}",
        f"FLOPS = {workload.flops!r}",
        *_tolerance_constants(workload),
    ])
    steps = textwrap.indent("\n".join(sch.trace.as_python()), "    ")
    code = (
        _HEADER + constants + "\n\n\n" + _intrinsics_code(sch)
        + workload_script(workload, variant)
        + "\n\n"
        + "def schedule(module):\n"
        + '    """The schedule, as TVM prints its trace: one primitive per line."""\n'
        + "    sch = Schedule(module)\n"
        + steps + "\n    return sch\n"
        + _MAIN + _TAIL + gate_code() + _ENTRY
    )
    ast.parse(code)  # a generated script that does not parse is a bug here, not the user's
    return code


# TVM's tensor intrinsics are TVMScript, parsed as they are imported, and the parser asks
# ``inspect`` for the stack of each of its ~500 functions. For each frame of the import
# machinery ``inspect`` scans every loaded module for the file: 13 s before the script prints
# anything, against 3 s once it is told that those frames have no module.
_FAST_INTRINSICS_IMPORT = """\
import inspect

# TVM parses its tensor intrinsics (TVMScript) as they are imported, asking inspect for the stack
# of each; inspect is told that the import machinery's frames have no module file to look for.
for _frame_file in ("<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"):
    inspect.modulesbyfile.setdefault(_frame_file, "")
import tvm.s_tir.tensor_intrin.cuda  # registers TVM's tensor-core intrinsics
"""


def _intrinsics_code(sch: Schedule) -> str:
    """Registration of the tensor intrinsics the trace names: TVM's own register on import;
    the bfloat16 ones are derived here (tensor_intrinsics.py), so their code goes in too."""
    steps = "\n".join(sch.trace.as_python())
    if "tensorize" not in steps:
        return ""
    code = _FAST_INTRINSICS_IMPORT
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
    return {key: bool(value) for key, value in lowering_config(sch.mod).items()}


def workload_script(workload: Workload, variant: str = "default") -> str:
    """The workload's TensorIR as TVMScript: an IRModule ``Workload`` whose ``main`` is the
    PrimFunc that templates schedule, with the imports TVM's printer names for it."""
    imports, code = module_script(tvm.IRModule({"main": workload.prim_func(variant)}), "Workload")
    return imports + f"\n\n\n# {workload.title} as TensorIR: what TVM makes of its te.compute.\n" + code


def module_script(mod: tvm.IRModule, name: str) -> tuple[str, str]:
    """(import lines, class ``name``) of ``mod`` as TVM prints it."""
    printed = mod.script(name=name)
    # The printer lists the imports its text needs as comments ("# from tvm.script import tirx as T").
    imports = re.findall(r"^# (from tvm\S* import \w+(?: as \w+)?)$", printed, re.M)
    code = re.sub(r"^# from tvm.*\n", "", printed, flags=re.M).lstrip("\n")
    return "\n".join(imports), code.rstrip("\n") + "\n"


_KERNEL_MAIN = '''

def schedule(module):
    """A TIRx kernel is written, not scheduled: the module is the kernel as it stands."""
    return Schedule(module)


def main():
    print(f"# {TITLE}")
    print(Kernel.script())
    device = tvm.cuda(0)
    # wgmma and TMA need sm_90a, the H100's own instruction set: such a kernel is built for TARGET,
    # any other for the GPU that is here.
    here = device.exist and not NEEDS_ARCH
    target = tvm.target.Target.from_device(device) if here else tvm.target.Target(TARGET)
    with target:  # the architecture for NVRTC where CUDA is installed but no GPU is visible
        executable = tvm.compile(Kernel, target=tvm.target.Target(target, host="llvm"), tir_pipeline="tirx")
    print(executable.mod.imports[0].inspect_source("cuda"))
    if not device.exist:
        print("No CUDA GPU here: run this file on a machine with an NVIDIA GPU to check and time the kernel.")
        return
    rng = np.random.default_rng(0)
    inputs = [tvm.runtime.tensor(rng.uniform(-1.0, 1.0, size=shape).astype("float32").astype(numpy_dtype(dtype)),
                                 device) for shape, dtype in INPUTS]
    output, expected = (tvm.runtime.empty(OUTPUT_SHAPE, OUTPUT_DTYPE, device) for _ in range(2))
    kernel = executable.jit()
    kernel["main"](*inputs, output)
    reference(tvm.target.Target.from_device(device))["main"](*inputs, expected)
    check(output, expected)
    seconds = kernel.time_evaluator("main", device, number=100, repeat=5, min_repeat_ms=0)(*inputs, output).median
    print(f"{LABEL} on {device.device_name}: correct, median {seconds * 1e6:.2f} us, "
          f"{FLOPS / seconds / 1e9:.1f} GFLOP/s")

'''


def kernel_snippet(spec: Spec, mod: tvm.IRModule, target: str | tvm.target.Target | None = None,
                   title: str = "") -> str:
    """The standalone script of a template written in TIRx: the kernel module as TVM prints it
    (it parses back to the same module), compiled with TVM's TIRx pipeline and checked against
    the workload under TVM's default GPU schedule."""
    target = arch_target(spec.template_def, target if isinstance(target, tvm.target.Target) else resolve_target(target))
    workload = spec.workload
    imports, code = module_script(mod, "Kernel")
    constants = "\n".join([
        f"TITLE = {(title or workload.label())!r}",
        f"LABEL = {workload.label()!r}",
        f"# Made with template '{spec.template}' and knobs {spec.knobs.to_dict()!r}.",
        f"TARGET = {str(target)!r}",
        f"NEEDS_ARCH = {bool(spec.template_def.archs)!r}  # the kernel uses instructions of TARGET's architecture only",
        f"INPUTS = {list(zip(workload.input_shapes(), workload.input_dtypes(), strict=True))!r}  # (shape, type)",
        f"OUTPUT_SHAPE = {workload.output_shape()!r}",
        f"OUTPUT_DTYPE = {workload.output_dtype()!r}",
        f"FLOPS = {workload.flops!r}",
        *_tolerance_constants(workload),
    ])
    code = (_KERNEL_HEADER + constants + "\n\n" + imports + "\n\n\n# The kernel in TVM's TIRx dialect.\n" + code
            + "\n\n\n" + workload_script(workload) + _KERNEL_MAIN + _TAIL + gate_code() + _ENTRY)
    ast.parse(code)
    return code


def _tolerance_constants(workload: Workload) -> list[str]:
    """What the explorer's check (explorer.measure.gate) knows of the workload, as constants of a script."""
    return [f"REDUCTION_LENGTH = {workload.reduction_length()!r}  # terms a float32 sum adds per output",
            f"TOLERANCE_FLOOR = {float(workload.tolerance_floor)!r}  # the smallest output scale"]


def gate_code() -> str:
    """The gate's rule as a script's code: its constants and the source of its functions
    (explorer.measure.gate.FORMULA), the one definition, copied."""
    functions = "\n\n".join(inspect.getsource(function) for function in gate.FORMULA)
    return ("\n\n# GATE: the explorer's correctness gate (explorer/measure/gate.py), copied from it as it is.\n"
            f"EPSILON32 = {gate.EPSILON32!r}\nSAFETY = {gate.SAFETY!r}\n\n\n{functions}")


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


def file_name(spec: Spec, preset: str | None = None) -> str:
    """A download name such as ``dw-blog-final-96_schedule.py`` (ids are [a-z0-9-])."""
    stem = preset if preset else spec.template
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in stem) + "_schedule.py"
