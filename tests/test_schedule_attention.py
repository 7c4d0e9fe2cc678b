"""The attention workload and its two templates: three kernels through global memory
(attention_unfused) and one kernel with the online softmax (attention_fused). References against
hand-computed cases, the definition run on the CPU, what the knobs do to the kernels, the knob
values refused, and the lesson's CUDA compiled with nvcc. The lesson's structural claims are
checked by tests/test_preset_claims.py, the golden TensorIR by tests/test_golden.py."""
import dataclasses
import math
import re

import numpy as np
import pytest
import tvm
from cuda_on_cpu import run_on_cpu
from exported import load
from refusals import refusal
from test_workloads import run_on_cpu as run_definition_on_cpu  # the unscheduled PrimFunc on llvm

from explorer.build import Spec, build
from explorer.cuda_compile import nvcc_binary, nvcc_path
from explorer.export import snippet
from explorer.measure.gate import compare
from explorer.presets import all_presets
from explorer.schedules.attention_fused import AttentionFusedKnobs
from explorer.schedules.attention_unfused import AttentionUnfusedKnobs
from explorer.workloads import Attention

TINY = Attention(batch=1, heads=1, seq=2, head_dim=64)


def test_reference_of_two_keys_by_hand():
    """One query, two keys: scores q·k / 8 = 0 and ln 3, so the weights are 1/4 and 3/4 of the two
    value rows. Causal: the first query sees only the first key."""
    q = np.zeros((1, 1, 2, 64), "float16")
    k = np.zeros((1, 1, 2, 64), "float16")
    v = np.zeros((1, 1, 2, 64), "float16")
    q[0, 0, :, 0] = 1.0
    k[0, 0, 1, 0] = 8 * math.log(3)  # rounded to float16: the score is what the rounded key gives
    v[0, 0, 0, :] = 1.0
    v[0, 0, 1, :] = -1.0
    score = float(k[0, 0, 1, 0]) / 8
    weight = math.exp(score) / (1 + math.exp(score))
    both = TINY.reference(q, k, v)
    np.testing.assert_allclose(both[0, 0, :, 0], [1 - 2 * weight] * 2, rtol=1e-6)
    assert abs(weight - 0.75) < 1e-3
    causal = Attention(batch=1, heads=1, seq=2, head_dim=64, causal=True).reference(q, k, v)
    np.testing.assert_allclose(causal[0, 0, :, 0], [1.0, 1 - 2 * weight], rtol=1e-6)


def test_flops_bytes_and_tolerance():
    w = Attention(batch=2, heads=3, seq=16, head_dim=64)
    assert w.flops == 4 * 2 * 3 * 16 * 16 * 64
    assert Attention(batch=2, heads=3, seq=16, head_dim=64, causal=True).flops == w.flops // 2
    assert w.compulsory_bytes == 4 * (2 * 3 * 16 * 64) * 2  # Q, K, V read once, O written once, 2 bytes each
    assert w.reduction_length() == 2 * 16 + 2**13  # one float16 rounding of O on top
    assert Attention(batch=4, heads=32, seq=4096, head_dim=128).output_shape() == (4, 32, 4096, 128)  # 2^26


def test_the_gate_refuses_a_missing_key_tile():
    """O is a weighted mean, far smaller than 1: the tolerance follows the outputs, so leaving out
    a tile of 16 keys of 256 (or writing zeros) is wrong, while the float16 rounding of O is not."""
    w = Attention(batch=1, heads=2, seq=256, head_dim=64)
    q, k, v = w.random_inputs(seed=1)
    reference = w.reference(q, k, v)
    rounded = reference.astype("float16").astype("float32")
    assert compare(rounded, reference, w.reduction_length(), w.tolerance_floor).correct
    v_missing = v.copy()
    k_missing = k.copy()
    k_missing[:, :, :16] = -60  # these keys' scores fall far below the others: weight ~0
    assert not compare(w.reference(q, k_missing, v_missing), reference, w.reduction_length(),
                       w.tolerance_floor).correct
    assert not compare(np.zeros_like(reference), reference, w.reduction_length(), w.tolerance_floor).correct


@pytest.mark.parametrize("causal", [False, True])
def test_definition_runs_on_the_cpu_like_the_reference(causal):
    workload = Attention(batch=1, heads=2, seq=24, head_dim=64, causal=causal)
    got, expected = run_definition_on_cpu(workload)
    check = compare(got, expected, workload.reduction_length(), workload.tolerance_floor)
    assert check.correct, check.describe()


SMALL = Attention(batch=1, heads=2, seq=128, head_dim=64)


def fused(workload=SMALL, **knobs) -> Spec:
    return Spec("attention_fused", workload, AttentionFusedKnobs(**knobs))


def unfused(workload=SMALL, **knobs) -> Spec:
    return Spec("attention_unfused", workload, AttentionUnfusedKnobs(**knobs))


def global_buffers(cuda: str) -> set[str]:
    """The global buffers the kernels take as arguments."""
    parameters = " ".join(re.findall(r"__global__ void[^{;]*\(([^)]*)\)", cuda))
    return set(re.findall(r"__restrict__ (\w+)_ptr", parameters))


def test_the_three_kernels_pass_scores_through_global_memory():
    built = build(unfused(), "h100")
    assert [k.name for k in built.kernels] == ["main_kernel", "main_kernel_1", "main_kernel_2"]
    assert global_buffers(built.cuda) == {"Q", "K", "V", "S", "P", "O"}
    # S: 64 × 64 tiles of 128 × 128 scores per head (blockIdx.z: the heads), 16 × 16 threads of 4 × 4 each.
    assert built.kernels[0].grid == (2, 2, 2) and built.kernels[0].block == (16, 16, 1)
    # the softmax: one block of 256 threads per row of S; O: 64 rows × all 64 columns per block.
    assert built.kernels[1].grid == (256, 1, 1) and built.kernels[1].block == (256, 1, 1)
    assert built.kernels[2].grid == (1, 2, 2)


def test_the_fused_kernel_keeps_the_scores_on_chip():
    built = build(fused(), "h100")
    (kernel,) = built.kernels
    assert global_buffers(built.cuda) == {"Q", "K", "V", "O"}
    # 128 / 64 query tiles × 2 heads; 64 / 4 rows × 16 threads per row.
    assert kernel.grid == (2, 2, 1) and kernel.threads_per_block == 256
    assert built.cuda.count("__shfl_xor_sync") == 2 * 4 * 4  # max and sum, 4 rows, log2(16) steps
    # Q, K (rows padded by a word), V and P (padded by a float) tiles.
    assert kernel.shared_bytes == 64 * 66 * 2 + 64 * 66 * 2 + 64 * 64 * 2 + 64 * 65 * 4
    assert "K_ptr[" in built.cuda and "k_s_ptr[" in built.cuda


def test_kv_shared_off_reads_keys_from_global_memory_in_the_loop():
    built = build(fused(kv_shared=False), "h100")
    assert built.kernels[0].shared_bytes == 64 * 66 * 2 + 64 * 65 * 4  # Q and P only
    body = built.cuda[built.cuda.index("for (int e = 0"):]
    assert "K_ptr[" in body[:body.index("}")]  # the score loop reads K itself


def test_causal_skips_the_tiles_above_the_diagonal():
    plain = build(fused(), "h100").cuda
    causal = build(fused(Attention(batch=1, heads=2, seq=128, causal=True)), "h100").cuda
    assert "kt < 2;" in plain
    assert "kt < (qt_ptr[0] + 1);" in causal  # block_q = block_kv: tiles 0 … qt
    assert "qt_ptr[0] = (1 - ((int)blockIdx.x));" in causal  # the longest rows first
    assert "<=" not in plain and causal.count("<=") == 4 * 4  # the mask: 4 rows × 4 keys per thread


@pytest.mark.parametrize("spec, named", [
    (fused(block_q=32, rows_per_thread=8, threads_per_row=32, block_kv=16), ("threads_per_row", "block_kv")),
    (fused(Attention(batch=1, heads=1, seq=96)), ("block_q",)),
    (fused(block_q=128, rows_per_thread=1, threads_per_row=16), ("block_q", "rows_per_thread", "threads_per_row")),
    (fused(Attention(batch=1, heads=1, seq=256, head_dim=128), block_q=128, block_kv=128), ("block_q", "block_kv")),
    (unfused(score_tile=128, thread_tile=2), ("score_tile", "thread_tile")),
    (unfused(Attention(batch=4, heads=32, seq=4096)), ()),
], ids=["row-threads", "partial-tile", "too-many-threads", "too-much-shared", "unfused-threads", "too-many-scores"])
def test_bad_knobs_are_refused_in_one_sentence(spec, named):
    assert refusal(spec.template, spec.workload, spec.knobs).knobs == named


LESSON = [p for p in all_presets().values() if p.lesson == "attention"]


def test_the_lesson_has_both_templates_causal_and_not():
    assert {p.spec.template for p in LESSON} == {"attention_unfused", "attention_fused"}
    assert {p.spec.workload.causal for p in LESSON} == {False, True}


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA needs nvcc")
@pytest.mark.parametrize("preset", LESSON, ids=lambda p: p.id)
def test_the_lessons_cuda_compiles(preset):
    binary = nvcc_binary(build(preset.spec, "h100").cuda, "sm_90")
    assert binary.registers and not any(binary.spill_bytes.values())


def scores(workload: Attention) -> dict:
    """The global buffers TVM's host code allocates between the three kernels."""
    shape = (workload.batch, workload.heads, workload.seq, workload.seq)
    return {"S": (shape, "float32"), "P": (shape, "float32")}


EMULATED = [fused(Attention(batch=2, heads=1, seq=64, head_dim=128), block_q=32, block_kv=16, rows_per_thread=2,
                  threads_per_row=8, kv_shared=False),
            fused(Attention(batch=1, heads=1, seq=256, causal=True), block_q=128, block_kv=32, rows_per_thread=8,
                  threads_per_row=8),
            # 128 softmax threads: the default 256's code (a row of 64 scores, so the threads past it idle,
            # and the warps' partial results reduced again), with half the CPU threads to run.
            unfused(Attention(batch=1, heads=1, seq=64, causal=True), score_tile=32, output_rows=32,
                    softmax_threads=128)]


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
@pytest.mark.parametrize("spec", EMULATED, ids=["fused-d128-global-kv", "fused-causal-shared-kv", "unfused-causal"])
def test_the_cuda_matches_numpy_run_on_the_cpu(spec):
    """The generated CUDA, each block's threads run as CPU threads (tests/cuda_on_cpu.py): its
    indexing, barriers, shuffles and arithmetic, without a GPU."""
    workload = spec.workload
    inputs = workload.random_inputs(seed=4)
    got = run_on_cpu(build(spec, "h100"), inputs, scores(workload) if spec.template == "attention_unfused" else {})
    check = compare(got, workload.reference(*inputs), workload.reduction_length(), workload.tolerance_floor)
    assert check.correct, check.describe()


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
def test_without_the_rescaling_the_fused_kernel_is_wrong():
    """The CPU run can fail: the same kernel with exp(m_old − m_new) replaced by 1 (the sum and the
    output not rescaled when a later tile raises the maximum) is refused by the gate."""
    spec = fused(Attention(batch=1, heads=1, seq=64), block_q=32, block_kv=16, rows_per_thread=2, threads_per_row=8)
    built = build(spec, "h100")
    unscaled = re.sub(r"alpha_ptr\[(\d)\] = exp2f\(\(m_ptr\[\d\] - red_ptr\[0\]\)\);", r"alpha_ptr[\1] = 1.0f;",
                      built.cuda)
    assert unscaled.count("alpha_ptr[0] = 1.0f;") == 1
    inputs = spec.workload.random_inputs(seed=4)
    got = run_on_cpu(dataclasses.replace(built, cuda=unscaled), inputs, {})
    assert not compare(got, spec.workload.reference(*inputs), spec.workload.reduction_length(),
                       spec.workload.tolerance_floor).correct


GPU_CASES = [unfused(), unfused(Attention(batch=1, heads=2, seq=128, causal=True)),
             fused(), fused(Attention(batch=1, heads=2, seq=128, causal=True)),
             fused(Attention(batch=2, heads=1, seq=128, head_dim=128, causal=True), block_q=32, block_kv=16,
                   rows_per_thread=2, threads_per_row=8, kv_shared=False),
             fused(Attention(batch=1, heads=2, seq=256, causal=True), block_q=128, block_kv=32, rows_per_thread=8,
                   threads_per_row=8)]


@pytest.mark.gpu
@pytest.mark.parametrize("spec", GPU_CASES, ids=lambda s: f"{s.template}-{s.workload.label()}-{s.knobs.to_strings()}")
def test_matches_numpy_on_the_gpu(spec, run_on_gpu):
    got, expected = run_on_gpu(build(spec))
    check = compare(got, expected, spec.workload.reduction_length(), spec.workload.tolerance_floor)
    assert check.correct, check.describe()


@pytest.mark.parametrize("spec", [fused(Attention(batch=1, heads=2, seq=128, causal=True)), unfused()],
                         ids=["attention_fused", "attention_unfused"])
def test_export_parses_back_to_the_same_module(spec, tmp_path):
    path = tmp_path / "attention.py"
    path.write_text(snippet(spec))
    module = load(path, "attention_snippet")
    if hasattr(module, "Kernel"):
        tvm.ir.assert_structural_equal(module.Kernel, build(spec).schedule_mod)
    else:
        tvm.ir.assert_structural_equal(module.schedule(module.Workload).mod, build(spec).schedule_mod)
