"""Golden structure of the flattened depthwise schedule, read from the built kernel."""
import re

import pytest

from explorer.build import Spec, build
from explorer.schedules.depthwise_flat import DepthwiseFlatKnobs
from explorer.tir_walk import allocations
from explorer.workloads import DepthwiseConv2d

SMALL = DepthwiseConv2d(channels=8, height=21, width=21)


def built(workload=SMALL, **knobs):
    return build(Spec("depthwise_flat", workload, DepthwiseFlatKnobs(**knobs)))


def allocs(b):
    (func,) = b.device_mod.functions.values()
    return {a.name: a.scope for a in allocations(func)}


@pytest.mark.parametrize("threads, per_thread, blocks", [
    (32, 1, 111),   # 8*21*21 = 3528 outputs -> ceil(3528 / 32)
    (128, 3, 10),   # 8*21 rows of 7 runs = 1176 threads -> ceil(1176 / 128)
    (64, 7, 8),     # 8*21 rows of 3 runs = 504 threads -> ceil(504 / 64)
    (256, 4, 4),    # 21 = 6 runs of 4 (last one guarded): 8*21*6 = 1008 -> ceil(1008 / 256)
])
def test_grid_and_block_follow_the_flattened_output(threads, per_thread, blocks):
    (kernel,) = built(threads=threads, outputs_per_thread=per_thread).kernels
    assert kernel.block == (threads, 1, 1)
    assert kernel.grid == (blocks, 1, 1)
    assert kernel.shared_bytes == 0


def test_each_thread_stores_its_run_of_consecutive_outputs():
    cuda = built(threads=64, outputs_per_thread=3).cuda
    stores = re.findall(r"DepthwiseConv2d_ptr\[(.*)\] = DepthwiseConv2d_local_ptr\[(\d)\]", cuda)
    assert [local for _, local in stores] == ["0", "1", "2"]
    # 64 threads × 3 outputs per block; thread t starts at 3t: consecutive runs, no gaps.
    assert all("(((int)blockIdx.x) * 192) + (((int)threadIdx.x) * 3))" in index for index, _ in stores)


@pytest.mark.parametrize("input_cache, filter_cache", [("none", "none"), ("local", "none"), ("none", "local"),
                                                       ("local", "local")])
def test_caches_are_per_thread_registers_and_nothing_is_shared(input_cache, filter_cache):
    scopes = allocs(built(outputs_per_thread=3, input_cache=input_cache, filter_cache=filter_cache))
    assert ("PaddedInput_local" in scopes) == (input_cache == "local")
    assert ("Filter_local" in scopes) == (filter_cache == "local")
    assert set(scopes.values()) == {"local"}  # the accumulator at least; no shared memory, no barrier


def test_the_input_window_covers_the_run_and_the_filter_halo():
    b = built(outputs_per_thread=3, input_cache="local")
    (func,) = b.device_mod.functions.values()
    window = {a.name: a for a in allocations(func)}["PaddedInput_local"]
    assert window.shape == (3 * (3 + 2),)  # 3 filter rows of 3 outputs + 2 halo columns


def test_unroll_removes_the_per_thread_loops():
    assert "for (" not in built(outputs_per_thread=2).cuda
    assert "for (" in built(outputs_per_thread=2, unroll=False).cuda


def test_the_epilogue_is_fused_into_the_same_kernel():
    b = built(DepthwiseConv2d(channels=8, height=21, width=21, epilogue=True), outputs_per_thread=3)
    assert len(b.kernels) == 1
    assert set(re.findall(r"(\w+)_ptr\[[^;]*\] = ", b.cuda)) & {"Relu", "DepthwiseConv2d"} == {"Relu"}
