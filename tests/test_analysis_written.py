"""The tiling of kernels written out (explorer/analysis/written.py), read from their own loads and stores,
against hand counts: the query rows a block, a warp and a thread of attention own and the key tiles each block
walks, the tile of C a Hopper block computes, the elements a block and a thread of the sum add."""
import numpy as np
import pytest

from explorer.analysis.written import analyze_written, format_written
from explorer.build import Spec, build
from explorer.errors import ExplorerError
from explorer.schedules.attention_fused import AttentionFusedKnobs
from explorer.schedules.attention_hopper import AttentionHopperKnobs
from explorer.schedules.attention_mma import AttentionMmaKnobs
from explorer.schedules.matmul_hopper import MatmulHopperKnobs
from explorer.schedules.reduce_tree import ReduceTreeKnobs
from explorer.workloads import Attention, Matmul, Sum

# One warp of 16-row blocks: 8 rows per thread, 16 threads per row (groups 0 and 1), 4 columns of d = 64 each.
FUSED = AttentionFusedKnobs(block_q=16, block_kv=16, rows_per_thread=8, threads_per_row=16, kv_shared=False)


def owned(t, thread):
    return np.unique(t.rows[t.thread == thread]).tolist(), np.unique(t.cols[t.thread == thread]).tolist()


def test_fused_attention_a_thread_owns_every_second_row_and_every_sixteenth_column():
    t = analyze_written(build(Spec("attention_fused", Attention(batch=1, heads=1, seq=32, head_dim=64), FUSED)))
    assert (t.family, t.buffer, t.plane, t.shape) == ("attention", "O", "O[0, 0, :, :]", (32, 64))
    assert (t.rows.min(), t.rows.max(), t.outputs_per_block) == (0, 15, 16 * 64)
    # Thread t: group t // 16 owns rows r · 2 + group, lane t % 16 the columns c · 16 + lane.
    assert owned(t, 0) == (list(range(0, 16, 2)), [0, 16, 32, 48])
    assert owned(t, 17) == (list(range(1, 16, 2)), [1, 17, 33, 49])
    assert t.outputs_per_thread == 32
    # Two query tiles, two key tiles each, walked in order; block b owns query tile b.
    assert t.tile_owner.tolist() == [0, 1] and t.walk.tolist() == [[0, 1], [0, 1]]
    assert t.loads_per_output == pytest.approx((2 * 16 + 2 * 4 * 16) / 32)  # Q once, K and V tiles per block
    assert "Block 0 owns query rows 0–15" in t.sentences[0] and "walks 2 key and value tiles" in t.sentences[1]
    assert "Thread 0 writes rows 0, 2, 4 … 14 (every 2) × columns 0, 16, 32 … 48 (every 16)" in t.sentences[3]


def test_causal_blocks_start_with_the_last_query_rows_and_stop_at_the_diagonal():
    causal = Spec("attention_fused", Attention(batch=1, heads=1, seq=32, head_dim=64, causal=True), FUSED)
    first, second = (analyze_written(build(causal), block) for block in (0, 1))
    assert (first.rows.min(), first.rows.max(), second.rows.min()) == (16, 31, 0)  # heaviest first
    assert first.tile_owner.tolist() == [1, 0]
    assert first.walk.tolist() == [[0, -1], [0, 1]]  # query tile 0 sees key tile 0 only
    assert "walks 1 key and value tile of 16 keys, 0 … 0 (up to the diagonal" in second.sentences[1]


def test_mma_attention_a_warp_owns_sixteen_rows():
    spec = Spec("attention_mma", Attention(batch=1, heads=1, seq=128, head_dim=64),
                AttentionMmaKnobs(block_q=64, warps=4, block_kv=32, stages=1))
    t = analyze_written(build(spec))
    for warp in range(4):
        assert np.unique(t.rows[t.warp == warp]).tolist() == list(range(16 * warp, 16 * warp + 16))
    # mma.sync's accumulator layout: lane 5 holds rows 1 and 9, columns 2 and 3 of every 8.
    rows, cols = owned(t, 5)
    assert rows == [1, 9] and cols == [c + d for c in range(0, 64, 8) for d in (2, 3)]


def test_hopper_attention_the_consumer_warpgroups_write_and_the_producer_does_not():
    t = analyze_written(build(Spec("attention_hopper", Attention(batch=1, heads=1, seq=256, head_dim=128),
                                   AttentionHopperKnobs())))
    assert t.thread.min() == 128 and t.threads_per_block == 384  # warpgroup 0 copies, 1 and 2 multiply
    assert np.unique(t.rows[t.warp == 4]).tolist() == list(range(16)) and t.rows.max() == 127
    assert t.tile_owner.tolist() == [0, 1] and t.walk.tolist() == [[0, 1], [0, 1]]
    assert "The 8 warps that write O (of 12): warp 4 rows 0–15" in t.sentences[2]


def test_hopper_matmul_tiles_of_c_in_raster_order():
    """Four 128 × 128 tiles of a 256 × 256 C, numbered down the tile rows of a column (groups of 8 rows)."""
    spec = Spec("matmul_hopper", Matmul(m=256, n=256, k=64, dtype="float16"),
                MatmulHopperKnobs(block_m=128, block_n=128, block_k=64, stages=2))
    t = analyze_written(build(spec), 1)
    assert t.cell_owner.tolist() == [[0, 2], [1, 3]] and t.cell == (128, 128)
    assert (t.rows.min(), t.rows.max(), t.cols.min(), t.cols.max()) == (128, 255, 0, 127)
    assert np.unique(t.rows[t.thread // 128 == 1]).tolist() == list(range(128, 192))  # the first consumer
    assert t.loads_per_output == pytest.approx((128 * 64 + 64 * 128) / (128 * 128))
    assert "threads 128–255 rows 128–191; threads 256–383 rows 192–255" in t.sentences[1]


def test_the_sum_a_thread_adds_pairs_a_grid_span_apart():
    """n = 2048, 64 threads summing 4 each: 8 blocks, pairs 64 apart, a pair every 2 · 64 · 8 = 1,024."""
    spec = Spec("reduce_tree", Sum(n=2048), ReduceTreeKnobs(threads=64, elements_per_thread=4, last_warp="tree"))
    t = analyze_written(build(spec), 1)
    assert (t.family, t.blocks, t.shape) == ("sum", 8, (2, 128))  # two runs of 128 consecutive elements
    elements = np.where(t.rows == 0, 128, 1152) + t.cols  # block 1's runs start at 128 and 8 · 128 + 128
    assert sorted(elements[t.thread == 0].tolist()) == [128, 192, 1152, 1216]
    assert sorted(elements[t.thread == 5].tolist()) == [133, 197, 1157, 1221]
    assert "Thread 0 adds A[128], A[192], A[1,152], A[1,216]: in pairs 64 apart, a pair every 1,024" in t.sentences[1]
    assert "Then one block of 64 threads adds the 8 partial sums" in t.sentences[2]
    assert "note: Loads per output: the sum reads each of its 2,048 elements once" in format_written(t)
    with pytest.raises(ExplorerError, match="blocks 0–7, not 8"):
        analyze_written(build(spec), 8)


def test_the_figures_draw_the_walk_the_owners_and_a_vector_of_outputs_in_rows():
    from explorer import figures
    from explorer.analysis.tiling import analyze_tiling
    from explorer.presets import get_preset

    causal = Spec("attention_fused", Attention(batch=1, heads=1, seq=32, head_dim=64, causal=True), FUSED)
    t = analyze_written(build(causal), 1)
    walk = figures.walk_figure(t)
    # Query tile 0 (block 1, outlined) sees key tile 0 only.
    assert [list(row) for row in walk.data[0].z] == [[0, None], [0, 1]]
    assert [(s.y0, s.y1) for s in walk.layout.shapes] == [(-0.5, 0.5)]
    owners = figures.written_owners_figure(t, "thread")
    assert len(owners.data[0].z) == 16 and len(owners.data[0].z[0]) == 64  # block 1's 16 rows × d
    # softmax's row maxima, one per block of 4,096: a 64 × 64 picture, not one row of 4,096 on empty axes.
    softmax = analyze_tiling(build(get_preset("rowwise-softmax-separate").spec))
    assert softmax.ownership.shape == (1, 4096)
    z = figures.ownership_figure(softmax, "block").data[0].z
    assert (len(z), len(z[0])) == (64, 64)
    assert figures.footprint_figure(softmax, 0).layout.yaxis.title.text == "column (64 a row)"
