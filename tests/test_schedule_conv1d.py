"""Golden structure of the 1-D convolution blog's schedules (naive, v1 … v5), read from
the lowered device TIR. Expected extents are the blog's own ``launch_thread`` lines."""
from collections import Counter

import numpy as np
import pytest
import tvm
from tvm import tirx
from tvm.tirx.analysis import undefined_vars

from explorer.build import Spec, build
from explorer.errors import InvalidKnobs
from explorer.presets import get_preset
from explorer.schedules.conv1d import TEMPLATE, Conv1dKnobs
from explorer.tir_walk import allocations, walk
from explorer.workloads import Conv1d

BLOG = Conv1d(input_length=16384, filter_length=32)  # 16,415 outputs
SMALL = Conv1d(input_length=1000, filter_length=32)  # 1,031 outputs
PLAIN = dict(formulation="filter_reduction", threads_y=1, threads_x=1, local_accumulator=False,
             filter_shared=False, reduction_split=1, unroll=False)


def built(workload=SMALL, **knobs):
    return build(Spec("conv1d", workload, Conv1dKnobs(**{**PLAIN, **knobs})))


def kernel_func(b):
    (func,) = b.device_mod.functions.values()
    return func


def allocs(b):
    return {a.name: a for a in allocations(kernel_func(b))}


def serial_loop_extents(b) -> list[int]:
    return [int(s.extent) for s, _ in walk(kernel_func(b).body) if isinstance(s, tirx.For)]


def stores(b, buffer):
    return [(s, loops) for s, loops in walk(kernel_func(b).body)
            if isinstance(s, tirx.BufferStore) and s.buffer.name == buffer]


def accumulations(b, buffer):
    """Stores that add a term (not the zero initialisation)."""
    return [s for s, _ in stores(b, buffer) if not isinstance(s.value, tirx.FloatImm)]


@pytest.mark.parametrize(
    "preset, grid, block, shared_floats",
    [
        ("conv1d-naive", 16415, (1, 1, 1), 0),  # one output per block
        ("conv1d-v1", 16415, (1, 1, 1), 0),
        ("conv1d-v2", 2052, (8, 1, 1), 0),  # ceil(16415 / 8)
        ("conv1d-v3", 1026, (4, 4, 1), 0),  # ceil(16415 / 16), 4 x 4 threads
        ("conv1d-v4", 513, (32, 1, 1), 4),  # ceil(16415 / 32); W_shared holds one 4-tap chunk
        ("conv1d-v5", 513, (4, 8, 1), 8),  # threadIdx.x = 4, threadIdx.y = 8; 8-tap chunk
    ],
)
def test_presets_launch_the_blogs_grids(preset, grid, block, shared_floats):
    b = build(get_preset(preset).spec)
    (kernel,) = b.kernels
    assert kernel.grid == (grid, 1, 1) and kernel.block == block
    assert kernel.shared_bytes == 4 * shared_floats


def test_the_full_reduction_loops_over_every_position_the_filter_reduction_over_the_taps():
    assert serial_loop_extents(built(formulation="full_reduction")) == [1000 + 32 - 1]
    assert serial_loop_extents(built()) == [32]


@pytest.mark.parametrize("ty, tx", [(1, 1), (1, 8), (4, 4), (8, 4), (1, 32), (2, 128)])
def test_thread_extents_equal_the_knobs(ty, tx):
    b = built(threads_y=ty, threads_x=tx)
    (kernel,) = b.kernels
    assert kernel.block == (tx, ty, 1)
    assert kernel.grid == (-(-1031 // (ty * tx)), 1, 1)
    # A unit thread axis is not bound at all (the blog's v2 has no threadIdx.y).
    assert ("threadIdx.y" in b.lowered) == (ty > 1)
    assert ("threadIdx.x" in b.lowered) == (tx > 1)


@pytest.mark.parametrize("filter_shared", [False, True])
@pytest.mark.parametrize("local_accumulator", [False, True])
def test_buffers_exist_exactly_when_their_knobs_say_so(filter_shared, local_accumulator):
    b = built(threads_x=32, filter_shared=filter_shared, local_accumulator=local_accumulator, reduction_split=4)
    scopes = {name: (a.scope, a.shape) for name, a in allocs(b).items()}
    assert scopes.get("W_shared") == (("shared", (4,)) if filter_shared else None)  # one 4-tap chunk
    assert scopes.get("B_local") == (("local", (1,)) if local_accumulator else None)  # one output per thread
    # Without the register accumulator, every term is added in global memory.
    assert len(accumulations(b, "B_local" if local_accumulator else "B")) == 1


@pytest.mark.parametrize("split", [2, 4, 8, 16])
def test_the_reduction_split_makes_an_outer_and_an_inner_loop(split):
    b = built(threads_x=32, local_accumulator=True, reduction_split=split)
    assert serial_loop_extents(b) == [32 // split, split]


@pytest.mark.parametrize("split", [4, 8])
def test_unroll_replaces_the_inner_loop_by_one_statement_per_tap(split):
    b = built(threads_x=32, local_accumulator=True, reduction_split=split, unroll=True)
    assert serial_loop_extents(b) == [32 // split]
    adds = accumulations(b, "B_local")
    assert len(adds) == split


def test_the_shared_filter_chunk_is_loaded_once_per_step_by_one_thread_per_tap():
    b = build(get_preset("conv1d-v5").spec)  # 8 x 4 threads, 8-tap chunks
    ((store, loops),) = stores(b, "W_shared")
    # Only the outer reduction loop (32 / 8 steps) encloses the copy: no thread loops over
    # the chunk.
    assert [int(loop.extent) for loop in loops] == [4]
    # Evaluate the copy's guard and index for every thread of the block: each of the 8
    # taps is written by exactly one thread.
    (guard,) = [s.condition for s, _ in walk(kernel_func(b).body)
                if isinstance(s, tirx.IfThenElse) and s.then_case.same_as(store)]
    thread = {v.name: v for v in undefined_vars(store.indices[0])}
    assert set(thread) == {"threadIdx.y", "threadIdx.x"}
    writers = Counter()
    for ty in range(8):
        for tx in range(4):
            analyzer = tvm.sym.Analyzer()
            analyzer.bind(thread["threadIdx.y"], tirx.const(ty, "int32"))
            analyzer.bind(thread["threadIdx.x"], tirx.const(tx, "int32"))
            if int(analyzer.simplify(guard)):
                writers[int(analyzer.simplify(store.indices[0]))] += 1
    assert writers == {tap: 1 for tap in range(8)}
    # A barrier before the copy (the previous chunk is still being read) and one after it.
    assert b.lowered.count('T.tvm_storage_sync("shared")') == 2


@pytest.mark.parametrize(
    "knobs, at_fault",
    [
        (dict(reduction_split=1, unroll=True), {"unroll", "reduction_split"}),
        (dict(formulation="full_reduction", filter_shared=True), {"filter_shared", "formulation"}),
        (dict(reduction_split=64), {"reduction_split"}),  # the filter has 32 taps
        (dict(threads_y=2, threads_x=1024), {"threads_y", "threads_x"}),  # more threads than the 1,031 outputs
    ],
)
def test_impossible_combinations_name_the_knobs_at_fault(knobs, at_fault):
    with pytest.raises(InvalidKnobs) as error:
        built(**knobs)
    assert set(error.value.knobs) == at_fault


def test_more_than_1024_threads_per_block_names_both_thread_knobs():
    with pytest.raises(InvalidKnobs, match="2048 threads") as error:
        built(BLOG, threads_y=64, threads_x=32)
    assert set(error.value.knobs) == set(TEMPLATE.knobs_for_tags(["threadIdx.x", "threadIdx.y"])) == {
        "threads_y", "threads_x"}


@pytest.mark.gpu
@pytest.mark.parametrize("preset", ["conv1d-naive", "conv1d-v1", "conv1d-v2", "conv1d-v3", "conv1d-v4", "conv1d-v5"])
def test_the_kernel_matches_numpy_on_the_gpu(preset, run_on_gpu):
    got, expected = run_on_gpu(build(get_preset(preset).spec))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5 * BLOG.reduction_length())
