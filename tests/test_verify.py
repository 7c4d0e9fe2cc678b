"""The five schedules TVM lets through silently are each rejected with a clear error."""
import pytest
import tvm

from explorer.build import Spec, build, scheduled
from explorer.errors import InvalidKnobs
from explorer.presets import get_preset
from explorer.schedules.common import bind, new_schedule, schedule_errors
from explorer.schedules.depthwise_blog import TEMPLATE, DepthwiseBlogKnobs
from explorer.targets import resolve_target
from explorer.verify import verify_scheduled
from explorer.workloads import DepthwiseConv2d

H100 = resolve_target("h100")
SMALL = DepthwiseConv2d(channels=4, height=32, width=32)


def test_more_than_1024_threads_per_block_names_the_thread_knobs():
    spec = Spec("depthwise_blog", DepthwiseConv2d(height=64, width=64),
                DepthwiseBlogKnobs(blocking_h=64, blocking_w=64, num_thread_y=64, num_thread_x=32, num_vthread_x=2))
    with pytest.raises(InvalidKnobs, match=r"2048 threads .* more than the 1024") as error:
        build(spec, H100)
    assert set(error.value.knobs) == {"num_thread_x", "num_thread_y"}


def test_too_much_static_shared_memory_names_the_tiling_knobs():
    # One block per whole 128x128 channel stages 130*130 floats = 67,600 bytes > 48 KB.
    spec = Spec("depthwise_blog", DepthwiseConv2d(channels=8, height=128, width=128),
                DepthwiseBlogKnobs(blocking_h=0, blocking_w=0, num_thread_y=8, num_thread_x=8, num_vthread_x=1))
    with pytest.raises(InvalidKnobs, match=r"67,6\d\d bytes of shared memory") as error:
        build(spec, H100)
    assert {"blocking_h", "blocking_w", "input_cache"} <= set(error.value.knobs)


def _bound_output(sch):
    """Bind the output block like the template would, returning its thread loops."""
    block = sch.get_sblock("DepthwiseConv2d")
    b, c, h, w, _, _ = sch.get_loops(block)
    bind(sch, sch.fuse(b, c), "blockIdx.x")
    ty, _ = sch.split(h, factors=[8, None])
    tx, _ = sch.split(w, factors=[8, None])
    return block, ty, tx


def test_same_thread_tag_on_two_nested_loops_is_rejected():
    sch = new_schedule(SMALL)
    sch.compute_inline(sch.get_sblock("PaddedInput"))
    _, ty, tx = _bound_output(sch)
    sch.bind(ty, "threadIdx.x")  # TVM accepts this and computes only a diagonal
    sch.bind(tx, "threadIdx.x")
    with pytest.raises(InvalidKnobs, match="two loops bound to threadIdx.x.*wrong results") as error:
        verify_scheduled(TEMPLATE, sch.mod, H100)
    assert error.value.knobs == ("num_thread_x",)


def test_a_stage_left_outside_the_thread_loops_is_rejected_before_it_can_crash():
    sch = new_schedule(SMALL)
    sch.compute_inline(sch.get_sblock("PaddedInput"))
    block = sch.get_sblock("DepthwiseConv2d")
    sch.cache_write(block, 0, "local")  # the write-back stage is never placed under the threads
    _, ty, tx = _bound_output(sch)
    bind(sch, ty, "threadIdx.y")
    bind(sch, tx, "threadIdx.x")
    with pytest.raises(InvalidKnobs, match="'DepthwiseConv2d_local' is not placed under .* crashes"):
        verify_scheduled(TEMPLATE, sch.mod, H100)


def test_binding_a_loop_twice_is_refused():
    sch = new_schedule(SMALL)
    _, ty, _ = _bound_output(sch)
    bind(sch, ty, "threadIdx.y")
    with pytest.raises(InvalidKnobs, match="already bound to threadIdx.y"):
        bind(sch, ty, "threadIdx.x")


def test_schedule_errors_become_invalid_knobs_with_tvms_reason():
    sch = new_schedule(SMALL)
    knobs = DepthwiseBlogKnobs()
    with pytest.raises(InvalidKnobs, match="TVM cannot apply this schedule") as error:
        with schedule_errors(knobs):
            loop = sch.get_loops(sch.get_sblock("DepthwiseConv2d"))[2]
            sch.split(loop, factors=[2, 2])  # 2*2 does not cover 32
    assert "num_thread_x" in error.value.knobs
    assert "\n" not in str(error.value)


def test_a_valid_schedule_passes_every_check():
    b = build(Spec("depthwise_blog", SMALL, DepthwiseBlogKnobs()), H100)
    assert b.kernels and b.cuda.count("__global__") == 2  # declaration + definition
    assert isinstance(b.device_mod, tvm.IRModule)


def test_scheduled_is_the_builds_schedule_and_refuses_what_the_build_refuses_before_lowering():
    spec = get_preset("dw-blog-final-96").spec
    tvm.ir.assert_structural_equal(scheduled(spec, H100).mod, build(spec, H100).schedule_mod)
    wide = spec.with_knobs(num_thread_x=64)  # 2 vthreads × 64 threads for a block 32 columns wide
    with pytest.raises(InvalidKnobs, match="some threads would have no output") as error:
        scheduled(wide, "h100")
    assert "num_thread_x" in error.value.knobs
