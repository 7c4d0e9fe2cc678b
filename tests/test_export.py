"""Snippet export: the standalone script reproduces the app's schedule exactly.

Round trip: importing the generated file and running its ``schedule(Workload)`` gives a
module structurally equal to ``build(spec).schedule_mod``, for every preset's setting and every
template (new templates and presets are picked up from the registries).
"""
import ast
import dataclasses
import inspect
import os
import re

import numpy as np
import pytest
import tvm
from cuda_on_cpu import run_on_cpu
from exported import load, run_standalone

from explorer.build import Spec, build
from explorer.cli import main
from explorer.cuda_compile import nvcc_path
from explorer.export import file_name, snippet, workload_script
from explorer.measure import gate
from explorer.presets import all_presets, get_preset
from explorer.schedules import TEMPLATES, workload_classes
from explorer.schedules.matmul_tensorcore import MatmulTensorCoreKnobs
from explorer.workloads import Conv1d, Conv2d, DepthwiseConv2d, Matmul


def _cases():
    # Each setting once: presets that share one (a step of two lessons, or a lesson's step that is also a
    # best) export the same script but for its title, which test_title_is_data_not_code tests.
    firsts = {}
    for p in all_presets().values():
        firsts.setdefault(p.spec, f"preset:{p.id}")
    cases = {case: spec for spec, case in firsts.items()}
    covered = {spec.template for spec in cases.values()}
    for name, template in TEMPLATES.items():
        if name not in covered:  # a template without presets yet: its defaults
            cases[f"template:{name}"] = Spec(name, template.default_workload(), template.knobs())
    return cases


CASES = _cases()


def test_every_template_is_covered():
    assert {spec.template for spec in CASES.values()} == set(TEMPLATES)


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_each_template_starts_from_a_workload_it_can_schedule(name):
    """What the CLI, a link or the app start from when no preset is named."""
    template = TEMPLATES[name]
    template.apply(template.default_workload(), template.knobs())


@pytest.mark.parametrize("case", sorted(CASES))
def test_round_trip(case, tmp_path):
    spec = CASES[case]
    path = tmp_path / "snippet.py"
    path.write_text(snippet(spec, title=case))
    module = load(path, f"snippet_{abs(hash(case))}")
    # A template written in TIRx exports its kernel module (Kernel), the others the workload they schedule.
    scheduled = module.schedule(module.Kernel if hasattr(module, "Kernel") else module.Workload)
    # The library's schedule of the setting: its build's, which the app tests made in this process
    # before (tests/conftest.py runs the files that build every preset in one process).
    tvm.ir.assert_structural_equal(scheduled.mod, build(spec).schedule_mod)


# Every registered workload's defaults in each formulation, and small shapes off the defaults.
SMALL_WORKLOADS = [(cls(), variant) for cls in workload_classes().values() for variant in cls.variants] + [
    (DepthwiseConv2d(channels=4, height=9, width=7, kernel=3), "default"),
    (DepthwiseConv2d(channels=3, height=10, width=9, kernel=5, stride=2, multiplier=2), "default"),
    (DepthwiseConv2d(channels=2, height=8, width=8, padding="VALID", epilogue=True), "default"),
    (Conv1d(input_length=40, filter_length=7), "default"),
    (Conv1d(input_length=40, filter_length=7), "full_reduction"),
    (Conv2d(in_channels=3, out_channels=5, height=9, width=8, kernel_h=3, kernel_w=2, stride=2, padding=1), "default"),
    (Matmul(m=6, n=5, k=7), "default"),
    (Matmul(m=6, n=5, k=7, dtype="float16"), "default"),
    (Matmul(m=6, n=5, k=7, dtype="bfloat16"), "default"),
]


@pytest.mark.parametrize("workload,variant", SMALL_WORKLOADS, ids=lambda v: v.label() if hasattr(v, "label") else v)
def test_printed_workload_is_the_library_s(workload, variant, tmp_path):
    """The TVMScript the script holds parses back to the very PrimFunc the templates schedule."""
    path = tmp_path / "workload.py"
    path.write_text(workload_script(workload, variant))
    module = load(path, f"workload_{abs(hash((workload, variant)))}")
    tvm.ir.assert_structural_equal(module.Workload["main"], workload.prim_func(variant))


def test_title_is_data_not_code():
    title = 'x"""\nimport os\nos.system("echo pwned")  # \'\'\''
    code = snippet(get_preset("matmul-naive-1024").spec, title=title)
    tree = ast.parse(code)
    assert not any(isinstance(node, ast.Import) and any(a.name == "os" for a in node.names) for node in ast.walk(tree))
    assigned = {node.targets[0].id: node.value.value for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)}
    assert assigned["TITLE"] == title


def test_cli_export_applies_overrides(tmp_path):
    path = tmp_path / "out.py"
    assert main(["export", "dw-blog-final-96", "--set", "num_thread_x=8", "-o", str(path)]) == 0
    module = load(path, "snippet_cli")
    changed = get_preset("dw-blog-final-96").spec.with_knobs(num_thread_x=8)
    tvm.ir.assert_structural_equal(module.schedule(module.Workload).mod, build(changed).schedule_mod)
    assert 'thread_axis="threadIdx.x"' in path.read_text()


def test_cli_export_invalid_knob(capsys):
    assert main(["export", "dw-blog-final-96", "--set", "num_thread_x=3", "-o", os.devnull]) == 2
    assert "num_thread_x" in capsys.readouterr().err


def test_file_name():
    spec = get_preset("matmul-naive-1024").spec
    assert file_name(spec, "matmul-naive-1024") == "matmul-naive-1024_schedule.py"
    assert file_name(spec) == "matmul_schedule.py"


def test_script_runs_standalone(tmp_path):
    """The script runs in a fresh interpreter that cannot import ``explorer``: it prints
    the TIR and the CUDA; on a GPU it also checks and times the kernel. A bfloat16 tensor-core
    setting, whose script registers TVM's intrinsics and derives the bfloat16 ones itself."""
    spec = Spec("matmul_tensorcore", Matmul(m=64, n=64, k=64, dtype="bfloat16"),
                MatmulTensorCoreKnobs(block_m=64, block_n=64, warp_m=32, warp_n=32, block_k=32, stages=2))
    path = tmp_path / "bf16.py"
    path.write_text(snippet(spec, title="bf16 tensor cores"))
    (proc,) = run_standalone(path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "# bf16 tensor cores" in proc.stdout
    assert "@T.prim_func" in proc.stdout and "__global__" in proc.stdout
    assert "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32" in proc.stdout
    assert "cp.async.cg.shared.global" in proc.stdout
    if tvm.cuda(0).exist:
        assert "correct, median" in proc.stdout
    else:
        assert "No CUDA GPU here" in proc.stdout


@pytest.mark.parametrize("preset", ["rowwise-softmax-vector", "attention-mma-causal", "matmul-naive-1024"])
def test_the_scripts_check_is_the_explorers(preset, tmp_path):
    """The script checks its kernel with the explorer's gate, its functions' own source: within SAFETY × ε32
    × the terms per output × the output's scale (at least the workload's floor). Softmax and attention
    outputs are far below 1 and have no floor of 1: all zeros fails there, as it does in the app."""
    spec = get_preset(preset).spec
    if spec.workload.kind == "attention":  # the same check on 2 heads of 256 tokens, not 268 MB of outputs (17 s)
        spec = dataclasses.replace(spec, workload=dataclasses.replace(spec.workload, batch=1, heads=2, seq=256))
    if spec.workload.kind == "softmax":  # 64 rows of the 4096 columns (the tolerance counts the columns), not 67 MB
        spec = dataclasses.replace(spec, workload=dataclasses.replace(spec.workload, rows=64))
    path = tmp_path / "check.py"
    path.write_text(snippet(spec))
    module = load(path, "check_script")
    workload = spec.workload
    rng = np.random.default_rng(0)
    reference = rng.uniform(0.0, 1e-3, size=workload.output_shape()).astype("float32")
    script = path.read_text()
    assert all(inspect.getsource(function) in script for function in gate.FORMULA)
    assert (module.EPSILON32, module.SAFETY) == (gate.EPSILON32, gate.SAFETY)
    assert module.REDUCTION_LENGTH == workload.reduction_length()
    assert module.TOLERANCE_FLOOR == workload.tolerance_floor
    module.check(tvm.runtime.tensor(reference), tvm.runtime.tensor(reference))
    zeros = np.zeros_like(reference)
    if workload.tolerance_floor == 0:
        with pytest.raises(AssertionError, match="outputs off by more than"):
            module.check(tvm.runtime.tensor(zeros), tvm.runtime.tensor(reference))
    nan = reference.copy()
    nan.flat[0] = np.nan
    with pytest.raises(AssertionError):
        module.check(tvm.runtime.tensor(nan), tvm.runtime.tensor(reference))


def writing_zeros(built):
    """``built`` with every store of its output replaced by a store of 0."""
    out = built.spec.workload.output_name
    cuda, stores = re.subn(rf"^(\s*{out}_ptr\[[^\]]*\]) = .*;$", r"\1 = 0.0f;", built.cuda, flags=re.M)
    assert stores
    return dataclasses.replace(built, cuda=cuda)


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
def test_the_scripts_check_refuses_a_softmax_kernel_that_writes_zeros(tmp_path):
    """The exported check on the outputs of kernels (run on the CPU emulation, tests/cuda_on_cpu.py): the
    softmax step's own kernel passes, the same kernel writing zeros fails, as in the app's gate."""
    spec = get_preset("rowwise-softmax-fused").spec
    spec = dataclasses.replace(spec, workload=dataclasses.replace(spec.workload, rows=64))  # 4096 columns still
    path = tmp_path / "softmax.py"
    path.write_text(snippet(spec))
    module = load(path, "softmax_script")
    inputs = spec.workload.random_inputs(seed=0)
    reference = tvm.runtime.tensor(spec.workload.reference(*inputs))
    built = build(spec, "h100")
    module.check(tvm.runtime.tensor(run_on_cpu(built, inputs)), reference)
    with pytest.raises(AssertionError, match="wrong: 262144 outputs off by more than"):
        module.check(tvm.runtime.tensor(run_on_cpu(writing_zeros(built), inputs)), reference)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_script_checks_and_times_each_template_on_the_gpu(name, tmp_path):
    """On a GPU the script's kernel agrees with the workload under TVM's default schedule."""
    template = TEMPLATES[name]
    path = tmp_path / f"{name}.py"
    path.write_text(snippet(Spec(name, template.default_workload(), template.knobs()), title=name))
    (proc,) = run_standalone(path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "correct, median" in proc.stdout
