"""The attention workload and its two templates: three kernels through global memory
(attention_unfused) and one kernel with the online softmax (attention_fused). References against
hand-computed cases, the definition run on the CPU, what the knobs do to the kernels, the knob
values refused, and the lesson's CUDA compiled with nvcc. The lesson's structural claims are
checked by tests/test_preset_claims.py, the golden TensorIR by tests/test_golden.py."""
import dataclasses
import itertools
import math
import re

import numpy as np
import pytest
import tvm
from compiled_together import one_source_per_preamble
from cuda_on_cpu import ORDERS, run_on_cpu
from exported import load
from refusals import refusal
from test_workloads import run_on_cpu as run_definition_on_cpu  # the unscheduled PrimFunc on llvm

from explorer.build import Spec, build
from explorer.cuda_compile import nvcc_binary, nvcc_path
from explorer.export import snippet
from explorer.measure.gate import compare
from explorer.presets import all_presets
from explorer.schedules.attention_fused import AttentionFusedKnobs, Plan, padded_row
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


def loop_body(cuda: str, head: str) -> str:
    """The body of the first loop whose line starts with ``head``, up to its closing brace."""
    start = cuda.index("{", cuda.index(head)) + 1
    depth, at = 1, start
    while depth:
        depth += {"{": 1, "}": -1}.get(cuda[at], 0)
        at += 1
    return cuda[start:at - 1]


# The lesson's knobs at 4096 tokens (8 rows × 4 keys per thread, 8 threads per row) on a small shape.
LESSON_KNOBS = dict(block_q=128, block_kv=32, rows_per_thread=8, threads_per_row=8)


def test_float_tiles_take_the_conversions_out_of_the_inner_loops():
    """Without float_tiles, each element of Q and K is converted where the scores use it: 8 of Q and
    4 of K per column. With them, the copies convert (once per element and block) and the inner loops
    of both products only load and multiply."""
    plain = build(fused(**LESSON_KNOBS), "h100").cuda
    assert loop_body(plain, "for (int e = 0").count("((float)") == 8 + 4
    assert loop_body(plain, "for (int j = 0").count("((float)") == 8  # V's columns
    floats = build(fused(**LESSON_KNOBS, float_tiles=True), "h100").cuda
    for loop in ("for (int e = 0", "for (int j = 0"):
        assert "(float)" not in loop_body(floats, loop) and "half" not in loop_body(floats, loop)
    assert "= ((float)Q_ptr[" in floats and "= ((float)K_ptr[" in floats and "= ((float)V_ptr[" in floats


def test_vector_4_loads_four_elements_at_once():
    """vector = 4: per 4 columns of head_dim, one float4 per row of Q (8) and per key (4); per 4 keys,
    one float4 of P per row (8), then V's 8 columns of each key one by one."""
    cuda = build(fused(**LESSON_KNOBS, float_tiles=True, vector=4), "h100").cuda
    scores, output = loop_body(cuda, "for (int e = 0"), loop_body(cuda, "for (int j = 0")
    assert "for (int e = 0; e < 16; ++e)" in cuda and "for (int j = 0; j < 8; ++j)" in cuda
    assert scores.count("= *(float4*)(tiles_ptr + ") == 8 + 4 and scores.count("tiles_ptr[") == 0
    assert scores.count("s_ptr[0] = (s_ptr[0] + ") == 4  # 4 columns of head_dim per step
    assert output.count("= *(float4*)(tiles_ptr + ") == 8 and output.count("= tiles_ptr[") == 4 * 8
    # float16 tiles: 8-byte loads of four halves, each converted
    halves = loop_body(build(fused(**LESSON_KNOBS, vector=4), "h100").cuda, "for (int e = 0")
    assert halves.count("= *(half4*)(") == 8 + 4 and halves.count(".x = (float)(") == 8 + 4


def test_float_tiles_are_one_dynamic_allocation():
    """Q 128 × 68, K 32 × 68, V 32 × 64 and P 128 × 36 floats: rows padded by a float4 (68 words ≡ 4 mod 32),
    more than the 48 KB a block may allocate statically, so one dynamic allocation with the tiles in turn."""
    built = build(fused(**LESSON_KNOBS, float_tiles=True, vector=4), "h100")
    assert built.kernels[0].shared_bytes == (128 * 68 + 32 * 68 + 32 * 64 + 128 * 36) * 4 == 70_144
    assert built.cuda.count("extern __shared__ __align__(64) float tiles_ptr[];") == 1
    assert "__shared__ alignas" not in built.cuda
    # K starts after Q, V after K, P after V (in floats); the tiles are float4-aligned.
    plan = Plan(SMALL, AttentionFusedKnobs(**LESSON_KNOBS, float_tiles=True, vector=4))
    assert plan.tile_offsets == {"q": 0, "k": 128 * 68 * 4, "v": 160 * 68 * 4, "p": (160 * 68 + 32 * 64) * 4}
    assert "+ 8704)]" in built.cuda and "+ 10880)]" in built.cuda and "+ 12928)" in built.cuda


def test_float16_tiles_beyond_48_kb_are_allocated_dynamically():
    """head_dim 128, 128 query rows, 64 keys: Q 128 × 130 and K 64 × 130 halves, V 64 × 128 halves, P 128 × 65
    floats, 99,584 bytes: the same layout as the static tiles, in one dynamic allocation."""
    spec = fused(Attention(batch=1, heads=1, seq=128, head_dim=128), block_q=128, block_kv=64, rows_per_thread=8)
    built = build(spec, "h100")
    assert built.kernels[0].shared_bytes == (128 * 130 + 64 * 130 + 64 * 128) * 2 + 128 * 65 * 4 == 99_584
    assert "extern __shared__" in built.cuda and "((half*)tiles_ptr)[" in built.cuda


@pytest.mark.parametrize("elements, element_bytes, vector, stride", [
    (64, 2, 1, 66), (64, 2, 2, 66), (64, 2, 4, 68), (32, 4, 1, 33), (32, 4, 4, 36), (64, 4, 4, 68), (128, 4, 2, 130),
])
def test_padded_rows(elements, element_bytes, vector, stride):
    """The stride is a whole number of vector loads, odd, so the loads of the same column from consecutive
    rows by the lanes shared memory serves together (128 bytes: 32 lanes of 4-byte loads, 16 of 8-byte, 8
    of 16-byte) fall in 32 different banks; and each vector load is aligned."""
    assert padded_row(elements, element_bytes, vector) == stride
    access = max(vector * element_bytes, 4)
    lanes = 128 // access
    banks = [(row * stride * element_bytes + word * 4) // 4 % 32 for row in range(lanes) for word in range(access // 4)]
    assert sorted(banks) == list(range(32))
    assert stride * element_bytes % access == 0


def test_every_tile_of_the_dynamic_allocation_starts_16_byte_aligned():
    for values in itertools.product((16, 32, 64, 128), (16, 32, 64, 128), (False, True), (1, 2, 4), (64, 128)):
        block_q, block_kv, kv_shared, vector, head_dim = values
        knobs = AttentionFusedKnobs(block_q=block_q, block_kv=block_kv, kv_shared=kv_shared, float_tiles=True,
                                    vector=vector, rows_per_thread=1, threads_per_row=1)
        plan = Plan(Attention(batch=1, heads=1, seq=128, head_dim=head_dim), knobs)
        assert all(at % 16 == 0 for at in plan.tile_offsets.values()), values
        assert plan.shared_bytes % 16 == 0


@pytest.mark.parametrize("spec, named", [
    (fused(block_q=32, rows_per_thread=8, threads_per_row=32, block_kv=16), ("threads_per_row", "block_kv")),
    (fused(Attention(batch=1, heads=1, seq=96)), ("block_q",)),
    (fused(block_q=128, rows_per_thread=1, threads_per_row=16), ("block_q", "rows_per_thread", "threads_per_row")),
    # 16 / 8 × 1 = 2 threads per block: the GPU's knob-space check found such a kernel still running after 20 s
    (fused(block_q=16, rows_per_thread=8, threads_per_row=1, block_kv=32),
     ("block_q", "rows_per_thread", "threads_per_row")),
    # float32 tiles: Q and K 128 × 132 floats, V 128 × 128, P 128 × 129: 266,752 bytes, over the H100's 227 KB
    (fused(Attention(batch=1, heads=1, seq=256, head_dim=128), block_q=128, block_kv=128, float_tiles=True),
     ("block_q", "block_kv", "float_tiles")),
    (unfused(score_tile=128, thread_tile=2), ("score_tile", "thread_tile")),
    (unfused(Attention(batch=4, heads=32, seq=4096)), ()),
], ids=["row-threads", "partial-tile", "too-many-threads", "under-a-warp", "too-much-shared", "unfused-threads",
        "too-many-scores"])
def test_bad_knobs_are_refused_in_one_sentence(spec, named):
    assert refusal(spec.template, spec.workload, spec.knobs).knobs == named


LESSON = [p for p in all_presets().values() if p.lesson == "attention"]


def test_the_lesson_has_both_templates_causal_and_not():
    assert {p.spec.template for p in LESSON} == {"attention_unfused", "attention_fused"}
    assert {p.spec.workload.causal for p in LESSON} == {False, True}


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA needs nvcc")
def test_the_lessons_cuda_compiles():
    """Every step's kernels compile with nvcc for sm_90, with no spills."""
    builds = {preset.id.replace("-", "_"): build(preset.spec, "h100") for preset in LESSON}
    binaries = [nvcc_binary(source, "sm_90") for source in one_source_per_preamble(builds)]
    registers = {kernel: used for binary in binaries for kernel, used in binary.registers.items()}
    spills = {kernel: spilled for binary in binaries for kernel, spilled in binary.spill_bytes.items()}
    assert registers.keys() == {f"{name}_{kernel.name}" for name, built in builds.items() for kernel in built.kernels}
    assert all(registers.values()) and not any(spills.values()), spills


def scores(workload: Attention) -> dict:
    """The global buffers TVM's host code allocates between the three kernels."""
    shape = (workload.batch, workload.heads, workload.seq, workload.seq)
    return {"S": (shape, "float32"), "P": (shape, "float32")}


EMULATED = [fused(Attention(batch=2, heads=1, seq=64, head_dim=128), block_q=32, block_kv=16, rows_per_thread=2,
                  threads_per_row=8, kv_shared=False),
            fused(Attention(batch=1, heads=1, seq=256, causal=True), block_q=128, block_kv=32, rows_per_thread=8,
                  threads_per_row=8),
            # float32 tiles and float4 loads (the lesson's step at 4096 tokens), one dynamic allocation
            fused(Attention(batch=1, heads=1, seq=128), **LESSON_KNOBS, float_tiles=True, vector=4),
            # float16 tiles beyond 48 KB (dynamic, viewed as halves), half4 loads converted lane by lane
            fused(Attention(batch=1, heads=1, seq=128, head_dim=128, causal=True), block_q=128, block_kv=64,
                  rows_per_thread=8, threads_per_row=16, vector=4),
            # 128 softmax threads: the default 256's code (a row of 64 scores, so the threads past it idle,
            # and the warps' partial results reduced again), with half the CPU threads to run.
            unfused(Attention(batch=1, heads=1, seq=64, causal=True), score_tile=32, output_rows=32,
                    softmax_threads=128)]


# A fused setting whose kernel can be made wrong by removing its rescaling: 4 key tiles per query tile.
RESCALED = fused(Attention(batch=1, heads=1, seq=64), block_q=32, block_kv=16, rows_per_thread=2, threads_per_row=8)


def without_rescaling(built):
    """``built`` with exp(m_old − m_new) replaced by 1: the sum and the output not rescaled when a later tile
    raises the maximum."""
    unscaled = re.sub(r"alpha_ptr\[(\d)\] = exp2f\(\(m_ptr\[\d\] - red_ptr\[0\]\)\);", r"alpha_ptr[\1] = 1.0f;",
                      built.cuda)
    return dataclasses.replace(built, cuda=unscaled)


@pytest.fixture(scope="module")
def emulated():
    """The settings this file runs on the CPU (EMULATED, then RESCALED without its rescaling) built, with the
    scratch buffers of each: one program for them all (run_on_cpu's together)."""
    settings = [(build(spec, "h100"), scores(spec.workload) if spec.template == "attention_unfused" else {})
                for spec in EMULATED]
    return settings + [(without_rescaling(build(RESCALED, "h100")), {})]


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
@pytest.mark.parametrize("number", range(len(EMULATED)), ids=["fused-d128-global-kv", "fused-causal-shared-kv",
                                                              "fused-float4", "fused-half4-dynamic", "unfused-causal"])
def test_the_cuda_matches_numpy_run_on_the_cpu(number, emulated):
    """The generated CUDA, each block's threads run on the CPU one after another, in both orders
    (tests/cuda_on_cpu.py): its indexing, barriers, shuffles and arithmetic, without a GPU."""
    built, scratch = emulated[number]
    workload = built.spec.workload
    inputs = workload.random_inputs(seed=4)
    for order in ORDERS:
        got = run_on_cpu(built, inputs, scratch, together=emulated, order=order)
        check = compare(got, workload.reference(*inputs), workload.reduction_length(), workload.tolerance_floor)
        assert check.correct, f"threads in {order} order: {check.describe()}"


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
def test_without_the_rescaling_the_fused_kernel_is_wrong(emulated):
    """The CPU run can fail: the same kernel with exp(m_old − m_new) replaced by 1 (the sum and the
    output not rescaled when a later tile raises the maximum) is refused by the gate."""
    unscaled, _ = emulated[-1]
    assert unscaled.spec == RESCALED and unscaled.cuda.count("alpha_ptr[0] = 1.0f;") == 1
    inputs = RESCALED.workload.random_inputs(seed=4)
    got = run_on_cpu(unscaled, inputs, {}, together=emulated)
    assert not compare(got, RESCALED.workload.reference(*inputs), RESCALED.workload.reduction_length(),
                       RESCALED.workload.tolerance_floor).correct


GPU_CASES = [unfused(), unfused(Attention(batch=1, heads=2, seq=128, causal=True)),
             fused(), fused(Attention(batch=1, heads=2, seq=128, causal=True)),
             fused(Attention(batch=2, heads=1, seq=128, head_dim=128, causal=True), block_q=32, block_kv=16,
                   rows_per_thread=2, threads_per_row=8, kv_shared=False),
             fused(Attention(batch=1, heads=2, seq=256, causal=True), block_q=128, block_kv=32, rows_per_thread=8,
                   threads_per_row=8),
             fused(Attention(batch=1, heads=2, seq=256, causal=True), **LESSON_KNOBS, float_tiles=True, vector=4),
             fused(Attention(batch=2, heads=1, seq=128, head_dim=128, causal=True), block_q=32, block_kv=16,
                   rows_per_thread=2, threads_per_row=8, kv_shared=False, float_tiles=True, vector=2),
             fused(Attention(batch=1, heads=2, seq=128, head_dim=128), block_q=128, block_kv=64, rows_per_thread=8,
                   vector=4)]


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
