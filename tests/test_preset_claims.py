"""The presets' static claims, checked on the real builds with the analyses: what each
lesson step says about shared memory, bank conflicts, per-thread tiles, kernels and
global-memory traffic. Each claim's numbers are derived by hand in the comments, then
every preset's ``static`` table is checked the way the Lessons page checks it. (Timing
claims are measured by bench/lessons_gpu.py on a GPU.)"""
import pytest

from explorer.analysis.banks import analyze_banks
from explorer.analysis.tiling import analyze_tiling
from explorer.build import build
from explorer.claims import bank_conflict_degree, global_writes
from explorer.lessons import REPRODUCED, static_checks
from explorer.presets import all_presets, get_preset
from explorer.tir_walk import allocations

FLOAT = 4


def built(preset_id):
    return build(get_preset(preset_id).spec, "h100")


@pytest.mark.parametrize("preset_id", sorted(p.id for p in all_presets().values() if p.static))
def test_every_static_claim_of_a_preset_holds(preset_id):
    for check in static_checks(get_preset(preset_id), "h100"):
        assert check.verdict == REPRODUCED, (check.fact, check.claimed, check.actual, check.error)


# -- one block per channel, then blocking ----------------------------------------------------


@pytest.mark.parametrize("size", [21, 32, 64, 96])
def test_one_block_per_channel_stages_the_whole_padded_channel(size):
    b = built(f"dw-blog-channel-{size}")
    (kernel,) = b.kernels
    assert kernel.grid == (1, 256, 1) and kernel.block == (8, 8, 1)  # one block per channel, topi's 8×8 threads
    padded = (size + 2) * (size + 2)  # SAME padding of a 3×3 filter adds one row/column on each side
    shared = {a.name: a.elements for a in allocations(next(iter(b.device_mod.functions.values())))
              if a.scope == "shared"}
    assert shared == {"PaddedInput_shared": padded, "Filter_shared": 9}
    assert kernel.shared_bytes == (padded + 9) * FLOAT  # 21: 2,152 · 32: 4,660 · 64: 17,460 · 96: 38,452


@pytest.mark.parametrize("size, blocks", [(64, 4), (96, 9)])
def test_blocking_stages_a_34x34_tile_per_32x32_block(size, blocks):
    (kernel,) = built(f"dw-blog-blocking-{size}").kernels
    assert kernel.grid == (blocks, 256, 1)  # (size / 32)² blocks per channel
    assert kernel.shared_bytes == (34 * 34 + 9) * FLOAT == 4660  # vs 17,460 / 38,452 unblocked


# -- threads and vthreads: bank conflicts ----------------------------------------------------
# A warp is 32 lanes, threadIdx.x fastest. Thread (ty, tx) reads the input tile (34 floats
# per row) at row r0(ty) + i + di, column c0(tx) + j + dj; the bank is the word index mod 32.


@pytest.mark.parametrize(
    "preset_id, degree",
    [
        # x = 32: one warp = one row of 32 neighbouring columns → 32 banks.
        ("dw-blog-threads-case1", 1),
        ("dw-blog-threads-case2", 1),
        ("dw-blog-threads-case3", 1),
        # x = 1, y = 32: lane ty reads word 34·ty + c → bank (2·ty + c) mod 32: 16 banks, 2 lanes each.
        ("dw-blog-threads-case4", 2),
    ],
)
def test_thread_table_bank_conflicts(preset_id, degree):
    b = built(preset_id)
    assert bank_conflict_degree(b) == degree
    (kernel,) = analyze_banks(b).kernels  # the filter loads are broadcasts: the input tile decides
    assert max(a.max_degree for a in kernel.accesses if a.buffer == "PaddedInput_shared" and a.op == "load") == degree


@pytest.mark.parametrize(
    "preset_id, outputs, tile, loads",
    [
        # split(nparts=num_thread): 32 rows / num_thread_y × 32 columns / num_thread_x per thread; a k×1
        # strip of a 3×3 convolution reads a (k+2)×3 input window.
        ("dw-blog-threads-case1", 4, (6, 3), 18 / 4),  # 4×1 outputs from 6×3 inputs: 4.5 loads per output
        ("dw-blog-threads-case2", 8, (10, 3), 30 / 8),  # the blog's "8x1 tile ... 10x3 tile in input": 3.75
        ("dw-blog-threads-case3", 32, (34, 3), 102 / 32),
        ("dw-blog-threads-case4", 32, (3, 34), 102 / 32),  # the same work, transposed
    ],
)
def test_thread_table_per_thread_tiles(preset_id, outputs, tile, loads):
    tiling = analyze_tiling(built(preset_id))
    assert tiling.outputs_per_thread == outputs
    tile_input = tiling.footprints[0]
    assert tile_input.buffer == "PaddedInput_shared"
    assert tile_input.thread_box[-2:] == tile
    assert tile_input.loads_per_output == pytest.approx(loads)


@pytest.mark.parametrize(
    "preset_id, degree",
    [
        # 8×8 threads, 4×4 tiles: lane (ty 0..3, tx 0..7) reads word 4·34·ty + 4·tx → bank (8·ty + 4·tx) mod 32,
        # only the 8 multiples of 4: 4 lanes per bank.
        ("dw-blog-vthread-case1", 4),
        # vthreads (1, 4): column 8·vx + tx → bank (8·ty + tx) mod 32 covers 0..31 once.
        ("dw-blog-vthread-case2", 1),
        # 4×32 threads: a warp is one row of 32 columns.
        ("dw-blog-vthread-case3", 1),
        # 8×16, vthreads (1, 2): lanes ty 0..1, tx 0..15 → bank 8·ty + tx: banks 8..15 are hit twice.
        ("dw-blog-final-96", 2),
    ],
)
def test_vthread_table_bank_conflicts(preset_id, degree):
    assert bank_conflict_degree(built(preset_id)) == degree


# -- fusion -----------------------------------------------------------------------------------


def test_fused_kernel_writes_only_the_relu_output_to_global_memory():
    b = built("dw-blog-fused-96")
    assert global_writes(b) == (("Relu",),)
    (kernel,) = b.kernels
    assert kernel.grid == (9, 256, 1) and kernel.block == (16, 8, 1)  # the final schedule, unchanged


def test_unfused_epilogue_is_three_kernels_each_writing_a_whole_tensor():
    b = built("dw-blog-unfused-96")
    assert [k.name for k in b.kernels] == ["main_kernel", "main_kernel_1", "main_kernel_2"]
    # The convolution's result goes to DRAM; scale_shift is computed in place in that buffer
    # (TVM reuses the intermediate), then ReLU writes the output: 256·96·96 elements each.
    assert global_writes(b) == (("DepthwiseConv2d",), ("DepthwiseConv2d",), ("Relu",))
    for k in b.kernels[1:]:
        assert k.grid[0] * k.threads_per_block == 256 * 96 * 96


# -- larger filters -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "preset_id, tile, filt, channels",
    [
        ("dw-blog-kernel5-96", 36, 25, 256),  # 32 + 4: a two-element halo on each side
        ("dw-blog-multiplier2-96", 34, 9, 512),  # one block per output channel
        ("dw-blog-kernel5-multiplier2-96", 36, 25, 512),
    ],
)
def test_large_filters_and_multipliers(preset_id, tile, filt, channels):
    (kernel,) = built(preset_id).kernels
    assert kernel.grid == (9, channels, 1)
    assert kernel.shared_bytes == (tile * tile + filt) * FLOAT


# -- conv2d and matmul -----------------------------------------------------------------------


def test_autotvm_fallback_is_one_thread_per_block():
    (kernel,) = built("conv2d-autotvm-fallback").kernels
    assert kernel.threads_per_block == 1
    assert kernel.grid == (7, 7, 512)  # 25,088 blocks: one per output element
    assert kernel.shared_bytes == 2 * FLOAT  # one input and one filter value at a time


def test_matmul_naive_uses_no_shared_memory_and_tiled_stages_two_64x8_slices():
    (naive,) = built("matmul-naive-1024").kernels
    assert naive.shared_bytes == 0 and naive.grid == (64, 64, 1) and naive.block == (16, 16, 1)
    (tiled,) = built("matmul-tiled-1024").kernels
    assert tiled.shared_bytes == (64 * 8 + 8 * 64) * FLOAT == 4096
    assert tiled.grid == (16, 16, 1) and tiled.block == (16, 16, 1)  # 64×64 tiles, 4×4 per thread


# -- d2l and the 1-D convolution blog -------------------------------------------------------


@pytest.mark.parametrize("channels", [16, 32, 64, 128, 256])
def test_d2l_tiled_blocks_and_tiles(channels):
    b = built(f"d2l-tiled-c{channels}")
    (kernel,) = b.kernels
    # tile_h = [2, 8]: 64 rows / (2 threads × 8 rows) = 4 blocks per channel; tile_w = [64, 1]: 64 threads.
    assert kernel.grid[0] * kernel.grid[1] * kernel.grid[2] == 4 * channels
    assert kernel.threads_per_block == 2 * 64
    # 16 output rows + 2 halo = 18, 64 columns + 2 = 66, plus the 3×3 filter.
    assert kernel.shared_bytes == (18 * 66 + 9) * FLOAT == 4788
    tiling = analyze_tiling(b)
    assert tiling.outputs_per_thread == 8 and tiling.footprints[0].thread_box[-2:] == (10, 3)


@pytest.mark.parametrize("channels", [16, 256])
def test_d2l_default_binds_rows_and_columns_only(channels):
    (kernel,) = built(f"d2l-default-c{channels}").kernels
    assert (kernel.grid, kernel.block, kernel.shared_bytes) == ((64, 1, 1), (64, 1, 1), 0)  # one launch per channel


def test_conv1d_versions():
    # M + N - 1 = 16,415 outputs.
    naive, v1, v2, v3, v4, v5 = (built(f"conv1d-{v}").kernels[0] for v in ("naive", "v1", "v2", "v3", "v4", "v5"))
    assert naive.grid[0] == v1.grid[0] == 16415 and naive.threads_per_block == v1.threads_per_block == 1
    assert (v2.grid[0], v2.threads_per_block) == (2052, 8)  # ⌈16415 / 8⌉
    assert (v3.grid[0], v3.block) == (1026, (4, 4, 1))  # ⌈16415 / 16⌉, 4×4 threads
    assert (v4.grid[0], v4.threads_per_block, v4.shared_bytes) == (513, 32, 4 * FLOAT)  # 4 filter taps per step
    assert (v5.grid[0], v5.block, v5.shared_bytes) == (513, (4, 8, 1), 8 * FLOAT)  # 8 taps, 8×4 threads
    # The naive formulation reads every input position per output; v1 only the 32 taps.
    assert analyze_tiling(built("conv1d-naive")).footprints[0].loads_per_output == 16415
    assert analyze_tiling(built("conv1d-v1")).footprints[0].loads_per_output == 32
