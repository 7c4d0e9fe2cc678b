"""Golden structure of the 2017 blog's depthwise schedule, read from the lowered TIR."""
import re

import pytest

from explorer.build import Spec, build
from explorer.schedules.depthwise_blog import DepthwiseBlogKnobs
from explorer.tir_walk import allocations
from explorer.workloads import DepthwiseConv2d


def built(workload=None, **knobs):
    workload = workload or DepthwiseConv2d(height=32, width=32)
    return build(Spec("depthwise_blog", workload, DepthwiseBlogKnobs(**knobs)))


def allocs(b, kernel="main_kernel"):
    func = next(f for gv, f in b.device_mod.functions.items() if gv.name_hint == kernel)
    return {a.name: a for a in allocations(func)}


@pytest.mark.parametrize("ty, tx", [(8, 32), (4, 32), (1, 32), (32, 1), (8, 8)])
def test_thread_extents_equal_the_knobs(ty, tx):
    b = built(num_thread_y=ty, num_thread_x=tx, num_vthread_x=1)
    (kernel,) = b.kernels
    assert kernel.block == (tx, ty, 1)
    assert kernel.grid == (1, 256, 1)  # one 32x32 block per channel of a 32x32 image
    assert f"__launch_bounds__({tx * ty})" in b.cuda


def test_blocking_splits_a_channel_into_blocks():
    b = built(DepthwiseConv2d(height=96, width=96))
    assert b.kernels[0].grid == (9, 256, 1)  # (96/32)^2 blocks per channel


def test_whole_channel_block_stages_the_padded_channel_in_shared_memory():
    b = built(DepthwiseConv2d(height=21, width=21), blocking_h=0, blocking_w=0, num_thread_y=1,
              num_thread_x=1, num_vthread_x=1)
    assert b.kernels[0].grid == (1, 256, 1)
    assert allocs(b)["PaddedInput_shared"].shape == (23 * 23,)  # 21 + 2 halo


@pytest.mark.parametrize("scope", ["shared", "local", "none"])
def test_a_shared_buffer_exists_exactly_when_its_knob_says_shared(scope):
    b = built(input_cache=scope, filter_cache=scope)
    names = {name: a.scope for name, a in allocs(b).items()}
    assert ("PaddedInput_shared" in names) == (scope == "shared")
    assert ("Filter_shared" in names) == (scope == "shared")
    assert all(s != "shared" for s in names.values()) or scope == "shared"
    if scope == "local":
        assert names["PaddedInput_local"] == "local" and names["Filter_local"] == "local"


@pytest.mark.parametrize("vy, vx", [(1, 1), (1, 2), (2, 2), (1, 4)])
def test_vthreads_multiply_each_threads_outputs(vy, vx):
    # 32x32 block, 8x8 threads: 16 outputs per thread whatever the vthreads; the vthreads
    # only change which ones (strided copies), visible as vy*vx accumulators per row tile.
    b = built(num_thread_y=8, num_thread_x=8, num_vthread_y=vy, num_vthread_x=vx)
    assert allocs(b)["DepthwiseConv2d_local"].shape == (16,)
    stores = re.findall(r"DepthwiseConv2d\[[^\]]*\] = DepthwiseConv2d_local", b.lowered)
    # vthreads are expanded in the lowered TIR: one store statement per vthread copy.
    assert len(stores) == vy * vx


def test_no_local_accumulator_writes_global_memory_in_the_reduction():
    b = built(local_accumulator=False)
    assert "DepthwiseConv2d_local" not in allocs(b)


def global_stores(cuda: str) -> set[str]:
    """Kernel parameters (global buffers) that the CUDA source assigns to."""
    params = set(re.findall(r"float\* __restrict__ (\w+)_ptr", cuda))
    return params & set(re.findall(r"(\w+)_ptr\[[^;]*\] = ", cuda))


def test_fused_epilogue_is_one_kernel_writing_only_the_relu_output():
    b = built(DepthwiseConv2d(height=32, width=32, epilogue=True))
    assert len(b.kernels) == 1
    assert global_stores(b.cuda) == {"Relu"}
    assert allocs(b)["DepthwiseConv2d_local"].scope == "local"  # the convolution stays in registers
    assert "DepthwiseConv2d_ptr" not in b.cuda


def test_unfused_epilogue_round_trips_through_global_memory():
    b = built(DepthwiseConv2d(height=32, width=32, epilogue=True), fuse_epilogue=False)
    assert len(b.kernels) == 3  # convolution, scale_shift, ReLU


def test_unroll_unrolls_the_filter_loops():
    rolled, unrolled = built(), built(unroll=True)
    assert "for (int ax1 = 0; ax1 < 3" in rolled.cuda
    assert "for (int ax1 = 0; ax1 < 3" not in unrolled.cuda


def test_cached_build_is_the_same_object():
    assert built() is built()
