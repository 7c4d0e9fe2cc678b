"""The tensor-core roof: a wgmma chain (sm_90a) whose only work is tensor-core multiplies."""
import functools

import pytest
import tvm
from hopper_here import hopper_gpu

from explorer.analysis import sass
from explorer.measure.ceilings import CEILING_SETTINGS
from explorer.measure.tensor_roof import flops_per_block, measure_tensor_tflops, target_sm90a, wgmma_chain_module


@functools.cache  # the float16 chain is read twice: its instructions, then its cubin
def cuda(dtype: str) -> str:
    module = tvm.compile(wgmma_chain_module(dtype, blocks=4, iterations=8), target=target_sm90a(), tir_pipeline="tirx")
    return module.mod.imports[0].inspect_source()


def test_flops_hand_computed():
    # 2 warpgroups × 3 groups × 4 instructions × 2·64·256·16 FLOPs
    assert flops_per_block(3) == 2 * 3 * 4 * 2 * 64 * 256 * 16 == 12_582_912


@pytest.mark.parametrize("dtype,ptx", [("float16", "f16"), ("bfloat16", "bf16")])
def test_the_kernel_is_a_wgmma_chain(dtype, ptx):
    source = cuda(dtype)
    assert f"wgmma.mma_async.sync.aligned.m64n256k16.f32.{ptx}.{ptx}" in source
    assert "wgmma.wait_group.sync.aligned 1" in source  # one group in flight while the next is issued
    assert "cp.async" not in source and "mbarrier" not in source  # nothing but the multiplies


@pytest.mark.skipif(bool(sass.missing_tools()), reason="NVRTC or nvdisasm is not installed")
def test_nvrtc_compiles_it_without_spills():
    (kernel,) = sass.analyze_source(cuda("float16"), "sm_90a").kernels
    assert kernel.mix.hgmma > 0 and kernel.mix.spill_bytes == 0 and kernel.stack_bytes == 0


@pytest.mark.gpu
@pytest.mark.skipif(not hopper_gpu(), reason="needs a Hopper GPU (sm_90a)")
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_the_measured_peak_is_a_hopper_s(dtype):
    # The H100's dense fp16/bf16 peak with float32 accumulation is 989 TFLOP/s (SXM) at its boost
    # clock, 756 (PCIe); a chain that reached a third of it would not be measuring the tensor cores.
    assert 300 < measure_tensor_tflops(dtype, CEILING_SETTINGS, iterations=1024) < 1100


@pytest.mark.gpu
@pytest.mark.skipif(not hopper_gpu(), reason="needs a Hopper GPU (sm_90a)")
def test_the_ceilings_carry_the_tensor_peaks_and_the_shipped_hopper_presets_sit_under_them():
    from explorer import measure
    from explorer.presets import all_presets

    ceilings = measure.ceilings()
    assert ceilings is not None, measure.ceilings_error()
    assert not ceilings.no_tensor_peak
    for dtype in ("float16", "bfloat16"):
        assert 300_000 < ceilings.tensor_peak(dtype) < 1_100_000  # GFLOP/s, as the chain above
    hopper = [p for p in all_presets().values() if p.spec.template == "matmul_hopper"]
    assert hopper
    for preset in hopper:
        m = measure.measure(preset.spec)
        assert m.correct, (preset.id, m.summary())
        assert m.ceilings == ceilings and "tensor-core" in m.summary()
        assert 0 < m.percent_of_roofline <= 100, (preset.id, m.summary())
