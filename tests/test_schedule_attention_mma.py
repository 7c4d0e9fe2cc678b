"""The tensor-core attention kernel (attention_mma): its CUDA run on the CPU with ldmatrix and
mma.sync emulated lane by lane (tests/cuda_on_cpu.py), a wrong fragment layout caught there, what
each knob writes into the kernel, the sizes it reports, the knob values refused, and the kernel
against NumPy on a GPU."""
import dataclasses
import re

import pytest
import tvm
from compiled_together import one_source_per_preamble
from cuda_on_cpu import ORDERS, run_on_cpu
from exported import load
from refusals import refusal

from explorer.analysis.banks import analyze_banks
from explorer.analysis.sass import binary_compiler, compile_binary
from explorer.build import Spec, build
from explorer.cuda_compile import nvcc_path
from explorer.export import snippet
from explorer.measure.gate import compare
from explorer.presets import all_presets
from explorer.schedules import get_template
from explorer.schedules.attention_mma import AttentionMmaKnobs, Plan
from explorer.workloads import Attention

SMALL = Attention(batch=1, heads=2, seq=128, head_dim=64)
# The ldmatrix calls in the CUDA source (TVM writes each PTX instruction as a helper function).
PLAIN = "ldmatrix_sync_aligned_m8n8_x4_shared_b16(((uint*)"
TRANS = "ldmatrix_sync_aligned_m8n8_x4_trans_shared_b16(((uint*)"


def mma(workload=SMALL, **knobs) -> Spec:
    return Spec("attention_mma", workload, AttentionMmaKnobs(**knobs))


EMULATED = [mma(Attention(batch=1, heads=1, seq=256, head_dim=64, causal=True), block_q=128, warps=8, block_kv=32),
            mma(Attention(batch=1, heads=1, seq=128, head_dim=128), block_q=64, warps=2, block_kv=16, stages=1,
                pad=False)]
# A setting whose V fragments are read by ldmatrix with the transpose, to be read without it.
TRANSPOSED = mma(Attention(batch=1, heads=1, seq=64, head_dim=64), block_q=64, warps=4, block_kv=32, stages=1)


@pytest.fixture(scope="module")
def emulated():
    """The settings this file runs on the CPU built: EMULATED, then TRANSPOSED with V read by a plain ldmatrix;
    one program for them all (run_on_cpu's together)."""
    plain = build(TRANSPOSED, "h100")
    plain = dataclasses.replace(plain, cuda=plain.cuda.replace(TRANS, PLAIN))
    return [(build(spec, "h100"), {}) for spec in EMULATED] + [(plain, {})]


def check_on_cpu(built, emulated, order="forward"):
    inputs = built.spec.workload.random_inputs(seed=5)
    got = run_on_cpu(built, inputs, {}, together=emulated, order=order)
    return compare(got, built.spec.workload.reference(*inputs), built.spec.workload.reduction_length(),
                   built.spec.workload.tolerance_floor)


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
@pytest.mark.parametrize("number", range(len(EMULATED)), ids=["causal-d64-8-warps-cp-async",
                                                              "d128-2-warps-two-row-tiles"])
@pytest.mark.parametrize("order", ORDERS)
def test_the_cuda_matches_numpy_run_on_the_cpu(number, order, emulated):
    check = check_on_cpu(emulated[number][0], emulated, order)
    assert check.correct, check.describe()


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
def test_v_read_without_the_transpose_is_wrong_on_the_cpu(emulated):
    """The emulation can fail: V's fragments loaded by a plain ldmatrix (rows of V as the columns
    of the B operand) give P·Vᵀ-like garbage, and the gate refuses it."""
    assert build(TRANSPOSED, "h100").cuda.count(TRANS) == 2 * 4  # per tile: 2 key steps × 4 pairs of 8 columns
    plain, _ = emulated[-1]
    assert plain.spec == TRANSPOSED and TRANS not in plain.cuda
    check = check_on_cpu(plain, emulated)
    assert not check.correct


def test_one_kernel_with_mma_and_no_score_in_global_memory():
    built = build(mma(block_q=64, warps=4, block_kv=32), "h100")
    (kernel,) = built.kernels
    parameters = re.search(r"__global__ void[^{;]*\(([^)]*)\)", built.cuda).group(1)
    assert set(re.findall(r"__restrict__ (\w+)_ptr", parameters)) == {"Q", "K", "V", "O"}
    # 128 / 64 query tiles × 2 heads; 4 warps of 16 rows.
    assert kernel.grid == (2, 2, 1) and kernel.threads_per_block == 128
    # Per K/V tile: S = 16 rows × 32 keys × 64 = 4 key tiles × 4 d steps, P·V = 2 key steps × 8 column tiles.
    assert built.cuda.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 4 * 4 + 2 * 8
    # Q once (4 d steps), K per pair of key tiles and d step (2 × 4), V per key step and column pair (2 × 4).
    assert built.cuda.count(PLAIN) == 4 + 8
    assert built.cuda.count(TRANS) == 8
    # Per tile the maximum of 2 rows in 2 shuffle steps; after the loop, the sums of the same 2 rows.
    assert built.cuda.count("__shfl_xor_sync") == 2 * 2 + 2 * 2
    # Q 64 rows + two stages of K and V, 32 rows each, rows of 64 + 8 halves.
    assert kernel.shared_bytes == (64 + 2 * 2 * 32) * 72 * 2


def test_stages_pick_cp_async_or_plain_copies():
    two = build(mma(stages=2), "h100").cuda
    one = build(mma(stages=1), "h100").cuda
    assert "cp_async_cg" in two and "cp_async_wait_group" in two
    assert "cp_async" not in one.split("main_kernel(", 1)[1]
    assert one.count("*(uint4*)(tiles_ptr") == 3  # Q, K and V copied by 16-byte loads and stores


def test_pad_sets_the_row_stride():
    # A row of 64 halves is 128 bytes: without padding the 8 rows an ldmatrix reads start in the same bank.
    assert Plan(SMALL, AttentionMmaKnobs(pad=False)).stride == 64
    assert Plan(SMALL, AttentionMmaKnobs(pad=True)).stride == 72
    plain = build(mma(pad=False, stages=1), "h100").cuda
    assert "* 64)" in plain and "* 72)" not in plain


def test_causal_stops_at_the_diagonal_and_masks():
    causal = build(mma(Attention(batch=1, heads=2, seq=128, head_dim=64, causal=True), block_q=64, warps=4,
                       block_kv=32), "h100").cuda
    # Query tile qt = 1 − blockIdx.x (the longest rows first) walks (qt + 1) · 64 / 32 key tiles.
    assert "kt < (4 - (((int)blockIdx.x) * 2));" in causal
    # The mask: a comparison of key and query per score of the thread, 2 rows × 4 key tiles × 2 keys.
    assert len(re.findall(r"if \(\(\(kt \* 32\) \+ \(\(\(\(int\)threadIdx.x\) & 3\) \* 2\)\)", causal)) == 2 * 4 * 2


@pytest.mark.parametrize("pad, per_request", [(False, 4 * 8), (True, 4)])
def test_the_bank_model_reads_ldmatrix(pad, per_request):
    """An ldmatrix.x4 is 4 phases of 8 lanes, each lane one 16-byte row. Rows of 64 halves (128 bytes,
    32 words) start in the same bank: 8 rows → 8 wavefronts a phase, 32 a request. Rows of 72 halves
    (36 words) start 4 banks apart: the 8 rows of a phase cover the 32 banks once, 4 a request."""
    (kernel,) = analyze_banks(build(mma(block_q=64, warps=4, block_kv=32, stages=1, pad=pad), "h100")).kernels
    ldmatrix = [a for a in kernel.accesses if a.op == "load" and a.access_bytes == 16]
    assert len(ldmatrix) == 4 + 8 + 8  # Q, K and V fragments, as counted in the CUDA above
    assert {a.wavefronts_per_request for a in ldmatrix} == {per_request}
    assert {a.max_degree for a in ldmatrix} == {8 if not pad else 1}


def test_register_budget_by_hand():
    # d = 128, 32 rows per warp (2 row tiles), 64 keys: Q 2·8·4, S 2·8·4, P 2·4·4, O 2·16·4 registers.
    plan = Plan(Attention(head_dim=128), AttentionMmaKnobs(block_q=128, warps=4, block_kv=64))
    assert plan.registers_per_thread == 64 + 64 + 32 + 128
    assert Plan(Attention(head_dim=128), AttentionMmaKnobs(block_q=128, warps=8, block_kv=64)).registers_per_thread \
        == 144


@pytest.mark.parametrize("spec, named", [
    (mma(block_q=128, warps=2), ("block_q", "warps")),
    (mma(block_q=64, warps=8), ("block_q", "warps")),
    (mma(Attention(batch=1, heads=1, seq=96)), ("block_q",)),
    (mma(Attention(batch=1, heads=1, seq=256, head_dim=128), block_q=128, block_kv=128, stages=2),
     ("block_q", "block_kv")),
], ids=["64-rows-per-warp", "8-rows-per-warp", "partial-tile", "too-much-shared"])
def test_bad_knobs_are_refused_in_one_sentence(spec, named):
    assert refusal(spec.template, spec.workload, spec.knobs).knobs == named


COMPILES = pytest.mark.skipif(binary_compiler() is None,
                              reason="neither NVRTC with the pip disassembler nor nvcc (CUDA toolkit) is installed")


@pytest.fixture(scope="module")
def compiled():
    """The lesson's mma steps and the template's default setting compiled as the Resources panel compiles them
    (compile_binary: NVRTC's cubin, the kernel that runs), but together, one source per preamble
    (one_source_per_preamble; each kernel is allocated alone all the same): name -> (build, registers, spill
    bytes of its kernel)."""
    template = get_template("attention_mma")
    builds = {preset.id.replace("-", "_"): build(preset.spec, "h100") for preset in LESSON[1:]}
    builds["default"] = build(Spec("attention_mma", template.default_workload(), template.knobs()), "h100")
    binaries = [compile_binary(dataclasses.replace(builds["default"], cuda=source))
                for source in one_source_per_preamble(builds)]
    registers = {kernel: used for binary in binaries for kernel, used in binary.registers.items()}
    spills = {kernel: spilled for binary in binaries for kernel, spilled in binary.spill_bytes.items()}
    assert registers.keys() == spills.keys() == {f"{name}_main_kernel" for name in builds}
    return {name: (built, registers[f"{name}_main_kernel"], spills[f"{name}_main_kernel"])
            for name, built in builds.items()}


@COMPILES
def test_the_default_kernel_compiles_for_hopper_without_spills(compiled):
    _, registers, spills = compiled["default"]
    assert registers and not spills


def test_export_parses_back_to_the_same_module(tmp_path):
    spec = mma(Attention(batch=1, heads=2, seq=128, causal=True))
    path = tmp_path / "attention_mma.py"
    path.write_text(snippet(spec))
    module = load(path, "attention_mma_snippet")
    tvm.ir.assert_structural_equal(module.Kernel, build(spec).schedule_mod)


LESSON = [p for p in all_presets().values() if p.lesson == "attention-tensor-cores"]


def test_the_lesson_goes_from_cuda_cores_to_mma_causal_and_not():
    assert [p.spec.template for p in LESSON] == ["attention_fused"] + ["attention_mma"] * 5
    assert {p.spec.workload.causal for p in LESSON} == {False, True}


@COMPILES
def test_the_lessons_registers(compiled):
    """One 16-row tile per warp fits in registers; two (attention-mma-tall) use all 255 a thread may have,
    as the Resources panel shows them (NVRTC's cubin: 168-244 registers, 255 and 64 bytes spilled for the tall
    tiles; nvcc -O3 allocates fewer, 163-168)."""
    for preset in LESSON[1:]:
        built, registers, spills = compiled[preset.id.replace("-", "_")]
        tall = built.spec.knobs.block_q // built.spec.knobs.warps == 32
        assert registers == 255 if tall else (registers < 255 and not spills), preset.id


GPU_CASES = [mma(), mma(Attention(batch=1, heads=2, seq=256, causal=True), block_q=128, warps=8, block_kv=64),
             mma(Attention(batch=2, heads=1, seq=128, head_dim=128, causal=True), block_q=64, warps=2, block_kv=16,
                 stages=1, pad=False),
             mma(Attention(batch=1, heads=2, seq=256, head_dim=128), block_q=128, warps=4, block_kv=32)]


@pytest.mark.gpu
@pytest.mark.parametrize("spec", GPU_CASES, ids=lambda s: f"{s.workload.label()}-{s.knobs.to_strings()}")
def test_matches_numpy_on_the_gpu(spec, run_on_gpu):
    got, expected = run_on_gpu(build(spec))
    check = compare(got, expected, spec.workload.reduction_length(), spec.workload.tolerance_floor)
    assert check.correct, check.describe()
