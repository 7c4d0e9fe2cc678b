"""Golden structure of the matmul template, read from the lowered TIR and the CUDA source.

Most tests use a 128 × 128 × 64 matmul with 32 × 32 block tiles and 2 × 2 thread tiles
(16 × 16 threads), so that builds are fast and sizes can be worked out by hand.
"""
import re

import numpy as np
import pytest

from explorer.build import Spec, build
from explorer.errors import InvalidKnobs
from explorer.presets import get_preset
from explorer.schedules.matmul import TEMPLATE, MatmulKnobs
from explorer.tir_walk import allocations
from explorer.workloads import Matmul

SMALL = Matmul(m=128, n=128, k=64)
BASE = dict(block_m=32, block_n=32, thread_m=2, thread_n=2, block_k=8)
NAIVE = dict(block_m=16, block_n=16, thread_m=1, thread_n=1, shared_a=False, shared_b=False,
             register_tiles=False, local_accumulator=False)


def built(workload=SMALL, **knobs):
    return build(Spec("matmul", workload, MatmulKnobs(**{**BASE, **knobs})), "h100")


def allocs(b):
    (func,) = b.device_mod.functions.values()
    return {a.name: a for a in allocations(func)}


@pytest.mark.parametrize("bm, bn, tm, tn, vy, vx, threads", [
    (32, 32, 2, 2, 1, 1, (16, 16)),
    (64, 32, 4, 1, 2, 1, (32, 8)),  # (x, y): 32 / 1 columns, 64 / (2·4) rows
    (16, 128, 1, 4, 1, 2, (16, 16)),
])
def test_thread_extents_follow_the_tiles(bm, bn, tm, tn, vy, vx, threads):
    b = built(block_m=bm, block_n=bn, thread_m=tm, thread_n=tn, vthread_y=vy, vthread_x=vx)
    (kernel,) = b.kernels
    assert kernel.block == (*threads, 1)
    assert kernel.grid == (128 // bn, 128 // bm, 1)
    assert f"__launch_bounds__({threads[0] * threads[1]})" in b.cuda


@pytest.mark.parametrize("vy, vx", [(1, 1), (2, 1), (1, 2), (2, 2), (4, 2)])
def test_vthreads_multiply_each_threads_outputs(vy, vx):
    # 8 × 8 threads with 2 × 2 thread tiles; each vthread adds another 2 × 2 tile.
    b = built(block_m=8 * 2 * vy, block_n=8 * 2 * vx, vthread_y=vy, vthread_x=vx)
    assert b.kernels[0].block == (8, 8, 1)
    assert allocs(b)["C_local"].shape == (4 * vy * vx,)
    # Expanded vthreads: one store statement per vthread copy.
    assert len(re.findall(r"C\[[^\]]*\] = C_local", b.lowered)) == vy * vx


@pytest.mark.parametrize("shared_a, shared_b", [(True, True), (True, False), (False, True), (False, False)])
def test_a_shared_buffer_exists_exactly_when_its_knob_says_so(shared_a, shared_b):
    b = built(shared_a=shared_a, shared_b=shared_b)
    a = allocs(b)
    assert ("A_shared" in a) == shared_a and ("B_shared" in a) == shared_b
    if shared_a:
        assert a["A_shared"].shape == (32 * 8,) and a["A_shared"].scope == "shared"
    if shared_b:
        assert a["B_shared"].shape == (8 * 32,)
    assert b.kernels[0].shared_bytes == 32 * 8 * 4 * (shared_a + shared_b)
    # The register tiles copy from shared memory where there is some, else from global.
    assert ("A_shared_local" if shared_a else "A_local") in a
    assert ("B_shared_local" if shared_b else "B_local") in a


def test_without_register_tiles_or_accumulator_the_reduction_updates_global_memory():
    a = allocs(built(register_tiles=False, local_accumulator=False))
    assert set(a) == {"A_shared", "B_shared"}
    assert re.search(r"C\[[^\]]*\] = C\[", built(register_tiles=False, local_accumulator=False).lowered)
    assert not re.search(r"C\[[^\]]*\] = C\[", built().lowered)


@pytest.mark.parametrize("pad", [0, 1, 4])
def test_shared_pad_widens_the_row_stride_of_the_shared_tiles(pad):
    b = built(shared_pad=pad)
    a = allocs(b)
    assert a["A_shared"].shape == (32 * (8 + pad),)  # 32 rows of block_k = 8
    assert a["B_shared"].shape == (8 * (32 + pad),)  # 8 rows of block_n = 32
    # Row index × row stride in the loads from shared memory.
    a_read = re.search(r"= A_shared\[threadIdx_y \* \d+ \+ \w+ \* (\d+) \+ \w+\]", b.lowered)
    b_read = re.search(r"= B_shared\[\w+ \* (\d+) \+ threadIdx_x \* \d+ \+ \w+\]", b.lowered)
    assert int(a_read.group(1)) == 8 + pad
    assert int(b_read.group(1)) == 32 + pad


def test_fetch_vector_copies_float4s():
    assert "float4" not in built().cuda
    vector = built(fetch_vector=4)
    assert "float4" in vector.cuda
    assert re.search(r"A_shared\[[^\]]*\] = A\[T.Ramp\(", vector.lowered)


def test_naive_setting_has_no_caches_and_one_output_per_thread():
    b = built(**NAIVE)
    assert allocs(b) == {}
    assert b.kernels[0].block == (16, 16, 1) and b.kernels[0].grid == (8, 8, 1)
    assert re.search(r"for \w+ in range\(64\):", b.lowered)  # the whole reduction, one element


@pytest.mark.parametrize("knobs, named", [
    (dict(block_m=16, vthread_y=4, thread_m=8), ("block_m", "vthread_y", "thread_m")),
    (dict(block_n=8, thread_n=16), ("block_n", "vthread_x", "thread_n")),
    (dict(fetch_vector=4, shared_pad=2), ("fetch_vector", "shared_pad")),
    (dict(fetch_vector=4, block_k=2), ("fetch_vector", "block_k")),
])
def test_impossible_combinations_name_the_knobs(knobs, named):
    with pytest.raises(InvalidKnobs) as error:
        built(**knobs)
    assert error.value.knobs == named


def test_a_vector_fetch_needs_rows_that_hold_whole_vectors():
    with pytest.raises(InvalidKnobs, match="k = 66 is not a multiple of 4") as error:
        built(Matmul(m=128, n=128, k=66), fetch_vector=4)
    assert error.value.knobs == ("fetch_vector",)
    built(Matmul(m=128, n=128, k=66), fetch_vector=4, shared_a=False)  # only B is fetched in vectors


def test_too_many_threads_per_block_names_the_tile_knobs():
    with pytest.raises(InvalidKnobs, match="4096 threads") as error:
        built(block_m=64, block_n=64, thread_m=1, thread_n=1)
    assert set(error.value.knobs) == {"block_m", "vthread_y", "thread_m", "block_n", "vthread_x", "thread_n"}


def test_too_much_shared_memory_names_the_shared_knobs():
    with pytest.raises(InvalidKnobs, match="131,072 bytes of shared memory") as error:
        built(Matmul(m=256, n=256, k=64), block_m=256, block_n=256, thread_m=16, thread_n=16, block_k=64)
    assert error.value.knobs == TEMPLATE.shared_knobs


def test_non_dividing_tiles_are_guarded():
    b = built(Matmul(m=48, n=40, k=20))  # 32 × 32 tiles over a 48 × 40 output, k steps of 8
    assert b.kernels[0].grid == (2, 2, 1)
    assert re.search(r"for \w+ in range\(3\):", b.lowered)  # ceil(20 / 8) reduction steps
    # The last row and column of blocks store only the outputs that exist.
    assert re.search(r"if [^\n]*blockIdx_y[^\n]*blockIdx_x[^\n]*:\n\s+C\[", b.lowered)


def test_presets_are_the_naive_and_the_tiled_kernel():
    naive, tiled = get_preset("matmul-naive-1024"), get_preset("matmul-tiled-1024")
    assert naive.spec.workload == tiled.spec.workload == Matmul()
    assert naive.spec.knobs == MatmulKnobs(**NAIVE)
    assert tiled.spec.knobs == MatmulKnobs()
    n = build(naive.spec, "h100")
    assert allocs(n) == {} and n.kernels[0].grid == (64, 64, 1)
    t = build(tiled.spec, "h100")
    (kernel,) = t.kernels
    assert kernel.grid == (16, 16, 1) and kernel.block == (16, 16, 1)
    assert kernel.shared_bytes == (64 * 8 + 8 * 64) * 4
    assert allocs(t)["C_local"].shape == (16,)


@pytest.mark.gpu
@pytest.mark.parametrize("spec", [
    Spec("matmul", Matmul(m=48, n=40, k=20), MatmulKnobs(**NAIVE)),
    Spec("matmul", Matmul(m=48, n=40, k=20),
         MatmulKnobs(fetch_vector=4, vthread_y=2, vthread_x=2, thread_m=2, shared_pad=4)),
    Spec("matmul", SMALL, MatmulKnobs(**BASE, shared_pad=1, register_tiles=False, local_accumulator=False)),
    get_preset("matmul-naive-1024").spec,
    get_preset("matmul-tiled-1024").spec,
], ids=["naive-guarded", "vector-vthreads-pad-guarded", "pad-no-registers", "naive-1024", "tiled-1024"])
def test_the_kernel_matches_numpy_on_the_gpu(spec, run_on_gpu):
    got, expected = run_on_gpu(build(spec))
    tolerance = 1e-5 * spec.workload.reduction_length()
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=tolerance)


def test_transpose_a_stores_the_a_tile_k_major():
    a = allocs(built(transpose_a=True, shared_pad=4))
    assert a["A_shared"].shape == (8 * (32 + 4),)  # 8 rows of block_k, each block_m = 32 (+ pad) long
    # A thread's 2 rows of A are neighbours in shared memory: row index ki, stride 36.
    assert re.search(r"= A_shared\[\w+ \* 36 \+ threadIdx_y \* 2 \+ \w+\]",
                     built(transpose_a=True, shared_pad=4).lowered)


@pytest.mark.parametrize("vector, transpose_a", [(2, False), (2, True), (4, True)])
def test_read_vector_loads_register_tiles_in_vectors(vector, transpose_a):
    cuda = built(thread_m=4, thread_n=4, read_vector=vector, transpose_a=transpose_a).cuda
    vector_type = f"float{vector}"
    assert re.search(rf"\*\({vector_type}\*\)\(B_shared_local_ptr \+ [^=]*= \*\({vector_type}\*\)\(B_shared_ptr", cuda)
    # Without the transpose A's register row is strided in shared memory: scalar reads.
    assert bool(re.search(rf"\({vector_type}\*\)\(A_shared_local_ptr", cuda)) == transpose_a
    assert "float2*)(B_shared_local_ptr" not in built(thread_m=4, thread_n=4).cuda


def test_double_buffer_doubles_the_shared_tiles_and_alternates_them():
    single, double = built(), built(double_buffer=True)
    assert double.kernels[0].shared_bytes == 2 * single.kernels[0].shared_bytes == 2 * 2 * 32 * 8 * 4
    assert allocs(double)["A_shared"].shape == (2 * 32 * 8,)
    # The prologue fetches step 0; the loop fetches step ko + 1 into the other half while
    # multiplying step ko; the epilogue multiplies the last step: 64 / 8 - 1 = 7 iterations.
    assert re.search(r"for \w+ in range\(7\):", double.lowered)
    assert re.search(r"A_shared\[\(\w+ \+ 1 & 1\) \* 256 \+", double.lowered)
    assert "& 1) * 256" not in single.lowered


@pytest.mark.parametrize("step, unrolled", [(0, False), (16, False), (512, True)])
def test_unroll_max_step_unrolls_the_threads_loops_up_to_that_trip_count(step, unrolled):
    # A step of the 2 × 2 tile is 8 (ki) × 2 × 2 = 32 multiply-adds: over 16, under 512.
    cuda = built(unroll_max_step=step).cuda
    assert ("for (int ax2_1 = 0" not in cuda) == unrolled


def test_hoist_init_zeroes_the_accumulators_before_the_reduction():
    assert re.search(r"if \w+ \* 8 \+ \w+ == 0:", built().lowered)
    hoisted = built(hoist_init=True).lowered
    assert not re.search(r"== 0:", hoisted)
    assert hoisted.index("C_local[") < hoisted.index("for ax2_0")


@pytest.mark.parametrize("knobs, named", [
    (dict(transpose_a=True, shared_a=False), ("transpose_a", "shared_a")),
    (dict(double_buffer=True, shared_a=False, shared_b=False), ("double_buffer", "shared_a", "shared_b")),
    (dict(read_vector=4, register_tiles=False), ("read_vector", "register_tiles", "shared_b")),
    (dict(read_vector=4), ("read_vector", "thread_n")),  # 2-wide thread tiles
    (dict(read_vector=2, thread_n=4, transpose_a=True, thread_m=1, block_m=16), ("read_vector", "thread_m")),
])
def test_new_knobs_refuse_what_they_cannot_do(knobs, named):
    with pytest.raises(InvalidKnobs) as error:
        built(**knobs)
    assert error.value.knobs == named
