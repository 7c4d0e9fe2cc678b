"""The modern matmul templates: cp.async pipelines (matmul_async, fp32) and tensor cores
(matmul_tensorcore, fp16/bf16), read from the lowered TIR and the CUDA source; the
verifier's errors for them; the CUDA compiles with nvcc; kernels match NumPy on a GPU.

Shapes are small (128³ or 256³) so builds stay fast; sizes below are worked out by hand.
"""
import dataclasses
import re

import numpy as np
import pytest
import tvm
from compiled_together import one_source_per_preamble

from explorer.analysis.sass import binary_compiler, compile_binary
from explorer.build import Spec, build, pass_config
from explorer.errors import InvalidKnobs
from explorer.presets import get_preset
from explorer.schedules import get_template
from explorer.schedules.matmul_async import MatmulAsyncKnobs
from explorer.schedules.matmul_tensorcore import MatmulTensorCoreKnobs
from explorer.workloads import Matmul

FP32 = Matmul(m=256, n=256, k=256)
FP32_1024 = Matmul(m=1024, n=1024, k=1024)
FP16 = Matmul(m=256, n=256, k=256, dtype="float16")
FP16_4096 = Matmul(m=4096, n=4096, k=4096, dtype="float16")
BF16 = Matmul(m=256, n=256, k=256, dtype="bfloat16")


def simt(workload=FP32, **knobs):
    return build(Spec("matmul_async", workload, MatmulAsyncKnobs(**knobs)), "h100")


def tensorcore(workload=FP16, **knobs):
    return build(Spec("matmul_tensorcore", workload, MatmulTensorCoreKnobs(**knobs)), "h100")


def wait_groups(cuda: str) -> set[int]:
    return {int(n) for n in re.findall(r"cp\.async\.wait_group (\d+);", cuda)}


# -- matmul_async ---------------------------------------------------------------------


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_cp_async_and_the_stage_count_appear_when_the_knobs_ask(stages):
    b = simt(stages=stages)
    assert "cp.async.cg.shared.global" in b.cuda  # B's 16-byte copies
    assert "cp.async.ca.shared.global" in b.cuda  # A's 4-byte transposing copies
    # The copies run stages - 1 steps ahead: having issued step ko + stages - 1, the steady
    # loop waits until at most stages - 1 groups are in flight, i.e. step ko has landed
    # (the epilogue drains the rest, down to 0).
    assert max(wait_groups(b.cuda)) == stages - 1 and 0 in wait_groups(b.cuda)
    # Each buffer holds 16 × (128 + 4) floats of A and as many of B.
    assert b.kernels[0].shared_bytes == stages * 2 * 16 * 132 * 4


def test_without_async_copy_the_pipeline_uses_plain_loads():
    b = simt(stages=2, async_copy=False)
    assert "cp.async" not in b.cuda
    assert b.kernels[0].shared_bytes == 2 * 2 * 16 * 132 * 4  # still two buffers
    one = simt(stages=1, async_copy=False)
    assert "cp.async" not in one.cuda and one.kernels[0].shared_bytes == 2 * 16 * 132 * 4


def test_warps_and_lanes_follow_the_tiles():
    # 128 × 128 block of 32 × 64 warp tiles: 4 × 2 = 8 warps; 8 × 8 per thread: 4 × 8 lanes.
    (kernel,) = simt().kernels
    assert kernel.block == (32, 8, 1) and kernel.grid == (2, 2, 1)
    (kernel,) = simt(block_m=64, block_n=128, warp_m=64, warp_n=32, thread_m=8, thread_n=8).kernels
    assert kernel.block == (32, 4, 1) and kernel.grid == (2, 4, 1)


def test_dynamic_shared_memory_is_extern_and_the_static_is_not():
    assert "extern __shared__" in simt(stages=2).cuda
    static = simt(stages=2, dynamic_shared=False)
    assert "extern __shared__" not in static.cuda and "__shared__" in static.cuda


def test_transpose_a_off_copies_a_in_16_byte_vectors_too():
    cuda = simt(stages=2, transpose_a=False, read_vector=4, dynamic_shared=True).cuda
    assert "cp.async.ca" not in cuda and "cp.async.cg" in cuda


def test_simt_kernels_have_no_tensor_core_instructions():
    cuda = simt().cuda
    assert "mma" not in cuda and "ldmatrix" not in cuda


def test_store_vector_writes_c_in_float4s():
    assert "*(float4*)(C_ptr + " not in simt().cuda
    assert simt(store_vector=4).cuda.count("*(float4*)(C_ptr + ") == 16  # 8 × 8 outputs per thread
    assert simt(FP32_1024, split_k=2, store_vector=4).cuda.count("*(float4*)(C_rf_ptr + ") == 16


def step_loops(**knobs):
    """The annotations of the reduction's step loop (ko) and of the loop over k inside a step (ki)."""
    sch = get_template("matmul_async").apply(FP32, MatmulAsyncKnobs(**knobs))
    *_, ko, ki, _, _ = sch.get_loops(sch.get_sblock("C_update"))

    def annotations(loop):
        return {k: int(v) if isinstance(v, int) else [int(x) for x in v] for k, v in sch.get(loop).annotations.items()}

    return annotations(ko), annotations(ki), sch.get(ki).kind


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_register_double_buffering_nests_a_two_stage_pipeline_in_the_step(stages):
    ko, ki, kind = step_loops(register_double_buffer=True, stages=stages)
    # ki's body: [read A's registers, read B's registers, multiply]; the reads run one k ahead.
    assert ki["software_pipeline_stage"] == [0, 0, 1] and ki["software_pipeline_order"] == [0, 1, 2]
    assert kind == tvm.tirx.ForKind.UNROLLED and ki["pragma_unroll_explicit"] == 0
    # TVM expands ki first: ko's body becomes [copy A, copy B, prologue, ki's loop, epilogue].
    assert ko["software_pipeline_stage"] == [0, 0] + [stages - 1] * 3
    assert ko["software_pipeline_order"] == [0, 1, 2, 3, 4] and ko["software_pipeline_async_stages"] == [0]
    plain_ko, plain_ki, _ = step_loops(stages=stages)
    assert plain_ko["software_pipeline_stage"] == [0, 0, stages - 1] and plain_ki == {}


@pytest.mark.parametrize("thread_m, thread_n, warp_m, warp_n", [(8, 8, 32, 64), (16, 8, 64, 64)])
def test_register_double_buffering_keeps_two_copies_of_each_register_tile(thread_m, thread_n, warp_m, warp_n):
    tiles = dict(thread_m=thread_m, thread_n=thread_n, warp_m=warp_m, warp_n=warp_n)
    double, single = simt(register_double_buffer=True, **tiles), simt(**tiles)
    for operand, size in (("A", thread_m), ("B", thread_n)):
        assert f"{operand}_shared_dyn_local = T.alloc_local(({2 * size},)" in double.lowered
        assert f"{operand}_shared_dyn_local = T.alloc_local(({size},)" in single.lowered
        # Inside the step the copy for k + 1 is written while the copy for k is read.
        write = re.search(rf"{operand}_shared_dyn_local\[\((\w+) \+ 1 & 1\) \* {size}", double.lowered)
        assert write and f"{operand}_shared_dyn_local[({write.group(1)} & 1) * {size}" in double.lowered
    # The step's loop (16 k, the first one's reads in the prologue) is unrolled by nvcc.
    assert re.search(r"#pragma unroll\n\s*for \(int \w+ = 0; \w+ < 15; \+\+\w+\)", double.cuda)


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_register_double_buffering_keeps_the_copies_stages_ahead(stages):
    b = simt(register_double_buffer=True, stages=stages)
    assert max(wait_groups(b.cuda)) == stages - 1 and 0 in wait_groups(b.cuda)
    assert b.kernels[0].shared_bytes == simt(stages=stages).kernels[0].shared_bytes


def test_split_k_launches_a_second_kernel_that_adds_the_partials():
    # 1024² outputs in 128 × 128 tiles: 64 blocks per slice of K, 2 slices of 512.
    partial, total = simt(FP32_1024, split_k=2).kernels
    assert partial.grid == (8, 8, 2) and partial.block == (32, 8, 1)
    assert partial.shared_bytes == simt(FP32_1024).kernels[0].shared_bytes
    assert total.grid == (1024 * 1024 // 128, 1, 1) and total.block == (128, 1, 1) and total.shared_bytes == 0
    b = simt(FP32_1024, split_k=4)
    assert [k.grid for k in b.kernels] == [(8, 8, 4), (8192, 1, 1)]
    # Slice z reads columns 256 z ... of A (and rows of B) and writes partial sums 1024² apart ...
    assert "blockIdx_z * 256 +" in b.lowered and "C_rf[blockIdx_z * 1048576 +" in b.lowered
    # ... which the second kernel adds, one output per thread.
    second = b.cuda[b.cuda.index("main_kernel_1(float* __restrict__ C_ptr, float* __restrict__ C_rf_ptr) {"):]
    assert re.search(r"for \(int \w+ = 0; \w+ < 4; \+\+\w+\)", second) and "* 1048576)" in second
    (single,) = simt(FP32_1024).kernels
    assert single.grid == (8, 8, 1)


def test_split_k_composes_with_register_double_buffering():
    partial, _ = simt(FP32_1024, split_k=2, register_double_buffer=True, block_m=64, block_n=64, warp_m=32,
                      warp_n=64).kernels
    assert partial.grid == (16, 16, 2) and partial.block == (32, 2, 1)


# -- matmul_tensorcore ----------------------------------------------------------------


@pytest.mark.parametrize("workload, operand", [(FP16, "f16"), (BF16, "bf16")])
def test_tensor_core_kernels_use_ldmatrix_and_mma_sync(workload, operand):
    cuda = tensorcore(workload).cuda
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{operand}.{operand}.f32" in cuda
    assert "ldmatrix.sync.aligned.m8n8.x4" in cuda
    assert "cp.async.cg.shared.global" in cuda and max(wait_groups(cuda)) == 2  # 3 stages


def test_tensor_core_warps_and_shared_bytes_follow_the_tiles():
    (kernel,) = tensorcore(block_m=128, block_n=64, warp_m=64, warp_n=32, stages=2).kernels
    assert kernel.block == (32, 4, 1) and kernel.grid == (4, 2, 1)
    # A: 128 × (32 + 8) halves, B: 32 × (64 + 8) halves, two stages.
    assert kernel.shared_bytes == 2 * (128 * 40 + 32 * 72) * 2


def test_swizzle_permutes_the_shared_chunks_instead_of_padding():
    padded, swizzled = tensorcore(), tensorcore(swizzle=True, shared_pad=0)
    assert swizzled.kernels[0].shared_bytes == 3 * (128 * 32 + 32 * 128) * 2  # no padding
    assert padded.kernels[0].shared_bytes == 3 * (128 * 40 + 32 * 136) * 2
    # Both the cp.async stores and ldmatrix's addresses XOR the 16-byte chunk with the row.
    copies = [line for line in swizzled.cuda.splitlines() if "ptx_cp_async_legacy_cg_16_2_2(buf" in line]
    reads = [line for line in swizzled.cuda.splitlines() if "__cvta_generic_to_shared((&(((half*)buf" in line]
    assert copies and reads and all("^" in line for line in copies + reads)
    assert "^" not in "".join(line for line in padded.cuda.splitlines() if "ptx_cp_async_legacy_cg" in line)


def test_tensor_core_without_pipeline_has_no_cp_async():
    cuda = tensorcore(stages=1, async_copy=False).cuda
    assert "cp.async" not in cuda and "mma.sync" in cuda


# -- the verifier ---------------------------------------------------------------------


@pytest.mark.parametrize("build_, knobs, match, named", [
    (simt, dict(block_m=64, warp_m=128, thread_m=16), "warp tile does not divide", ("block_m", "warp_m")),
    (simt, dict(thread_m=4), "A warp has 32 threads", ("warp_m", "warp_n", "thread_m", "thread_n")),
    (simt, dict(shared_pad=2), "not a multiple of 4", ("fetch_vector", "shared_pad")),
    (simt, dict(transpose_a=False, block_k=4, fetch_vector=4, read_vector=1, shared_pad=1),
     "fetch_vector = 4", ("fetch_vector", "shared_pad")),
    (simt, dict(stages=1), "needs a pipeline", ("async_copy", "stages")),
    (simt, dict(thread_n=2, warp_n=16, read_vector=2, store_vector=4), "store_vector = 4",
     ("store_vector", "thread_n")),
    (simt, dict(split_k=16, block_k=32), "split_k × block_k = 16 × 32 does not divide k = 256",
     ("split_k", "block_k")),
    (tensorcore, dict(block_n=64, warp_n=128), "warp tile does not divide", ("block_n", "warp_n")),
    (tensorcore, dict(stages=1), "needs a pipeline", ("async_copy", "stages")),
    (tensorcore, dict(swizzle=True), "shared_pad = 0", ("swizzle", "shared_pad", "block_k")),
    (tensorcore, dict(swizzle=True, shared_pad=0, block_k=16), "block_k ≥ 32", ("swizzle", "shared_pad", "block_k")),
    (tensorcore, dict(block_m=32, block_n=32, warp_m=16, warp_n=16, block_k=16), "not a multiple of the",
     ("block_m", "block_n", "block_k", "warp_m", "warp_n")),
])
def test_knobs_that_cannot_work_are_refused_before_compiling(build_, knobs, match, named):
    with pytest.raises(InvalidKnobs, match=match) as error:
        build_(**knobs)
    assert error.value.knobs == named


def test_tensor_cores_refuse_float32_and_shapes_the_intrinsic_cannot_tile():
    with pytest.raises(InvalidKnobs, match="float16 or bfloat16"):
        tensorcore(FP32)
    with pytest.raises(InvalidKnobs, match=r"16 × 16 × 16 tiles .* m = 200"):
        tensorcore(Matmul(m=200, n=256, k=256, dtype="float16"))
    with pytest.raises(InvalidKnobs, match="for float16 inputs use the tensor-core template"):
        simt(FP16)


@pytest.mark.parametrize("template", ["matmul", "matmul_tensorcore"])
def test_templates_that_write_float32_sums_refuse_c_in_the_inputs_type(template):
    spec = Spec(template, Matmul(m=256, n=256, k=256, dtype="float16", out_dtype="float16"),
                get_template(template).knobs())
    with pytest.raises(InvalidKnobs, match=f"The {template} template writes C in float32") as error:
        build(spec, "h100")
    assert "\n" not in str(error.value)


def test_static_shared_memory_over_48_kb_points_to_dynamic_allocation():
    # 3 stages × 2 tiles × 16 × 132 floats = 50,688 bytes > 49,152.
    with pytest.raises(InvalidKnobs, match=r"50,688 bytes .* statically .* dynamic_shared: up to 232,448") as error:
        simt(stages=3, dynamic_shared=False)
    assert "dynamic_shared" in error.value.knobs and "stages" in error.value.knobs


def test_dynamic_shared_memory_over_the_opt_in_limit_is_refused():
    # 5 stages × 64 × (256 + 4 + 256 + 4) floats = 665,600 bytes > 227 KB.
    big = Matmul(m=512, n=512, k=512)
    with pytest.raises(InvalidKnobs, match=r"665,600 bytes .* 232,448 bytes a block may opt in to dynamically"):
        simt(big, block_m=256, block_n=256, block_k=64, warp_m=64, warp_n=64, thread_m=8, thread_n=16, stages=5)


# -- compiled code (the bfloat16 script run standalone: tests/test_export.py) --------------


COMPILES = pytest.mark.skipif(binary_compiler() is None,
                              reason="neither NVRTC with the pip disassembler nor nvcc (CUDA toolkit) is installed")

# The matmul_async settings whose kernels must compile without spills: name -> (workload, knobs, kernels).
SIMT = {"async-fp32": (FP32, {}, 1),
        "async-fp32-register-double-buffer": (FP32, {"register_double_buffer": True}, 1),
        "async-fp32-register-double-buffer-k32-4-stages": (FP32, {"register_double_buffer": True, "stages": 4,
                                                                  "block_k": 32}, 1),
        "async-fp32-register-double-buffer-16x8": (FP32, {"register_double_buffer": True, "block_n": 256,
                                                          "warp_m": 64, "warp_n": 64, "thread_m": 16}, 1),
        "async-fp32-split-k": (FP32_1024, {"split_k": 2, "register_double_buffer": True}, 2)}


@pytest.fixture(scope="module")
def simt_compiled():
    """SIMT's settings built and compiled as the Resources panel compiles them (compile_binary), together: one
    source per preamble (compiled_together.py; ptxas allocates each kernel alone all the same). Their builds,
    and the registers and spill bytes of each kernel, named ``<setting>_<kernel>``."""
    builds = {name.replace("-", "_"): simt(workload, **knobs) for name, (workload, knobs, _) in SIMT.items()}
    first = next(iter(builds.values()))
    binaries = [compile_binary(dataclasses.replace(first, cuda=source)) for source in one_source_per_preamble(builds)]
    registers = {kernel: used for binary in binaries for kernel, used in binary.registers.items()}
    spills = {kernel: spilled for binary in binaries for kernel, spilled in binary.spill_bytes.items()}
    assert registers.keys() == spills.keys() == {f"{name}_{kernel.name}" for name, built in builds.items()
                                                 for kernel in built.kernels}
    return builds, registers, spills


@COMPILES
@pytest.mark.parametrize("name", SIMT)
def test_the_generated_cuda_compiles_for_sm_90a_without_spills(name, simt_compiled):
    """No local memory: the register tiles (both copies with register_double_buffer, indexed by
    k % 2 in a loop only nvcc unrolls) must all stay in registers."""
    builds, registers, spills = simt_compiled
    kernels = [f"{name.replace('-', '_')}_{kernel.name}" for kernel in builds[name.replace("-", "_")].kernels]
    assert len(kernels) == SIMT[name][2]
    assert all(0 < registers[kernel] <= 255 for kernel in kernels) and not any(spills[kernel] for kernel in kernels)


@COMPILES
@pytest.mark.parametrize("make", [
    # 4096³: the preset modern-tensorcore-fp16-4096, whose cubin the analysis tabs test reads (tests/test_app.py).
    lambda: tensorcore(FP16_4096),
    lambda: tensorcore(BF16),
], ids=["tensorcore-fp16", "tensorcore-bf16"])
def test_the_tensor_core_cuda_compiles_for_sm_90a_without_spills(make):
    binary = compile_binary(make())
    assert len(binary.registers) == 1
    assert all(0 < r <= 255 for r in binary.registers.values()) and set(binary.spill_bytes.values()) <= {0}


def test_pass_options_follow_the_schedule():
    assert pass_config(simt(stages=2, async_copy=False).schedule_mod) == {}
    assert pass_config(simt().schedule_mod) == {"tirx.use_async_copy": True, "tirx.disable_storage_rewrite": True}
    # Warp memory (tensor-core fragments) needs StorageRewrite.
    assert pass_config(tensorcore().schedule_mod) == {"tirx.use_async_copy": True}


def test_tolerance_allows_one_rounding_to_the_input_type():
    # ε16 / ε32 = 2^13 and εbf16 / ε32 = 2^16 float32 terms on top of the K terms summed.
    assert Matmul(k=64).reduction_length() == 64
    assert Matmul(k=64, dtype="float16").reduction_length() == 64 + 2**13
    assert Matmul(k=64, dtype="bfloat16").reduction_length() == 64 + 2**16
    a, b = Matmul(m=4, n=4, k=8, dtype="bfloat16").random_inputs()
    assert a.dtype.name == "bfloat16" and b.shape == (8, 4)


# -- on a GPU -------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    Spec("matmul_async", FP32, MatmulAsyncKnobs()),
    Spec("matmul_async", FP32, MatmulAsyncKnobs(stages=4, block_k=8, transpose_a=False, read_vector=1)),
    Spec("matmul_async", FP32, MatmulAsyncKnobs(stages=2, async_copy=False, dynamic_shared=False)),
    Spec("matmul_tensorcore", FP16, MatmulTensorCoreKnobs()),
    Spec("matmul_tensorcore", BF16, MatmulTensorCoreKnobs(stages=4, block_k=16, block_n=64, warp_n=32)),
    get_preset("modern-async-1024").spec,
    Spec("matmul_async", FP32, MatmulAsyncKnobs(register_double_buffer=True)),
    Spec("matmul_async", FP32, MatmulAsyncKnobs(register_double_buffer=True, stages=2, block_k=8, thread_m=16,
                                                warp_m=64, warp_n=64, block_n=256)),
    Spec("matmul_async", FP32, MatmulAsyncKnobs(register_double_buffer=True, stages=1, async_copy=False,
                                                dynamic_shared=False)),
    Spec("matmul_async", FP32, MatmulAsyncKnobs(store_vector=4)),
    Spec("matmul_async", FP32_1024, MatmulAsyncKnobs(split_k=2)),
    Spec("matmul_async", FP32_1024, MatmulAsyncKnobs(split_k=4, register_double_buffer=True, block_m=64,
                                                     block_n=64, warp_m=32, warp_n=64, block_k=32, stages=4)),
], ids=["async-default", "async-4-stages-no-transpose", "sync-2-stages", "tc-fp16", "tc-bf16-4-stages",
        "preset-async-1024", "async-register-double-buffer", "async-register-double-buffer-16x8-2-stages",
        "sync-register-double-buffer-1-stage", "async-store-vector-4", "async-1024-split-k-2",
        "async-1024-split-k-4-register-double-buffer"])
def test_the_kernel_matches_numpy_on_the_gpu(spec, run_on_gpu):
    got, expected = run_on_gpu(build(spec))
    tolerance = 4 * np.finfo(np.float32).eps * spec.workload.reduction_length() * max(1.0, np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance)


@pytest.mark.gpu
def test_split_k_is_measured_from_a_cuda_graph_too():
    """The partial sums live in a workspace TVM allocates per call: replayed from a captured CUDA
    graph, both kernels must still run and give the right output (the graph check compares it)."""
    pytest.importorskip("torch")
    from explorer.measure import MeasureSettings, measure, shutdown

    try:
        m = measure(Spec("matmul_async", FP32_1024, MatmulAsyncKnobs(split_k=2)), settings=MeasureSettings(repeats=3))
    finally:
        shutdown()
    assert m.correct, m.check.describe()
    assert m.graph is not None and m.graph_us > 0

