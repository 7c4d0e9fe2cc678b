"""The ceilings' kernels: they compute what they claim (on llvm, small sizes, against NumPy),
their CUDA issues float4 loads and interleaved FMAs, and they are measured into Ceilings."""
import numpy as np
import pytest
import tvm

from explorer.measure.ceilings import (
    CHAINS,
    CPU_SIZES,
    FMA_SCALE,
    GPU_SIZES,
    Sizes,
    fma_module,
    l2_buffer_bytes,
    measure_ceilings,
    stream_read_module,
)
from explorer.measure.settings import MeasureSettings

LLVM = tvm.target.Target("llvm")
H100 = tvm.target.Target("nvidia/nvidia-h100")


def _run(module: tvm.IRModule, *arrays: np.ndarray) -> np.ndarray:
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    tvm.compile(module, target=LLVM)["main"](*tensors)
    return tensors[-1].numpy()


def _cuda(module: tvm.IRModule) -> str:
    return tvm.compile(module, target=tvm.target.Target(H100, host="llvm")).mod.imports[0].inspect_source("cuda")


def test_stream_read_sums_each_threads_float4s_with_wraparound():
    # 64 float4s, 16 threads, 5 passes shifted by 24: thread g reads rows (g + 24 p) mod 64.
    src = np.random.default_rng(0).random((64, 4), dtype=np.float32)
    out = _run(stream_read_module(LLVM, 64, 16, 5, 24), src, np.zeros(16, np.float32))
    g = np.arange(16)
    expected = sum(src[(g + 24 * p) % 64].sum(axis=1) for p in range(5))
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_stream_read_once_reads_every_float4_exactly_once():
    # shift = threads and passes × threads = float4s: the HBM kernel's shape.
    src = np.ones((32, 4), np.float32)
    src[7] = 2.0  # row 7 belongs to thread 7 % 8 = 7, pass 0
    out = _run(stream_read_module(LLVM, 32, 8, 4, 8), src, np.zeros(8, np.float32))
    assert out.tolist() == [16.0] * 7 + [20.0]


def test_fma_chains_compute_the_recurrence():
    x = np.array([0.5, -1.0, 2.0], np.float32)
    out = _run(fma_module(LLVM, 3, 5), x, np.zeros(3, np.float32))
    expected = np.zeros(3)
    for chain in range(CHAINS):
        acc = np.zeros(3)
        for _ in range(5):
            acc = acc * FMA_SCALE + (x + chain)
        expected += acc
    np.testing.assert_allclose(out, expected, rtol=1e-5)


def test_cuda_stream_read_issues_float4_loads_unrolled():
    source = _cuda(stream_read_module(H100, 1 << 16, 1 << 12, 16, 1 << 12))
    loads = source.count("*(float4*)(src_ptr")
    assert loads == 8  # UNROLL float4 loads in flight per thread, inside the loop over passes
    assert "threadIdx.x" in source and "__launch_bounds__(256)" in source


def test_cuda_fma_kernel_keeps_the_chains_in_registers():
    source = _cuda(fma_module(H100, 1 << 12, 64))
    assert f"chains_local_ptr[{CHAINS}]" in source  # CHAINS accumulators per thread, local
    for chain in range(CHAINS):
        assert f"chains_local_ptr[{chain}] = ((chains_local_ptr[{chain}] *" in source


def test_l2_buffer_is_a_power_of_two_inside_half_the_l2():
    gpu = Sizes(threads=1, hbm_bytes=1, l2_bytes=8 << 20, l2_passes=1, fma_iterations=1)
    assert l2_buffer_bytes(gpu, 50 << 20) == 8 << 20  # H100: the 8 MiB cap
    assert l2_buffer_bytes(gpu, 4 << 20) == 2 << 20  # T4: half its 4 MiB
    assert l2_buffer_bytes(gpu, 6 << 20) == 2 << 20  # half of 6 MiB rounded down to a power of two


def test_ceilings_are_measured_on_the_cpu():
    small = Sizes(threads=1 << 10, hbm_bytes=4 << 20, l2_bytes=64 << 10, l2_passes=8, fma_iterations=64)
    names = []

    def load(module, name):
        names.append(name)
        return tvm.compile(module, target=LLVM).jit()

    ceilings = measure_ceilings(load, tvm.cpu(0), LLVM, "CPU", MeasureSettings(repeats=2), small)
    assert names == ["ceiling_hbm", "ceiling_l2", "ceiling_fma"]
    assert ceilings.source == "measured on CPU" and ceilings.measured
    assert ceilings.fp32_gflops > 0 and ceilings.hbm_gbps > 0 and ceilings.l2_gbps > 0
    assert ceilings.tensor_gflops == () and ceilings.no_tensor_peak == (
        "their peak is measured on a Hopper (sm_90) GPU, not on a CPU")


class StandInGPU:
    """What the tensor roof asks of a device: its compute capability and SMs."""

    def __init__(self, compute_version: str):
        self.compute_version, self.multi_processor_count = compute_version, 4


def test_only_a_hopper_gpu_gets_its_tensor_peak_measured_and_the_others_say_why():
    from explorer.measure.tensor_roof import why_no_tensor_peak

    assert why_no_tensor_peak(StandInGPU("9.0"), H100, "NVIDIA H100") is None
    assert why_no_tensor_peak(StandInGPU("8.0"), H100, "NVIDIA A100") == (
        "their peak is measured with wgmma, which only Hopper (sm_90) GPUs have (NVIDIA A100 is sm_80)")


def test_a_failing_tensor_chain_costs_the_tensor_roof_only():
    from explorer.analysis.roofline import Ceilings
    from explorer.measure.ceilings import with_tensor_peaks

    def load_fails(executable, name):
        raise RuntimeError(f"CUDA_ERROR_NO_BINARY_FOR_GPU loading {name}")

    fp32_only = Ceilings(60_000.0, 3_000.0, 9_000.0, 50 << 20, "measured on a stand-in")
    ceilings = with_tensor_peaks(fp32_only, StandInGPU("9.0"), H100, "a stand-in H100", MeasureSettings(repeats=2),
                                 load_fails)
    assert ceilings.tensor_gflops == () and ceilings.fp32_gflops == 60_000.0 and ceilings.l2_gbps == 9_000.0
    assert ceilings.no_tensor_peak.startswith("the wgmma chain that measures their peak failed on a stand-in H100 (")
    assert "CUDA_ERROR_NO_BINARY_FOR_GPU loading tensor_roof_f16" in ceilings.no_tensor_peak


@pytest.mark.parametrize("sizes", [CPU_SIZES, GPU_SIZES])
def test_cpu_sizes_read_the_whole_buffer_once(sizes):
    # The HBM kernel's passes × threads × 16 B covers the buffer exactly.
    passes = sizes.hbm_bytes // (sizes.threads * 16)
    assert passes * sizes.threads * 16 == sizes.hbm_bytes
