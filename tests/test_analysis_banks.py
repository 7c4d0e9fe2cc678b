"""Bank-conflict model: hand-counted kernels, the blog's claim, totals, guards, sampling.

The hand-made kernels are one block of ``threads`` threads that copy A into shared
memory together, then each thread t reads ``read(A, t)`` from the shared copy: lowered by
the same pipeline as every build (``explorer.build.lower``)."""
import numpy as np
import pytest
import tvm
from tvm import te

from explorer.analysis.accesses import kernel_accesses
from explorer.analysis.banks import (
    analyze_banks,
    analyze_kernel,
    bank_degrees,
    format_report,
    lane_map,
    request_wavefronts,
)
from explorer.build import Spec, build, lower
from explorer.errors import ExplorerError
from explorer.presets import get_preset
from explorer.schedules.common import cooperative_fetch
from explorer.schedules.depthwise_blog import DepthwiseBlogKnobs
from explorer.schedules.matmul import MatmulKnobs
from explorer.workloads import DepthwiseConv2d, Matmul

H100 = tvm.target.Target(tvm.target.Target("nvidia/nvidia-h100"), host="llvm")


def shared_read(shape, read, threads=32, pad=None):
    """Bank results of the kernel described in the module docstring: (stores, loads)."""
    a = te.placeholder(shape, name="A")
    b = te.compute((1, threads), lambda _, t: read(a, t), name="B")
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": te.create_prim_func([a, b])}))
    block = sch.get_sblock("B")
    bx, tx = sch.get_loops(block)
    sch.bind(bx, "blockIdx.x")
    sch.bind(tx, "threadIdx.x")
    cache = sch.cache_read(block, 0, "shared")
    sch.compute_at(cache, bx)
    if pad:
        sch.storage_align(cache, 0, axis=0, factor=32, offset=pad)
    cooperative_fetch(sch, cache, bx, [("threadIdx.x", threads)])
    _, device = lower(sch.mod, H100)
    (kernel,) = kernel_accesses(next(iter(device.values())))
    result = analyze_kernel(kernel)
    stores = [a for a in result.accesses if a.op == "store"]
    loads = [a for a in result.accesses if a.op == "load"]
    return stores, loads


def test_stride_one_word_read_is_conflict_free():
    _, (load,) = shared_read((32,), lambda a, t: a[t])
    assert (load.requests, load.wavefronts, load.conflicts, load.max_degree) == (1, 1, 0, 1)
    assert load.lane_map.bank == tuple(range(32))


def test_stride_two_is_two_way():
    _, (load,) = shared_read((64,), lambda a, t: a[2 * t])
    # Lanes t and t+16 both use bank 2t mod 32 with different words: 2 wavefronts.
    assert (load.requests, load.wavefronts, load.conflicts, load.max_degree) == (1, 2, 1, 2)
    assert load.lane_map.bank[0] == load.lane_map.bank[16] == 0
    assert load.lane_map.address[16] == 32 * 4


def test_stride_32_is_32_way():
    _, (load,) = shared_read((1024,), lambda a, t: a[32 * t])
    assert (load.wavefronts, load.conflicts, load.max_degree) == (32, 31, 32)
    assert set(load.lane_map.bank) == {0}


def test_all_lanes_on_one_word_is_one_wavefront():
    _, (load,) = shared_read((4,), lambda a, t: a[0])
    assert (load.requests, load.wavefronts, load.conflicts) == (1, 1, 0)
    assert set(load.lane_map.address) == {0}


def test_storage_align_padding_removes_the_column_conflict():
    # Reading down a column of a 32×32 tile: row stride 32 words puts every lane in one bank.
    column = lambda a, t: a[t, 0] + a[t, 31]  # noqa: E731  (both ends keep whole rows in shared memory)
    _, loads = shared_read((32, 32), column)
    assert [l.max_degree for l in loads] == [32, 32]
    _, padded = shared_read((32, 32), column, pad=1)
    assert "33" in padded[0].text  # rows are 33 words apart
    assert [l.max_degree for l in padded] == [1, 1]
    assert sum(l.conflicts for l in padded) == 0


def test_partial_warp_lanes_make_no_request():
    # 48 threads: warp 0 has 32 lanes (32-way), warp 1 has 16 (16-way).
    _, (load,) = shared_read((48 * 32,), lambda a, t: a[32 * t], threads=48)
    assert (load.requests, load.wavefronts, load.max_degree) == (2, 48, 32)
    assert load.mean_degree == 24.0


def test_guarded_store_with_no_active_lane_makes_no_request():
    # 64 threads copy 16 elements: `if threadIdx.x < 16` leaves warp 1 without any lane.
    (store,), _ = shared_read((16,), lambda a, t: a[t % 16], threads=64)
    assert store.requests == 1
    assert sum(store.lane_map.active) == 16


def test_if_then_else_guard_switches_lanes_off():
    # Stride 2 is 2-way, but only lanes 0-15 read: their 16 words fall in 16 distinct banks.
    _, (load,) = shared_read((64,), lambda a, t: te.if_then_else(t < 16, a[2 * t], 0.0))
    assert (load.requests, load.wavefronts, load.conflicts) == (1, 1, 0)
    assert load.lane_map.active == (True,) * 16 + (False,) * 16


@pytest.mark.parametrize(
    "words, active, degree",
    [
        ([0, 32, 64, 1], [1, 1, 1, 1], 3),  # three words in bank 0
        ([5, 5, 5, 5], [1, 1, 1, 1], 1),  # broadcast
        ([0, 32, 64, 96], [1, 0, 0, 1], 2),  # inactive lanes do not count
        ([0, 32, 64, 96], [0, 0, 0, 0], 0),  # nobody asks: no wavefront
    ],
)
def test_bank_degrees(words, active, degree):
    assert bank_degrees(np.array([words]), np.array([active], dtype=bool)).tolist() == [degree]


def test_sixteen_byte_accesses_are_served_in_four_phases():
    # float4 per lane, consecutive: each quarter-warp covers all 32 banks once.
    words = (np.arange(32)[:, None] * 4 + np.arange(4))[None]
    wavefronts, ideal, degree = request_wavefronts(words, np.ones((1, 32), dtype=bool), 16)
    assert (wavefronts.tolist(), ideal.tolist(), degree.tolist()) == ([4], [4], [1])
    # float4 with a 32-word stride: the 8 lanes of a phase all start in bank 0.
    strided = (np.arange(32)[:, None] * 32 + np.arange(4))[None]
    wavefronts, ideal, _ = request_wavefronts(strided, np.ones((1, 32), dtype=bool), 16)
    assert (wavefronts.tolist(), ideal.tolist()) == ([32], [4])


def _depthwise_32(y, x, vy=1, vx=1):
    knobs = DepthwiseBlogKnobs(blocking_h=32, blocking_w=32, num_thread_y=y, num_thread_x=x,
                               num_vthread_y=vy, num_vthread_x=vx)
    return build(Spec("depthwise_blog", DepthwiseConv2d(channels=256, height=32, width=32), knobs))


def _main_loads(report):
    return [a for a in report.kernels[0].accesses if a.op == "load" and a.buffer == "PaddedInput_shared"]


def test_blog_claim_one_row_of_32_threads_reads_without_conflicts():
    loads = _main_loads(analyze_banks(_depthwise_32(1, 32)))
    assert loads and all(a.max_degree == 1 and a.conflicts == 0 for a in loads)


def test_blog_claim_one_column_of_32_threads_has_conflicts():
    # threadIdx.y walks rows of the 34-wide padded tile: 34 words apart, bank 2·ty mod 32.
    loads = _main_loads(analyze_banks(_depthwise_32(32, 1)))
    assert loads and all(a.max_degree == 2 and a.conflicts == a.requests for a in loads)


def test_kernel_totals_count_every_warp_of_the_launch():
    report = analyze_banks(_depthwise_32(1, 32))
    (load,) = _main_loads(report)
    # 256 blocks (channels) × 1 warp × (32 rows × 3 × 3 filter taps) executions.
    assert load.requests == 256 * 32 * 3 * 3
    kernel = report.kernels[0]
    assert kernel.loads.requests == sum(a.requests for a in kernel.accesses if a.op == "load")
    assert kernel.loads.conflicts == kernel.loads.wavefronts - kernel.loads.requests


def test_identical_loads_in_one_loop_body_are_counted_once():
    # With 2 vthreads the lowered body reads Filter_shared[ax1*3 + ax2] twice.
    accesses = analyze_banks(_depthwise_32(8, 16, 1, 2)).kernels[0].accesses
    filters = [a for a in accesses if a.buffer == "Filter_shared" and a.op == "load"]
    assert len(filters) == 2 and filters[1].duplicate_of == filters[0].number
    assert filters[1].requests == 0 and filters[0].requests > 0


def test_tvm_vector_stores_and_matmul_padding():
    small = Matmul(m=256, n=256, k=256)
    vector = analyze_banks(build(Spec("matmul", small, MatmulKnobs(fetch_vector=4))))
    stores = [a for a in vector.kernels[0].accesses if a.op == "store"]
    assert all(a.access_bytes == 16 and a.wavefronts_per_request == 4 and a.conflicts == 0 for a in stores)
    plain = analyze_banks(build(Spec("matmul", small, MatmulKnobs())))
    padded = analyze_banks(build(Spec("matmul", small, MatmulKnobs(shared_pad=1))))
    a_load = lambda r: next(a for a in r.kernels[0].accesses if a.op == "load" and a.buffer == "A_shared")  # noqa: E731
    assert (a_load(plain).max_degree, a_load(padded).max_degree) == (2, 1)


def test_sampling_is_stated_and_scaled():
    built = _depthwise_32(8, 8)
    exact = analyze_banks(built)
    sampled = analyze_banks(built, row_budget=16)
    load = _main_loads(sampled)[0]
    assert load.sampled and load.rows_evaluated <= 16 < load.rows_total
    assert "Sampled 16" in format_report(sampled)
    # The pattern repeats in every iteration, so the scaled estimate is exact here.
    assert load.requests == _main_loads(exact)[0].requests


def test_lane_map_for_a_chosen_warp_and_iteration():
    built = _depthwise_32(8, 16, 1, 2)
    number = _main_loads(analyze_banks(built))[0].number
    lanes = lane_map(built, "main_kernel", number, warp=1, iteration={"ax0": 1, "ax1": 2, "ax2": 0})
    # Warp 1 = threadIdx.y 2 and 3; row stride 4 rows × 34 = 136 words; + (ax0 + ax1) × 34.
    assert lanes.thread[0] == (0, 2, 0) and lanes.thread[16] == (0, 3, 0)
    assert lanes.element[0] == 2 * 136 + 3 * 34
    assert lanes.iteration == {"ax0": 1, "ax1": 2, "ax2": 0}
    with pytest.raises(ExplorerError):
        lane_map(built, "main_kernel", number, warp=4)


def test_report_states_assumptions_and_serialises():
    report = analyze_banks(build(get_preset("dw-blog-final-96").spec))
    text = format_report(report)
    assert "Assumptions" in text and "broadcast" in text
    data = report.to_dict()
    assert data["kernels"][0]["loads"]["requests"] == report.kernels[0].loads.requests


def test_the_fused_attention_kernels_shared_loads_computed_by_hand():
    """attention_fused names the thread's row group and lane (``group = tx // G``), which lower to one-element
    registers written once (``group[0] = threadIdx_x >> 4``): the model reads their value. One warp (block_q 16,
    8 rows per thread, 16 threads per row: groups 0 and 1), K and V from global memory, float16 tiles:
    - Q tile rows are 66 halves (33 words) apart: group 0 reads row 2r, group 1 row 2r + 1, each lane of a group
      the same word (a broadcast), the two words 33 apart in neighbouring banks: 1 wavefront. 64 columns × 2
      key tiles × 2 blocks = 256 requests for each of the 8 rows;
    - P rows are 17 words apart: group 0 writes words 34r … 34r + 15, group 1 words 34r + 17 … 34r + 32, and
      34r + 32 is in the bank of 34r: 2-way, one conflict per store request (2 key tiles × 2 blocks = 4);
    - P is read back one word per group (broadcast), rows 17 banks apart: 16 keys × 2 × 2 = 64 requests a row;
    - Q is copied in: 32 consecutive halves per request, 16 words in 16 banks, 32 copies × 2 blocks."""
    from explorer.schedules.attention_fused import AttentionFusedKnobs
    from explorer.workloads import Attention

    knobs = AttentionFusedKnobs(block_q=16, block_kv=16, rows_per_thread=8, threads_per_row=16, kv_shared=False)
    built = build(Spec("attention_fused", Attention(batch=1, heads=1, seq=32, head_dim=64), knobs))
    registers = {str(k.name) for k in kernel_accesses(built.device_mod)[0].bindings if isinstance(k, tvm.tirx.Buffer)}
    assert {"group", "lane", "qt"} <= registers and "red" not in registers  # red is written again and again
    (kernel,) = analyze_banks(built).kernels
    assert not [a.text for a in kernel.accesses if a.not_modelled]
    by_kind = {}
    for a in kernel.accesses:
        by_kind.setdefault((a.buffer, a.op), []).append((a.requests, a.max_degree, a.conflicts))
    assert by_kind[("q_s", "store")] == [(64, 1, 0)]
    assert by_kind[("q_s", "load")] == [(256, 1, 0)] * 8
    assert by_kind[("p_s", "store")] == [(4, 2, 4)] * 8
    assert by_kind[("p_s", "load")] == [(64, 1, 0)] * 8
    assert (kernel.loads.requests, kernel.loads.conflicts) == (8 * 256 + 8 * 64, 0)
    assert (kernel.stores.requests, kernel.stores.conflicts) == (64 + 8 * 4, 32)


@pytest.mark.parametrize("row_bytes,unswizzled", [(128, 8), (64, 4), (32, 2)])
def test_a_swizzled_core_matrix_is_read_in_one_wavefront(row_bytes, unswizzled):
    """8 rows × 16 bytes of one column of a tile. Unswizzled, rows 128 bytes apart start in the same bank: all 8
    in the same 4 banks (8-way); 64 bytes apart, two rows fill the 32 banks, so 4 rows share each 4 (4-way); 32
    bytes, 2-way. The swizzle XORs the chunk with the row among 8 rows of 128 bytes: 8 distinct chunks, 1-way."""
    from explorer.analysis.banks import core_matrix_ways
    from explorer.analysis.tiles import swizzled

    assert core_matrix_ways(row_bytes, swizzle=False) == unswizzled
    assert core_matrix_ways(row_bytes) == 1
    # Row r, chunk c of a 128-byte-wide tile lands in chunk c ^ r (CUTLASS's Swizzle<3, 4, 3>).
    rows, chunks = np.meshgrid(np.arange(8), np.arange(8), indexing="ij")
    assert (swizzled(rows * 128 + chunks * 16, 128) == rows * 128 + (chunks ^ rows) * 16).all()


def test_the_hopper_kernels_shared_tiles_are_not_thread_accesses_and_the_headline_says_so():
    """attention_hopper's 163,880 bytes (Q 128 × 128 halves, two stages of K and V 128 × 128 each, five 8-byte
    mbarriers) are all TMA tiles and barriers: no thread loads or stores them, and the headline says what it
    does not count instead of '0 conflicts'."""
    from explorer.analysis.banks import headline
    from explorer.schedules.matmul_hopper import MatmulHopperKnobs

    built = build(get_preset("attention-hopper").spec)
    (kernel,) = analyze_banks(built).kernels
    assert not kernel.accesses
    tiles = {t.buffer: (t.role, t.bytes, t.tma_copies, t.descriptors, t.swizzle_bytes, t.core_matrix_ways,
                        t.unswizzled_ways) for t in kernel.tiles}
    assert tiles == {"Q_smem": ("tile", 128 * 128 * 2, 2, 1, 128, 1, 8),  # two 64-element swizzled columns
                     "K_smem": ("tile", 2 * 128 * 128 * 2, 2, 1, 128, 1, 8),
                     "V_smem": ("tile", 2 * 128 * 128 * 2, 2, 1, 128, 1, 8),
                     "q_full": ("mbarrier", 8, 0, 0, None, None, None),
                     "full": ("mbarrier", 16, 0, 0, None, None, None),
                     "empty": ("mbarrier", 16, 0, 0, None, None, None)}
    assert sum(t.bytes for t in kernel.tiles) == built.kernels[0].shared_bytes == 163_880
    text = headline(kernel)
    assert "no thread loads or stores shared memory: the TMA unit writes Q_smem, K_smem, V_smem (160.0 KB)" in text
    assert "not count" in text and "conflicts" not in text and "1-way (8-way without it)" in text
    # A narrower swizzle of matmul_hopper: its descriptors say it.
    spec = Spec("matmul_hopper", Matmul(m=256, n=256, k=256, dtype="float16"),
                MatmulHopperKnobs(block_m=128, block_n=128, block_k=32, swizzle="64B"))
    (kernel,) = analyze_banks(build(spec)).kernels
    assert {t.buffer: t.swizzle_bytes for t in kernel.tiles if t.role == "tile"} == {"A_smem": 64, "B_smem": 64}
    assert "64-byte swizzle an 8 × 16-byte core matrix is 1-way (4-way without it)" in headline(kernel)
