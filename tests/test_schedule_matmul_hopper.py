"""The Hopper GEMM template (TIRx: TMA, mbarriers, wgmma, warp specialization, clusters with
TMA multicast): the CUDA it generates, the cubin NVRTC makes of it, the verifier's refusals,
export, and on an H100 the results against NumPy."""
import os
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import tvm
from exported import run_standalone
from hopper_here import hopper_gpu
from tvm.script import tirx as T

from explorer.analysis import sass
from explorer.build import Spec, build
from explorer.cli import main
from explorer.errors import InvalidKnobs
from explorer.export import snippet
from explorer.measure import MeasureSettings, measure
from explorer.schedules import matmul_hopper
from explorer.schedules.matmul_hopper import SUPPORTED_DTYPES, MatmulHopperKnobs, Plan, check_knobs, tile_origin
from explorer.workloads import Matmul

FP16 = Matmul(m=1024, n=1024, k=1024, dtype="float16")
BF16 = Matmul(m=1024, n=1024, k=1024, dtype="bfloat16")
FP16_OUT = Matmul(m=1024, n=1024, k=1024, dtype="float16", out_dtype="float16")
BF16_OUT = Matmul(m=1024, n=1024, k=1024, dtype="bfloat16", out_dtype="bfloat16")


def hopper(workload=FP16, **knobs):
    return build(Spec("matmul_hopper", workload, MatmulHopperKnobs(**knobs)), "h100")


def launch_params(built) -> tuple[str, ...]:
    """The launch parameters TVM's runtime reads for the kernel (a clusterCtaIdx tag makes it
    launch the grid in clusters, through cuLaunchKernelEx)."""
    (func,) = built.device_mod.functions.values()
    return tuple(str(tag) for tag in func.attrs["tirx.kernel_launch_params"])


def wgmma_shapes(cuda: str) -> set[str]:
    return set(re.findall(r"wgmma\.mma_async\.sync\.aligned\.(m\d+n\d+k\d+\.f32\.\w+\.\w+)", cuda))


def test_default_kernel_uses_tma_mbarriers_and_wgmma():
    cuda = hopper().cuda
    assert "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes" in cuda
    assert "mbarrier.try_wait" in cuda or "mbarrier_wait" in cuda
    assert "mbarrier.arrive.expect_tx" in cuda
    assert wgmma_shapes(cuda) == {"m64n256k16.f32.f16.f16"}
    assert "setmaxnreg.dec.sync.aligned.u32" in cuda and "setmaxnreg.inc.sync.aligned.u32" in cuda
    assert "__grid_constant__ CUtensorMap" in cuda  # the TMA descriptors are kernel parameters
    assert "st.global.v2.f32" in cuda  # the epilogue stores neighbouring accumulators in pairs
    assert "float* __restrict__ C_ptr" in cuda and "cvt.rn" not in cuda  # C stays float32 by default


def test_bfloat16_changes_only_the_operand_type():
    assert wgmma_shapes(hopper(BF16).cuda) == {"m64n256k16.f32.bf16.bf16"}


@pytest.mark.parametrize("dtype,c_type,pack", [("float16", "half", "cvt.rn.f16x2.f32"),
                                               ("bfloat16", "nv_bfloat16", "cvt.rn.bf16x2.f32")])
def test_c_in_the_inputs_type_is_rounded_and_stored_in_packed_pairs(dtype, c_type, pack):
    cuda = hopper(Matmul(m=1024, n=1024, k=1024, dtype=dtype, out_dtype=dtype)).cuda
    assert f"{c_type}* __restrict__ C_ptr" in cuda
    assert pack in cuda and "st.global.b32" in cuda and "st.global.v2.f32" not in cuda
    # The multiplies still sum in float32.
    assert wgmma_shapes(cuda) == {f"m64n256k16.f32.{SUPPORTED_DTYPES[dtype]}.{SUPPORTED_DTYPES[dtype]}"}


@pytest.mark.parametrize("knobs,threads,blocks", [
    ({}, 384, 32),  # 2 consumers + the producer; 8 × 4 tiles of 128 × 256
    ({"warp_specialize": False}, 256, 32),
    ({"consumers": 1, "block_n": 128}, 256, 64),
    ({"persistent": True, "block_m": 64, "block_n": 64, "consumers": 1}, 256, 132),  # 256 tiles on 132 SMs
])
def test_launch_follows_the_knobs(knobs, threads, blocks):
    (kernel,) = hopper(**knobs).kernels
    assert (kernel.threads_per_block, kernel.blocks) == (threads, blocks)
    # The pool the kernel declares: its A and B buffers and two mbarriers per stage.
    assert kernel.shared_bytes == check_knobs(FP16, MatmulHopperKnobs(**knobs)).shared_bytes


def test_without_warp_specialization_no_registers_move():
    cuda = hopper(warp_specialize=False).cuda
    assert "setmaxnreg" not in cuda.split("extern \"C\" __global__")[-1]


def test_plan_hand_computed():
    plan = Plan("float16", 4096, 4096, 4096, MatmulHopperKnobs())
    assert plan.m_tiles == 1 and plan.accumulators == 128  # 64 × 256 per warpgroup: 256 / 2 per thread
    assert plan.stage_bytes == (128 + 256) * 64 * 2 == 49152
    assert plan.shared_bytes == 4 * (49152 + 16)
    assert plan.atom == 64 and plan.tiles == (32, 16) and plan.blocks == 512
    assert Plan("float16", 4096, 4096, 4096, MatmulHopperKnobs(persistent=True)).blocks == 132


@pytest.mark.parametrize("workload,knobs,match,named", [
    (Matmul(m=1024, n=1024, k=1024), {}, "float16 or bfloat16", ()),
    (FP16, {"block_m": 64, "consumers": 2}, "64-row", ("block_m", "consumers")),
    (Matmul(m=1000, n=1024, k=1024, dtype="float16"), {}, "partial tiles", ("block_m",)),
    (FP16, {"block_k": 32}, "128B swizzle", ("block_k", "swizzle")),
    (FP16, {"consumers": 1, "block_m": 128, "block_n": 256}, "256 float32 accumulators",
     ("block_m", "block_n", "consumers")),
    (FP16, {"block_k": 128, "stages": 6}, "shared memory", ("stages", "block_m", "block_n", "block_k")),
])
def test_combinations_that_cannot_work_are_refused(workload, knobs, match, named):
    with pytest.raises(InvalidKnobs, match=match) as error:
        check_knobs(workload, MatmulHopperKnobs(**knobs))
    assert error.value.knobs == named and "\n" not in str(error.value)


def test_targets_without_wgmma_are_refused():
    with pytest.raises(InvalidKnobs, match="sm_90a"):
        build(Spec("matmul_hopper", FP16, MatmulHopperKnobs()), "a100")
    assert build(Spec("matmul_hopper", FP16, MatmulHopperKnobs()), "sm_90").target.arch == "sm_90a"


@pytest.mark.skipif(bool(sass.missing_tools()), reason="NVRTC or nvdisasm is not installed")
@pytest.mark.parametrize("workload,knobs", [(FP16, {}), (FP16, {"warp_specialize": False, "persistent": True}),
                                            (FP16, {"swizzle": "64B", "consumers": 1, "block_n": 128, "stages": 3}),
                                            (BF16_OUT, {"persistent": True})])
def test_nvrtc_compiles_it_for_sm_90a_without_spills(workload, knobs):
    (kernel,) = sass.analyze_source(hopper(workload, **knobs).cuda, "sm_90a").kernels
    assert kernel.mix.hgmma > 0 and kernel.mix.tma > 0 and kernel.mix.hmma == 0  # wgmma and TMA in the machine code
    assert kernel.mix.spill_bytes == 0 and kernel.stack_bytes == 0 and kernel.registers <= 255


def test_cli_shows_the_cuda(capsys):
    assert main(["show", "matmul_hopper", "--view", "cuda"]) == 0
    assert "wgmma.mma_async" in capsys.readouterr().out


# The exported scripts of the tests below that run without a GPU: name -> spec.
EXPORTED = {"float32": Spec("matmul_hopper", Matmul(m=256, n=256, k=256, dtype="float16"), MatmulHopperKnobs()),
            "float16": Spec("matmul_hopper", Matmul(m=256, n=256, k=256, dtype="float16", out_dtype="float16"),
                            MatmulHopperKnobs()),
            "cluster": Spec("matmul_hopper", Matmul(m=256, n=256, k=256, dtype="float16"),
                            MatmulHopperKnobs(cluster=2, persistent=True))}


@pytest.fixture(scope="module")
def exported_runs(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    """EXPORTED's scripts, each in its own folder, run one after the other in one fresh interpreter that
    cannot import ``explorer`` and sees no GPU (a process that imports TVM for each cost a second of CPU):
    name -> its run."""
    paths = []
    for name, spec in EXPORTED.items():
        paths.append(tmp_path_factory.mktemp(name) / ("cluster.py" if name == "cluster" else "hopper.py"))
        paths[-1].write_text(snippet(spec, title=name if name == "cluster" else "hopper"))
    runs = run_standalone(*paths, env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    return dict(zip(EXPORTED, runs, strict=True))


@pytest.mark.parametrize("out_dtype,stores", [("float32", "st.global.v2.f32"), ("float16", "cvt.rn.f16x2.f32")])
def test_exported_script_prints_the_kernel_without_a_gpu(exported_runs, out_dtype, stores):
    run = exported_runs[out_dtype]
    assert run.returncode == 0, run.stderr[-2000:]
    assert "@T.prim_func" in run.stdout and "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in run.stdout
    assert stores in run.stdout  # the script's kernel builds the same epilogue


# -- clusters of two blocks sharing B's tile --------------------------------------------

MULTICAST = "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster"
CLUSTER_VARIANTS = [{}, {"warp_specialize": False}, {"persistent": True},
                    {"persistent": True, "warp_specialize": False}]
CLUSTER_IDS = ["warp-specialized", "no-producer", "persistent", "persistent-no-producer"]


def kernel_body(cuda: str) -> str:
    return cuda.split('extern "C" __global__')[-1]


@pytest.mark.parametrize("knobs", CLUSTER_VARIANTS, ids=CLUSTER_IDS)
def test_a_cluster_multicasts_half_of_b_into_both_blocks(knobs):
    built = hopper(cluster=2, **knobs)
    (kernel,) = built.kernels
    # The grid is launched in clusters of two blocks (TVM's runtime reads the clusterCtaIdx tag).
    assert kernel.cluster == (2, 1, 1) and kernel.blocks % 2 == 0
    assert launch_params(built)[0] == "clusterCtaIdx.x" and "%cluster_ctarank" in built.cuda
    body = kernel_body(built.cuda)
    # Each load: A alone, and B's 4 column chunks each as half its rows (a 64 × 32 box) to ctaMask 0b11.
    loads = body.count("complete_tx__bytes(")
    assert loads > 0 and body.count("complete_tx__bytes_multicast__cluster(") == body.count("(ushort)3);") == 4 * loads
    assert MULTICAST in built.cuda
    assert "B.data, 1024, 1024, 2048, 64, 32, 1, 1, 0, 3, 0, 0" in built.tensorir
    # Each full barrier expects the whole stage: A's 16 KB and both halves of B's 32 KB.
    assert "(uint)49152);" in body


@pytest.mark.parametrize("knobs", CLUSTER_VARIANTS, ids=CLUSTER_IDS)
def test_a_buffer_is_refilled_only_once_both_blocks_consumers_are_done(knobs):
    cuda = hopper(cluster=2, **knobs).cuda
    body = kernel_body(cuda)
    # The empty barriers count both blocks' 256 consumer threads; one lane per warp arrives for
    # its 32 threads on the other block's barrier, at the address mapa gives there.
    assert body.count("(uint)512);") == 4 and "(uint)256);" not in body
    assert "mapa.shared::cluster.u32" in cuda and "mbarrier.arrive.shared::cluster.b64 _, [%0], %1;" in cuda
    assert body.count("% 32) == 0)") == 2 and body.count("_arrive_shared__cluster_b64(peer_ptr") == 2
    assert "^ 1)));" in body  # the other block: rank 1 - rank
    # The barriers are made visible to the cluster and both blocks meet before any copy or
    # remote arrive, and again before they exit.
    assert "fence.mbarrier_init.release.cluster;" in cuda
    assert "barrier.cluster.arrive;" in cuda and "barrier.cluster.wait;" in cuda
    assert body.count("tvm_builtin_ptx_barrier_cluster_arrive_cluster_arrive();") == 2
    assert body.count("tvm_builtin_ptx_barrier_cluster_wait_cluster_wait();") == 2
    first_wait = body.index("tvm_builtin_ptx_barrier_cluster_wait_cluster_wait();")
    assert body.index("mbarrier_init_init_shared_b64(") < body.index("fence_mbarrier_init") < first_wait
    assert first_wait < min(body.index("_multicast__cluster("), body.index("_mapa_"))
    assert body.rstrip().endswith("tvm_builtin_ptx_barrier_cluster_wait_cluster_wait();\n}")


def test_without_a_cluster_the_kernel_is_unchanged():
    built = hopper(cluster=1)
    assert built.cuda == hopper().cuda and built.kernels[0].cluster == (1, 1, 1)
    assert "clusterCtaIdx.x" not in launch_params(built)
    for cluster_only in ("multicast", "mapa", "barrier.cluster", "cluster_ctarank", "fence.mbarrier_init",
                         "mbarrier.arrive.shared::cluster"):
        assert cluster_only not in built.cuda
    assert kernel_body(built.cuda).count("(uint)256);") == 4  # one block's consumer threads
    assert "B.data, 1024, 1024, 2048, 64, 64, 1, 1, 0, 3, 0, 0" in built.tensorir  # whole block_k rows


@pytest.mark.parametrize("tiles_m,tiles_n,grid", [
    (8, 4, 32),  # one tile per block
    (10, 3, 30),  # a raster group of 8 rows and one of 2
    (32, 16, 132),  # persistent: 512 tiles, 132 blocks
    (14, 10, 132),  # persistent, the last round partly filled
    (2, 5, 10),
])
def test_the_two_blocks_of_a_cluster_hold_neighbouring_rows_of_one_tile_column(tiles_m, tiles_n, grid):
    def origin(tile):
        return tuple(int(v) for v in tile_origin(tile, tiles_m, tiles_n))

    tiles = tiles_m * tiles_n
    visited = []
    for first in range(0, grid, 2):
        for tile in range(first, tiles, grid):  # the tiles block `first` visits; its pair takes the next ones
            (row, column), pair = origin(tile), origin(tile + 1)
            assert pair == (row + 1, column)
            visited += [(row, column), pair]
    assert sorted(visited) == [(r, c) for r in range(tiles_m) for c in range(tiles_n)]


def test_plan_of_a_cluster():
    plan = Plan("float16", 4096, 4096, 4096, MatmulHopperKnobs(cluster=2, persistent=True))
    assert plan.b_rows == 32 and plan.blocks == 132  # half of block_k; 66 clusters
    assert plan.stage_bytes == 49152 and plan.shared_bytes == 4 * (49152 + 16)  # as without a cluster
    assert Plan("float16", 4096, 4096, 4096, MatmulHopperKnobs()).b_rows == 64


@pytest.mark.parametrize("workload,knobs", [
    (Matmul(m=384, n=1024, k=1024, dtype="float16"), {"cluster": 2}),
    (Matmul(m=384, n=1024, k=1024, dtype="float16"), {"cluster": 2, "persistent": True}),
    (Matmul(m=128, n=1024, k=1024, dtype="float16"), {"cluster": 2, "warp_specialize": False}),
    (Matmul(m=768, n=1024, k=1024, dtype="float16"), {"cluster": 2, "block_m": 256, "block_n": 128}),
])
def test_a_cluster_needs_an_even_number_of_tile_rows(workload, knobs):
    with pytest.raises(InvalidKnobs, match="number of tile rows must be even") as error:
        check_knobs(workload, MatmulHopperKnobs(**knobs))
    assert error.value.knobs == ("cluster", "block_m") and "\n" not in str(error.value)
    rows = workload.m // knobs.get("block_m", 128)
    assert f"= {rows} (choose another block_m, or cluster = 1)." in str(error.value)


def test_a_cluster_s_half_of_b_must_be_whole_swizzle_patterns(monkeypatch):
    # Every block_k offered splits into halves of whole 8-row patterns ...
    assert all(k // 2 % matmul_hopper.SWIZZLE_ATOM_ROWS == 0 for k in MatmulHopperKnobs.field("block_k").choices)
    # ... so the refusal is seen only with a pattern taller than the half.
    monkeypatch.setattr(matmul_hopper, "SWIZZLE_ATOM_ROWS", 64)
    with pytest.raises(InvalidKnobs, match="32 of B's 64 rows, which must be a whole number of 64-row") as error:
        check_knobs(FP16, MatmulHopperKnobs(cluster=2))
    assert error.value.knobs == ("cluster", "block_k") and "\n" not in str(error.value)


@pytest.mark.skipif(bool(sass.missing_tools()), reason="NVRTC or nvdisasm is not installed")
@pytest.mark.parametrize("knobs", CLUSTER_VARIANTS, ids=CLUSTER_IDS)
def test_the_cluster_kernel_compiles_for_sm_90a_without_spills(knobs):
    # NVRTC's cubin, the one the SASS view shows (ptxas, inside NVRTC, checks every PTX line); the machine-code
    # test below disassembles the same kernels. nvcc -O3 gives the same registers (168 warp-specialized, 154 not).
    (kernel,) = sass.analyze_source(hopper(cluster=2, **knobs).cuda, "sm_90a").kernels
    assert 0 < kernel.registers <= 255 and kernel.mix.spill_bytes == 0 and kernel.stack_bytes == 0


@pytest.mark.skipif(bool(sass.missing_tools()), reason="NVRTC or nvdisasm is not installed")
@pytest.mark.parametrize("knobs", [{}, {"warp_specialize": False, "persistent": True}], ids=["default", "persistent"])
def test_the_cluster_kernel_s_machine_code_multicasts_and_arrives_across_blocks(knobs):
    (kernel,) = sass.analyze_source(hopper(cluster=2, **knobs).cuda, "sm_90a").kernels
    opcodes = Counter(ins.opcode for ins in kernel.instructions)
    assert opcodes["UTMALDG.2D.MULTICAST"] > 0 and opcodes["UTMALDG.2D"] > 0  # B's half to both blocks, A alone
    assert opcodes["UCGABAR_ARV"] == opcodes["UCGABAR_WAIT"] == 2  # barrier.cluster after the init, before exit
    assert any(op.startswith("SYNCS.ARRIVE.TRANS64.RED") for op in opcodes)  # the arrive on the other block
    assert kernel.mix.hgmma > 0 and kernel.mix.spill_bytes == 0 and kernel.stack_bytes == 0
    (plain,) = sass.analyze_source(hopper(**knobs).cuda, "sm_90a").kernels
    assert not {op for ins in plain.instructions for op in [ins.opcode]
                if op.startswith(("UCGABAR", "SYNCS.ARRIVE.TRANS64.RED")) or "MULTICAST" in op}


def test_cli_shows_the_cluster_kernel_s_cuda(capsys):
    assert main(["show", "matmul_hopper", "--set", "cluster=2", "--view", "cuda"]) == 0
    assert MULTICAST in capsys.readouterr().out


def test_exported_cluster_script_builds_the_same_cuda(exported_runs):
    run = exported_runs["cluster"]
    assert run.returncode == 0, run.stderr[-2000:]
    assert "T.cta_id_in_cluster([2])" in run.stdout
    assert build(EXPORTED["cluster"], "h100").cuda.strip() in run.stdout  # the script's kernel is this one, to the byte


# -- on an H100 -----------------------------------------------------------------------

GPU_CASES = {
    "default-fp16": (FP16, {}),
    "default-bf16": (BF16, {}),
    "no-warp-specialization": (FP16, {"warp_specialize": False}),
    "persistent": (Matmul(m=2048, n=2048, k=512, dtype="float16"), {"persistent": True, "block_n": 128}),
    "one-consumer-64B-swizzle": (FP16, {"consumers": 1, "block_n": 128, "swizzle": "64B", "stages": 3}),
    "32B-swizzle-k32": (BF16, {"swizzle": "32B", "block_k": 32, "block_n": 64, "stages": 6}),
    "256-rows-2-stages": (Matmul(m=512, n=768, k=256, dtype="float16"), {"block_m": 256, "block_n": 128,
                                                                         "stages": 2}),
    "c-in-float16": (FP16_OUT, {}),
    "c-in-bfloat16-persistent": (BF16_OUT, {"persistent": True, "consumers": 1, "block_n": 128}),
}


@pytest.mark.gpu
@pytest.mark.skipif(not hopper_gpu(), reason="needs a Hopper GPU (sm_90a)")
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_the_kernel_matches_numpy_on_the_gpu(case, run_on_gpu):
    workload, knobs = GPU_CASES[case]
    got, expected = run_on_gpu(hopper(workload, **knobs))
    tolerance = 4 * np.finfo(np.float32).eps * workload.reduction_length() * max(1.0, np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance)


# Clusters of two blocks, run in the measuring worker: a kernel whose barriers never complete
# is stopped at the time limit (KernelTimeout, the worker restarted) instead of hanging the run.
CLUSTER_GPU_CASES = {
    "cluster-warp-specialized": (FP16, {"cluster": 2}),
    "cluster-no-warp-specialization": (FP16, {"cluster": 2, "warp_specialize": False}),
    "cluster-persistent": (Matmul(m=2048, n=2048, k=512, dtype="float16"),
                           {"cluster": 2, "persistent": True, "block_n": 128}),  # 256 tiles on 132 blocks
    "cluster-persistent-no-warp-specialization": (Matmul(m=2048, n=2048, k=512, dtype="float16"),
                                                  {"cluster": 2, "persistent": True, "block_n": 128,
                                                   "warp_specialize": False}),
    "cluster-persistent-fewer-tiles-than-sms": (FP16, {"cluster": 2, "persistent": True}),  # 32 blocks
    "cluster-raster-groups-of-8-and-2-rows": (Matmul(m=1280, n=512, k=256, dtype="float16"),
                                              {"cluster": 2, "block_n": 128}),
    "cluster-256-rows-2-stages": (Matmul(m=512, n=768, k=256, dtype="float16"),
                                  {"cluster": 2, "block_m": 256, "block_n": 128, "stages": 2}),
    "cluster-32B-swizzle-k32-c-in-bfloat16": (BF16_OUT, {"cluster": 2, "swizzle": "32B", "block_k": 32,
                                                         "block_n": 64, "stages": 6, "warp_specialize": False}),
}
CHECK_ONLY = MeasureSettings(time_limit_s=20, repeats=1, roofline=False, cuda_graph=False)


@pytest.mark.parametrize("case", sorted(CLUSTER_GPU_CASES))
def test_every_cluster_setting_checked_on_the_gpu_builds_here(case):
    workload, knobs = CLUSTER_GPU_CASES[case]
    assert hopper(workload, **knobs).kernels[0].cluster == (2, 1, 1)


def cluster_ranks():
    """Parsed when a test asks for it, not when each test process collects this file."""

    @T.prim_func
    def cluster_ranks(A: T.Buffer((8,), "int32")):
        T.device_entry()
        bx = T.cta_id([8])
        rank = T.cta_id_in_cluster([2])
        tx = T.thread_id([32])
        if tx == 0:
            A[bx] = T.cuda.mov_sreg(32, "cluster_nctarank") * 10 + rank

    return cluster_ranks


@pytest.mark.gpu
@pytest.mark.skipif(not hopper_gpu(), reason="needs a Hopper GPU (sm_90a)")
def test_tvm_launches_a_kernel_that_declares_a_cluster_in_clusters():
    # Launched without the cluster, every block would be alone in a cluster of 1 (10, 10, ...).
    executable = tvm.compile(tvm.IRModule({"main": cluster_ranks()}),
                             target=tvm.target.Target({"kind": "cuda", "arch": "sm_90a"}), tir_pipeline="tirx")
    out = tvm.runtime.tensor(np.zeros(8, "int32"), tvm.cuda(0))
    executable.jit()["main"](out)
    assert out.numpy().tolist() == [20, 21] * 4


@pytest.mark.gpu
@pytest.mark.skipif(not hopper_gpu(), reason="needs a Hopper GPU (sm_90a)")
@pytest.mark.parametrize("case", sorted(CLUSTER_GPU_CASES))
def test_the_cluster_kernel_matches_numpy_on_the_gpu(case, measuring_worker):
    workload, knobs = CLUSTER_GPU_CASES[case]
    result = measure(Spec("matmul_hopper", workload, MatmulHopperKnobs(**knobs)), settings=CHECK_ONLY)
    assert result.correct, result.check.describe()


@pytest.mark.gpu
@pytest.mark.skipif(not hopper_gpu(), reason="needs a Hopper GPU (sm_90a)")
@pytest.mark.parametrize("workload,knobs", [(FP16, {}), (FP16_OUT, {}), (FP16, {"cluster": 2, "persistent": True})],
                         ids=["c-float32", "c-float16", "cluster-persistent"])
def test_the_exported_script_checks_and_times_the_kernel(tmp_path, workload, knobs):
    path = tmp_path / "hopper.py"
    path.write_text(snippet(Spec("matmul_hopper", workload, MatmulHopperKnobs(**knobs)), title="hopper"))
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "correct, median" in run.stdout


def test_a_sweep_without_a_gpu_says_it_needs_measurement(capsys, monkeypatch):
    monkeypatch.setattr("explorer.measure.gpu_measurer", lambda target, remote: None)
    assert main(["sweep", "matmul_hopper", "--grid", "stages=2,3"]) == 2
    assert "sweep matmul_hopper on a GPU" in capsys.readouterr().err
