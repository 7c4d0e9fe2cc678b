"""Occupancy and resources: limits counted by hand from the per-architecture table."""
import pytest

from explorer.analysis.resources import (
    NOT_COMPILED,
    analyze_resources,
    format_resources,
    occupancy,
    sm_limits,
)
from explorer.build import build
from explorer.cuda_compile import Binary
from explorer.errors import ExplorerError
from explorer.gpus import ARCHITECTURES
from explorer.presets import get_preset

H100 = ARCHITECTURES["sm_90"].limits


def test_registers_limit_a_256_thread_block():
    # 48 registers → 1536 per warp; 16384 per sub-partition → 10 warps each, 40 per SM → 5 blocks of 8 warps.
    occ = occupancy(H100, 256, 4096, 48)
    assert (occ.blocks_per_sm, occ.limiter) == (5, "registers")
    assert occ.warps_per_sm == 40 and occ.occupancy == pytest.approx(40 / 64)


def test_threads_limit_large_blocks():
    occ = occupancy(H100, 1024, 0, 32)
    assert (occ.blocks_per_sm, occ.limiter) == (2, "threads")


def test_shared_memory_limits_with_the_reserved_kilobyte():
    # 48 KB + 1 KB reserved per block: 228 KB holds 4.
    occ = occupancy(H100, 128, 48 * 1024, None)
    assert (occ.blocks_per_sm, occ.limiter) == (4, "shared memory")
    assert occ.limits["registers"] is None


def test_block_limit_for_tiny_blocks():
    occ = occupancy(H100, 32, 0, 16)
    assert (occ.blocks_per_sm, occ.limiter) == (32, "blocks")
    assert occupancy(ARCHITECTURES["sm_75"].limits, 32, 0, 16).blocks_per_sm == 16


def test_too_many_registers_per_thread_cannot_launch():
    assert occupancy(H100, 128, 0, 300).blocks_per_sm == 0


def test_architecture_lookup():
    assert sm_limits("sm_90a") == (H100, "")
    limits, note = sm_limits("sm_100")
    assert limits is H100 and "sm_90" in note
    with pytest.raises(ExplorerError):
        sm_limits("sm_60")


def test_build_resources_without_and_with_a_binary():
    built = build(get_preset("dw-blog-final-96").spec)
    report = analyze_resources(built)
    (kernel,) = report.kernels
    assert (kernel.threads_per_block, kernel.registers) == (128, NOT_COMPILED)
    assert kernel.shared_bytes == (34 * 34 + 9) * 4
    assert kernel.occupancy.limits["registers"] is None
    binary = Binary("nvcc", "sm_90a", {"main_kernel": 128}, {"main_kernel": kernel.shared_bytes}, {"main_kernel": 0},
                    "", "")
    compiled = analyze_resources(built, binary).kernels[0]
    # 128 registers × 4 warps: 4096 per warp → 4 warps per sub-partition → 16 warps → 4 blocks.
    assert (compiled.registers, compiled.occupancy.blocks_per_sm, compiled.occupancy.limiter) == (128, 4, "registers")
    assert "limited by registers" in format_resources(analyze_resources(built, binary))
