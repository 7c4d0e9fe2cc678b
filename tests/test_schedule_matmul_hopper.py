"""The Hopper GEMM template (TIRx: TMA, mbarriers, wgmma, warp specialization): the CUDA it
generates, the cubin NVRTC makes of it, the verifier's refusals, export, and on an H100 the
results against NumPy."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import tvm

from explorer.analysis import sass
from explorer.build import Spec, build
from explorer.cli import main
from explorer.errors import InvalidKnobs
from explorer.export import snippet
from explorer.schedules.matmul_hopper import SUPPORTED_DTYPES, MatmulHopperKnobs, Plan, check_knobs
from explorer.workloads import Matmul

FP16 = Matmul(m=1024, n=1024, k=1024, dtype="float16")
BF16 = Matmul(m=1024, n=1024, k=1024, dtype="bfloat16")
FP16_OUT = Matmul(m=1024, n=1024, k=1024, dtype="float16", out_dtype="float16")
BF16_OUT = Matmul(m=1024, n=1024, k=1024, dtype="bfloat16", out_dtype="bfloat16")


def hopper(workload=FP16, **knobs):
    return build(Spec("matmul_hopper", workload, MatmulHopperKnobs(**knobs)), "h100")


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


@pytest.mark.parametrize("out_dtype,stores", [("float32", "st.global.v2.f32"), ("float16", "cvt.rn.f16x2.f32")])
def test_exported_script_prints_the_kernel_without_a_gpu(tmp_path, out_dtype, stores):
    path = tmp_path / "hopper.py"
    path.write_text(snippet(Spec("matmul_hopper", Matmul(m=256, n=256, k=256, dtype="float16", out_dtype=out_dtype),
                                 MatmulHopperKnobs()), title="hopper"))
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "CUDA_VISIBLE_DEVICES": ""})
    assert run.returncode == 0, run.stderr[-2000:]
    assert "@T.prim_func" in run.stdout and "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16" in run.stdout
    assert stores in run.stdout  # the script's kernel builds the same epilogue


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


def hopper_gpu() -> bool:
    device = tvm.cuda(0)
    return device.exist and device.compute_version == "9.0"


@pytest.mark.gpu
@pytest.mark.skipif(not hopper_gpu(), reason="needs a Hopper GPU (sm_90a)")
@pytest.mark.parametrize("case", sorted(GPU_CASES))
def test_the_kernel_matches_numpy_on_the_gpu(case, run_on_gpu):
    workload, knobs = GPU_CASES[case]
    got, expected = run_on_gpu(hopper(workload, **knobs))
    tolerance = 4 * np.finfo(np.float32).eps * workload.reduction_length() * max(1.0, np.abs(expected).max())
    np.testing.assert_allclose(got, expected, rtol=0, atol=tolerance)


@pytest.mark.gpu
@pytest.mark.skipif(not hopper_gpu(), reason="needs a Hopper GPU (sm_90a)")
@pytest.mark.parametrize("workload", [FP16, FP16_OUT], ids=["c-float32", "c-float16"])
def test_the_exported_script_checks_and_times_the_kernel(tmp_path, workload):
    path = tmp_path / "hopper.py"
    path.write_text(snippet(Spec("matmul_hopper", workload, MatmulHopperKnobs()), title="hopper"))
    run = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "correct, median" in run.stdout


def test_a_sweep_without_a_gpu_says_it_needs_measurement(capsys, monkeypatch):
    monkeypatch.setattr("explorer.measure.gpu_measurer", lambda target, remote: None)
    assert main(["sweep", "matmul_hopper", "--grid", "stages=2,3"]) == 2
    assert "sweep matmul_hopper on a GPU" in capsys.readouterr().err
