"""The Hopper attention template (TIRx: TMA, an mbarrier ring of K and V tiles, wgmma SS for Q·Kᵀ and
RS for P·V): what each knob writes into the CUDA, the sizes it reports, the knob values refused, the
machine code ptxas makes of it for sm_90a, and on an H100 the kernel against the float64 reference."""
import re
from collections import Counter
from dataclasses import replace

import pytest
from attention_hopper_check import CHECK_ONLY, CHECKS, check_spec, grid  # bench/ (pytest's pythonpath)
from cuda_on_cpu import ORDERS
from hopper_here import hopper_gpu
from hopper_on_cpu import run_hopper_on_cpu
from refusals import refusal

from explorer.analysis import sass
from explorer.build import Spec, build
from explorer.cuda_compile import nvcc_binary, nvcc_path
from explorer.errors import InvalidKnobs
from explorer.measure import measure
from explorer.measure.gate import compare
from explorer.schedules import attention_hopper
from explorer.schedules.attention_hopper import AttentionHopperKnobs, Plan, check_knobs
from explorer.schedules.matmul_hopper import MatmulHopperKnobs
from explorer.workloads import Attention, Matmul

D128 = Attention(batch=1, heads=2, seq=512, head_dim=128)
D64 = Attention(batch=1, heads=2, seq=256, head_dim=64)
BENCH = Attention(batch=8, heads=16, seq=4096, head_dim=128)
SS = "tvm_builtin_ptx_wgmma_f16_ss_mma_async_sync_aligned_"  # TVM writes each PTX instruction as a helper
RS = "tvm_builtin_ptx_wgmma_f16_rs_mma_async_sync_aligned_"
TMA = "complete_tx__bytes("


def hopper(workload=D128, **knobs):
    return build(Spec("attention_hopper", workload, AttentionHopperKnobs(**knobs)), "h100")


def body(cuda: str) -> str:
    """The kernel itself, after the helper functions."""
    return cuda.split('extern "C" __global__')[-1]


def calls(cuda: str, helper: str) -> Counter:
    """The instruction shapes of a helper's call sites in the kernel: 'm64n128k16...' -> count."""
    return Counter(re.findall(re.escape(helper) + r"(m64n\d+k16)_f32_f16_f16\w*\(", body(cuda)))


def test_default_kernel_multiplies_with_wgmma_from_tma_tiles():
    cuda = hopper().cuda
    # Per key tile: S = Q·Kᵀ in 128 / 16 = 8 steps from shared memory, O += P·V in 128 / 16 = 8 steps with P
    # from registers (TVM unrolls both).
    assert calls(cuda, SS) == {"m64n128k16": 8}
    assert calls(cuda, RS) == {"m64n128k16": 8}
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in cuda
    assert "__grid_constant__ CUtensorMap Q_map" in cuda and "CUtensorMap K_map" in cuda and "CUtensorMap V_map" in cuda
    assert "setmaxnreg.dec.sync.aligned.u32 40" in cuda and "setmaxnreg.inc.sync.aligned.u32 232" in cuda
    # P is rounded to f16 pairs in registers (64 scores: 32 words), O rounded the same way as it leaves
    # (2 rows × 16 column groups of two): one cvt each.
    assert body(cuda).count("cvt_f16x2_f32") == 32 + 32 and body(cuda).count("st_global_b32") == 32
    # The max of each of a thread's 2 rows per tile and their sums after the loop: 2 shuffles each.
    assert body(cuda).count("__shfl_xor_sync") == 2 * 2 + 2 * 2


def test_the_products_read_the_right_operands():
    cuda = body(hopper().cuda)
    # S: the first step overwrites (scale-d false), the other 7 add; B = K is K-major (no transpose):
    # the helper's immediates are scale-a, scale-b, transpose-a, transpose-b = 1, 1, 0, 0.
    assert cuda.count(SS + "m64n128k16_f32_f16_f16_1_1_0_0(") == 8
    assert cuda.count("(bool)0);") == 1 and cuda.count("(bool)1);") == 15
    # O: B = V is N-major for P·V (d contiguous): transpose-b = 1.
    assert cuda.count(RS + "m64n128k16_f32_f16_f16_1_1_1(") == 8
    # A is P's words 4kk … 4kk + 3, B V's rows 16kk … (16 rows of 128 bytes: 128 units further per step).
    assert "p_words_ptr[3], desc_ptr[2], (bool)1);" in cuda
    assert all(f"p_words_ptr[{4 * kk + 3}], (desc_ptr[2] + (uint64_t){128 * kk}ULL)" in cuda for kk in range(1, 8))


@pytest.mark.parametrize("knobs,lbo", [({}, 1024), ({"block_kv": 64, "stages": 3}, 512)])  # as CHECKS builds them
def test_descriptors_say_how_the_swizzled_tiles_are_laid_out(knobs, lbo):
    """Q and K (K-major): LBO 1 (unused with a swizzle), SBO 64 (8 rows of 128 bytes, in 16-byte units).
    V (MN-major): SBO 64 as well, LBO the distance between its two 64-column halves: block_kv rows of
    128 bytes, in 16-byte units."""
    cuda = body(hopper(**knobs).cuda)
    descriptors = re.findall(r"ptx_wgmma_encode_matrix_descriptor\(\(&\(desc_ptr\[(\d)\]\)\), .*?, (\d+), (\d+), "
                             r"(\d)\);", cuda)
    assert sorted(descriptors) == [("0", "1", "64", "3"), ("1", "1", "64", "3"), ("2", str(lbo), "64", "3")]
    # Steps within a 128-byte row move the start 32 bytes (2 units); the second 64 columns of d are the
    # tile's second column of rows: block rows × 128 bytes further (Q 128 rows, K block_kv rows).
    assert "(desc_ptr[0] + (uint64_t)2ULL)" in cuda and "(desc_ptr[0] + (uint64_t)1024ULL)" in cuda
    assert f"(desc_ptr[1] + (uint64_t){lbo}ULL)" in cuda
    # V steps 16 rows of 128 bytes per 16 keys.
    assert "(desc_ptr[2] + (uint64_t)128ULL)" in cuda


# Settings of CHECKS, which test_every_setting_checked_on_the_gpu_builds_here builds anyway.
@pytest.mark.parametrize("name,threads,blocks", [
    ("d128-two-batches-three-heads-causal", 384, 256 // 128 * 2 * 3),  # 2 consumers + the producer; query tiles × heads
    ("d128-no-producer", 256, 512 // 128 * 2),
    ("d128-one-consumer-causal", 256, 512 // 64 * 2),  # 64 query rows per block
    ("d64-one-consumer-no-producer-kv64-4-stages", 128, 256 // 64 * 2),
])
def test_launch_follows_the_knobs(name, threads, blocks):
    (kernel,) = build(check_spec(name), "h100").kernels
    assert (kernel.threads_per_block, kernel.blocks) == (threads, blocks)


def test_shared_memory_by_hand():
    # Q: 128 rows × 128 halves; per stage K and V: 2 × 128 × 128 halves; Q's mbarrier and 2 per stage (at any
    # sequence length: the benchmark's shape takes as much as D128's, which the other tests build).
    plan = check_knobs(D128, AttentionHopperKnobs())
    assert check_knobs(BENCH, AttentionHopperKnobs()).shared_bytes == plan.shared_bytes
    assert plan.q_bytes == 32768 and plan.stage_bytes == 65536
    assert plan.shared_bytes == 32768 + 2 * (65536 + 16) + 8 == 163880
    (kernel,) = hopper(D128).kernels
    assert kernel.shared_bytes == plan.shared_bytes
    assert check_knobs(D64, AttentionHopperKnobs(block_kv=64, consumers=1, stages=4)).shared_bytes == \
        64 * 64 * 2 + 4 * (2 * 64 * 64 * 2 + 16) + 8


def test_plan_registers_by_hand():
    # S 128 / 2 floats, P 128 / 4 words, O 128 / 2 floats.
    assert Plan(BENCH, AttentionHopperKnobs()).fragment_registers == 64 + 32 + 64
    assert Plan(D64, AttentionHopperKnobs(block_kv=64)).fragment_registers == 32 + 16 + 32


def test_barriers_and_copies():
    cuda = body(hopper().cuda)
    # Q's barrier and a full barrier per stage expect one arrival (the copier's expect_tx); each
    # empty barrier all 256 consumer threads.
    assert cuda.count("mbarrier_init_init_shared_b64(") == 1 + 2 * 2
    assert cuda.count(", (uint)1);") >= 3 and cuda.count(", (uint)256);") == 2
    # The copier announces Q's 32 KB once and 64 KB of K and V per tile.
    assert "(uint)32768);" in cuda and "(uint)65536);" in cuda
    # Q in 2 boxes of 64 columns, K and V in 2 each.
    assert cuda.count(TMA) == 2 + 2 * 2
    # Every consumer thread releases each tile once it has been multiplied.
    assert cuda.count("mbarrier_arrive_arrive_shared_b64(") == 1


def test_without_warp_specialization_a_consumer_copies_ahead():
    # The setting of CHECKS (built for test_every_setting_checked_on_the_gpu_builds_here anyway): the causal
    # mask changes none of the copies or barriers counted here.
    cuda = body(build(check_spec("d128-no-producer-causal-3-stages"), "h100").cuda)
    assert "setmaxnreg" not in cuda
    # Q, then stages − 1 = 2 tiles before the loop, then one tile per step of the loop.
    assert cuda.count(TMA) == 2 + 2 * 2 + 2 * 2  # Q; K and V before the loop (a loop of 2); K and V in it
    assert cuda.count(", (uint)256);") == 3  # each stage's empty barrier: both consumers' 256 threads


def test_d64_reads_one_swizzled_column():
    cuda = hopper(D64, block_kv=64, consumers=1).cuda
    # S: 64 / 16 = 4 steps of n64; O: 64 / 16 = 4 steps of n64; Q, K and V one box each.
    assert calls(cuda, SS) == {"m64n64k16": 4} and calls(cuda, RS) == {"m64n64k16": 4}
    assert body(cuda).count(TMA) == 1 + 2


def test_causal_stops_at_the_diagonal_and_masks_only_there():
    causal = body(hopper(Attention(batch=1, heads=2, seq=512, head_dim=128, causal=True)).cuda)
    plain = body(hopper().cuda)
    # A head's 4 blocks run together, its last query tile first: qt = 3 − blockIdx.x % 4 reads
    # (qt + 1) · 128 / 128 key tiles (blockIdx.x / 4 is the head).
    assert "j < (4 - (((int)blockIdx.x) & 3))" in causal
    # The mask is one comparison per score, only on tiles that reach past the consumer's first row.
    assert causal.count("-0x1.fffffep+127f") == plain.count("-0x1.fffffep+127f") + 64
    # (j + 1) · 128 > qt · 128 + wg · 64, with wg = threadIdx.x / 128 − 1 (after the producer), as TVM simplifies it.
    assert "if ((((((int)threadIdx.x) >> 7) - (j_1 * 2)) - ((((int)blockIdx.x) & 3) * 2)) < -3) {" in causal


@pytest.mark.parametrize("workload,knobs,named,words", [
    (Attention(batch=1, heads=1, seq=192, head_dim=64), {}, ("consumers",), "128 query rows"),
    (Attention(batch=1, heads=1, seq=192, head_dim=64), {"consumers": 1}, ("block_kv",), "block_kv = 128"),
    (BENCH, {"stages": 4}, ("stages", "block_kv", "consumers"), "shared memory"),
], ids=["partial-query-tile", "partial-key-tile", "too-much-shared"])
def test_bad_knobs_are_refused_in_one_sentence(workload, knobs, named, words):
    error = refusal("attention_hopper", workload, AttentionHopperKnobs(**knobs))
    assert error.knobs == named and words in str(error)


def test_too_many_registers_are_refused(monkeypatch):
    # Every block_kv offered fits with either head size ...
    assert max(Plan(BENCH, AttentionHopperKnobs(block_kv=b)).fragment_registers
               for b in AttentionHopperKnobs.field("block_kv").choices) <= attention_hopper.MAX_FRAGMENT_REGISTERS
    # ... so the refusal is seen with a smaller budget.
    monkeypatch.setattr(attention_hopper, "MAX_FRAGMENT_REGISTERS", 128)
    error = refusal("attention_hopper", BENCH, AttentionHopperKnobs())
    assert error.knobs == ("block_kv",) and "160 registers" in str(error)


def test_a_head_that_is_not_whole_swizzled_rows_is_refused():
    odd = Attention(batch=1, heads=1, seq=256, head_dim=64)
    object.__setattr__(odd, "head_dim", 96)  # the workload offers 64 and 128 only
    with pytest.raises(InvalidKnobs, match="head_dim = 96 must be a multiple of 64"):
        check_knobs(odd, AttentionHopperKnobs())


def test_targets_without_wgmma_are_refused():
    with pytest.raises(InvalidKnobs, match="sm_90a"):
        build(Spec("attention_hopper", D128, AttentionHopperKnobs()), "a100")


# The default kernel at D128 is test_the_machine_code_has_wgmma_and_tma's (NVRTC runs the same ptxas), which reads
# its registers, spills and unserialized wgmma from the machine code; nvcc compiles its knobs at the benchmark's shape.
COMPILED = [(replace(D128, causal=True), {"warp_specialize": False, "stages": 3}),  # a setting of CHECKS
            (D64, {"block_kv": 64, "consumers": 1}),
            (replace(D128, causal=True), {"consumers": 1}),
            (replace(BENCH, causal=True), {}),
            # 254 registers (with 2 stages too); the timed grid's last corner, which its test builds
            (replace(BENCH, causal=True), {"overlap": True, "warp_specialize": False, "stages": 3})]


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc (CUDA toolkit) is not installed")
@pytest.mark.parametrize("workload,knobs", COMPILED, ids=["no-producer-causal-3-stages", "d64-one-consumer",
                                                          "causal-one-consumer", "causal-bench",
                                                          "causal-bench-overlap-no-producer-3-stages"])
def test_nvcc_compiles_it_for_sm_90a_without_spills(workload, knobs):
    binary = nvcc_binary(hopper(workload, **knobs).cuda, "sm_90a")  # ptxas checks every PTX line
    (registers,) = binary.registers.values()
    assert 0 < registers <= 255 and set(binary.spill_bytes.values()) == {0}
    assert "wgmma" not in binary.log.lower()  # no "wgmma ... serialized" warning from ptxas


@pytest.mark.skipif(bool(sass.missing_tools()), reason="NVRTC or nvdisasm is not installed")
def test_the_machine_code_has_wgmma_and_tma():
    (kernel,) = sass.analyze_source(hopper().cuda, "sm_90a").kernels
    opcodes = Counter(ins.opcode for ins in kernel.instructions)
    assert kernel.mix.hgmma > 0 and kernel.mix.tma > 0 and kernel.mix.hmma == 0
    assert 0 < kernel.registers <= 255 and kernel.mix.spill_bytes == 0 and kernel.stack_bytes == 0
    # Per key tile 8 + 8 wgmma (the 4 tiles of seq 512 in a loop the compiler may unroll).
    assert sum(n for op, n in opcodes.items() if op.startswith("HGMMA")) % 16 == 0
    # Not serialized (ptxas's warning C7511): the 8 wgmmas of a commit group run chained, only the last one is
    # waited for (gsb0). Serialized, every one is, with a wait of its own (16 of 16 in this kernel with an
    # accumulator touched between two of them).
    hgmma = [ins for ins in kernel.instructions if ins.opcode.startswith("HGMMA")]
    assert 8 * sum("gsb0" in ins.operands for ins in hgmma) == len(hgmma)
    # exp2 of 64 scores and of 2 rescale factors per tile.
    assert opcodes["MUFU.EX2"] % 66 == 0


def check_on_cpu(built, order="forward"):
    workload = built.spec.workload
    inputs = workload.random_inputs(seed=5)
    return compare(run_hopper_on_cpu(built, inputs, order=order), workload.reference(*inputs),
                   workload.reduction_length(), workload.tolerance_floor)


# Three settings that together run every path of the kernel (a producer or not, one or two consumers, 2–3
# stages, block_kv 64 and 128, overlap, causal masking, several batches and heads): each emulation takes seconds,
# and the H100 runs all 14 of bench/attention_hopper_check.py's settings (test_matches_the_reference_on_the_gpu).
EMULATED = {
    "two-batches-three-heads-causal-kv64": (Attention(batch=2, heads=3, seq=256, head_dim=128, causal=True),
                                            {"block_kv": 64, "stages": 3}),
    "d128-causal-overlap": (replace(D128, causal=True), {"overlap": True}),
    "d64-overlap-no-producer-one-consumer": (D64, {"overlap": True, "warp_specialize": False, "consumers": 1,
                                                   "block_kv": 64}),
}


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
@pytest.mark.parametrize("case", sorted(EMULATED))
def test_the_cuda_matches_the_reference_run_on_the_cpu(case):
    """TMA, mbarriers and wgmma emulated as the PTX ISA defines them (tests/hopper_on_cpu.py), the threads of a
    block in both orders."""
    workload, knobs = EMULATED[case]
    for order in ORDERS:
        check = check_on_cpu(hopper(workload, **knobs), order)
        assert check.correct, f"threads in {order} order: {check.describe()}"


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
def test_v_read_without_the_transpose_is_wrong_on_the_cpu():
    """The emulation can fail: V read as a K-major operand (the transpose flag off) gives garbage."""
    built = build(check_spec("d64-one-consumer-no-producer-kv64-4-stages"), "h100")  # built for CHECKS anyway
    helper = RS + "m64n64k16_f32_f16_f16_1_1_1"
    assert built.cuda.count(helper) == 1 + 4  # its definition, and block_kv / 16 = 64 / 16 calls
    check = check_on_cpu(replace(built, cuda=built.cuda.replace(helper, helper[:-1] + "0")))
    assert not check.correct


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
def test_reading_the_accumulators_before_their_wgmma_completes_is_wrong_on_the_cpu():
    """The emulation runs a wgmma when a wait lets it complete: waits that leave the newest group
    running (wait_group 1 where the kernel waits for all) leave the scores and O unfinished."""
    built = build(check_spec("d64-overlap-one-consumer-causal"), "h100")  # built for CHECKS anyway
    wait_all, wait_one = (f"tvm_builtin_ptx_wgmma_wait_group_wait_group_sync_aligned_{n}();" for n in (0, 1))
    assert body(built.cuda).count(wait_all) == 3 and body(built.cuda).count(wait_one) == 1
    check = check_on_cpu(replace(built, cuda=built.cuda.replace(wait_all, wait_one)))
    assert not check.correct


@pytest.mark.skipif(nvcc_path() is None, reason="compiling the CUDA for the CPU needs nvcc")
@pytest.mark.parametrize("knobs", [{}, {"warp_specialize": False, "consumers": 1, "block_n": 128}])
def test_the_emulation_agrees_with_matmul_hopper(knobs):
    """The emulation reads descriptors and swizzles as matmul_hopper's kernel, checked on an H100
    (bench/results/hopper-gemm-*.json), needs them read: K-major A, N-major B, 128-byte swizzle."""
    workload = Matmul(m=256, n=256, k=256, dtype="float16")
    built = build(Spec("matmul_hopper", workload, MatmulHopperKnobs(**knobs)), "h100")
    inputs = workload.random_inputs(seed=5)
    check = compare(run_hopper_on_cpu(built, inputs), workload.reference(*inputs), workload.reduction_length())
    assert check.correct, check.describe()


def test_overlap_issues_the_next_scores_before_waiting_for_p_v():
    cuda = body(hopper(overlap=True).cuda)
    # S of tile 0 alone; in the loop S of tile i + 1 then P·V of tile i, a wait for the scores only
    # (one group may stay in flight), then for both; P·V of the last tile.
    assert calls(cuda, SS) == {"m64n128k16": 8 * 2} and calls(cuda, RS) == {"m64n128k16": 8 * 2}
    loop = cuda[cuda.index("for (int i = 0;"):]
    first_ss, first_rs = loop.index(SS), loop.index(RS)
    wait_one = loop.index("wgmma_wait_group_wait_group_sync_aligned_1();")
    wait_all = loop.index("wgmma_wait_group_wait_group_sync_aligned_0();")
    assert first_ss < first_rs < wait_one < loop.index("__shfl_xor_sync") < wait_all
    assert body(hopper().cuda).count("sync_aligned_1();") == 0  # off: every wait is for all


def test_the_template_is_registered_for_attention():
    from explorer.schedules import templates_for

    assert "attention_hopper" in [t.name for t in templates_for("attention")]


# -- on an H100 -----------------------------------------------------------------------

# Small shapes, every knob and both masks: bench/attention_hopper_check.py's, which checks them in one GPU
# call. Run in the measuring worker, so that a kernel whose barriers never complete is stopped at the
# time limit instead of hanging the run.
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_every_setting_checked_on_the_gpu_builds_here(name):
    spec = check_spec(name)
    assert build(spec, "h100").kernels


def test_the_timed_grid_is_every_knob_setting_the_template_takes():
    # 2 × 2 × 2 × 2 × 2 settings, all taken at the benchmark's shape (none refused: the knob checks are exact);
    # building each takes a second, so two corners are built, the H100 times all of them.
    settings = list(grid())
    assert len(settings) == len(set(settings)) == 32
    for knobs in settings:
        check_knobs(BENCH, knobs)  # raises InvalidKnobs for a setting the template refuses
    for knobs in (settings[0], settings[-1]):
        assert build(Spec("attention_hopper", replace(BENCH, causal=True), knobs), "h100").kernels


@pytest.mark.gpu
@pytest.mark.skipif(not hopper_gpu(), reason="needs a Hopper GPU (sm_90a)")
@pytest.mark.parametrize("name", sorted(CHECKS))
def test_matches_the_reference_on_the_gpu(name, measuring_worker):
    result = measure(check_spec(name), settings=CHECK_ONLY)
    assert result.correct, result.check.describe()
