"""Tiling: ownership of outputs and input footprints, against hand counts and the blog."""
import numpy as np
import pytest
from tvm import tirx

from explorer.analysis.accesses import Loop
from explorer.analysis.tiling import analyze_tiling, distinct_elements, format_tiling
from explorer.build import Spec, build
from explorer.errors import ExplorerError
from explorer.presets import get_preset
from explorer.schedules.depthwise_blog import DepthwiseBlogKnobs
from explorer.workloads import DepthwiseConv2d


def depthwise(size, block, ty, tx, vy=1, vx=1, channels=1):
    knobs = DepthwiseBlogKnobs(blocking_h=block, blocking_w=block, num_thread_y=ty, num_thread_x=tx,
                               num_vthread_y=vy, num_vthread_x=vx)
    workload = DepthwiseConv2d(channels=channels, height=size, width=size)
    return analyze_tiling(build(Spec("depthwise_blog", workload, knobs)))


def test_blog_one_output_per_thread_reads_nine_inputs_each():
    # 4×4 outputs on 16 threads: every thread loads its own 3×3 window, 9 × 16 loads.
    t = depthwise(4, 4, 4, 4)
    pad = t.footprints[0]
    assert pad.buffer == "PaddedInput_shared"
    assert (t.outputs_per_thread, pad.thread_elements, pad.loads_per_block) == (1, 9, 9 * 16)
    assert pad.loads_per_output == 9.0


def test_blog_two_by_two_outputs_per_thread_read_sixteen_inputs_each():
    # 4×4 outputs on 4 threads of 2×2 outputs: each loads a 4×4 window, 16 × 4 loads.
    t = depthwise(4, 4, 2, 2)
    pad = t.footprints[0]
    assert (t.outputs_per_thread, pad.thread_elements, pad.loads_per_block) == (4, 16, 16 * 4)
    assert pad.thread_box[-2:] == (4, 4)
    assert pad.reads_per_output == 9.0  # without reuse every output still takes 9 reads
    expected = np.array([[0, 0, 1, 1], [0, 0, 1, 1], [2, 2, 3, 3], [2, 2, 3, 3]])
    assert (t.ownership.thread == expected).all()


def test_vthreads_make_neighbouring_threads_own_neighbouring_columns():
    # 8 threads in x over 32 columns: without vthreads thread 0 owns columns 0-3 ...
    plain = depthwise(32, 32, 8, 8).ownership
    assert plain.thread_x[0, :8].tolist() == [0, 0, 0, 0, 1, 1, 1, 1]
    # ... with 4 vthreads in x, threads 0-7 own columns 0-7, then the next vthread starts.
    strided = depthwise(32, 32, 8, 8, vx=4).ownership
    assert strided.thread_x[0, :8].tolist() == list(range(8))
    assert strided.vthread[0, ::8].tolist() == [0, 1, 2, 3]
    assert strided.thread_x[0, 8] == 0


def test_blocks_tile_the_plane_and_every_output_is_written_once():
    t = depthwise(96, 32, 8, 16, vx=2)
    own = t.ownership
    assert own.shape == (96, 96) and not own.cropped
    assert (own.owners == 1).all()
    # blockIdx.x fuses the 3 × 3 block rows and columns: block (r // 32) * 3 + c // 32.
    assert own.block[40, 70] == 1 * 3 + 2
    assert len(np.unique(own.block)) == 9
    assert t.outputs_per_block == 32 * 32 and t.outputs_per_thread == 8


def test_block_footprint_is_the_tile_plus_its_halo():
    t = depthwise(96, 32, 8, 16, vx=2)
    pad = t.footprints[0]
    assert pad.block_box[-2:] == (34, 34) and pad.block_elements == 34 * 34
    # Thread (0, 0): rows 0-3 (+2 halo), columns 0 and 16 (vthreads) + 2 halo each: 6 × 6.
    assert pad.thread_elements == 6 * 6
    cells = {tuple(c) for c in pad.thread_cells.tolist()}
    assert (0, 0) in cells and (0, 16) in cells and (0, 3) not in cells


def test_chosen_block_and_thread():
    t = analyze_tiling(build(get_preset("dw-blog-final-96").spec), block=4, thread=(3, 1, 0))
    pad = t.footprints[0]
    rows, cols = pad.thread_cells[:, 0], pad.thread_cells[:, 1]
    # Block 4 = block row 1, column 1 (padded coordinates start at 32); thread row 1 → rows +4.
    assert rows.min() == 32 + 4 and cols.min() == 32 + 3
    with pytest.raises(ExplorerError):
        analyze_tiling(build(get_preset("dw-blog-final-96").spec), block=9 * 256)


def test_large_planes_show_the_first_blocks():
    t = analyze_tiling(build(get_preset("matmul-tiled-1024").spec))
    assert t.ownership.cropped and t.ownership.shape == (128, 128)
    a = t.footprints[0]
    # A 4×4-output thread reads 4 rows of A over the whole K = 1024.
    assert (a.thread_elements, a.thread_box) == (4 * 1024, (4, 1024))
    assert "first blocks only" in format_tiling(t)


def test_distinct_elements_by_hand():
    i, j = tirx.Var("i", "int32"), tirx.Var("j", "int32")
    loops = [Loop(i, 0, 4), Loop(j, 0, 3)]
    assert distinct_elements([i + j], loops, {}, {})[0] == 6  # 0..5
    count, box, pairs = distinct_elements([i, j], loops, {}, {})
    assert (count, box, len(pairs)) == (12, (4, 3), 12)
    assert distinct_elements([i, j], loops, {}, {}, predicate=i < 2)[0] == 6
    assert distinct_elements([i * 2 + j], loops, {}, {})[0] == 9  # 0..8, with overlaps


def test_to_dict_is_json_ready():
    import json

    data = depthwise(8, 8, 2, 4).to_dict()
    assert json.loads(json.dumps(data))["ownership"]["shape"] == [8, 8]


def test_a_process_that_reads_a_few_numbers_of_each_tiling_keeps_few():
    import explorer.analysis.tiling as tiling_module

    before = tiling_module._analyze
    try:
        tiling_module.keep_tilings(1)
        assert depthwise(4, 4, 4, 4).outputs_per_thread == 1
        assert depthwise(4, 4, 2, 2).outputs_per_thread == 4
        assert tiling_module._analyze.cache_info().currsize == 1
        assert tiling_module._analyze.cache_info().maxsize == 1
    finally:
        tiling_module._analyze = before
