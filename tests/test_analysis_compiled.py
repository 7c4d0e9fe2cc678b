"""The as-compiled bank model: unrolled copies, merged repeated loads, hoisting and
vectors, counted by hand; the unrolling plan found from PTX counts."""
import pytest

from explorer.analysis.accesses import kernel_accesses
from explorer.analysis.compiled import (
    Unroll,
    analyze_compiled,
    choose_plan,
    compiled_instructions,
    ptx_kinds,
    static_counts,
)
from explorer.analysis.ncu import shared_instructions
from explorer.build import Spec, build
from explorer.cuda_compile import nvcc_path
from explorer.presets import get_preset
from explorer.schedules.depthwise_blog import DepthwiseBlogKnobs
from explorer.workloads import DepthwiseConv2d

# dw-blog-final-96: the 4×3×3 compute nest unrolled (loops of height ≤ 3), the 10-step
# cooperative fetch unrolled (height 1).
FINAL_PLAN = {"ax0": Unroll(3), "ax0_ax1_fused_0": Unroll(1)}
FINAL_PTX = {"ld.f32": 37, "ld.v4.f32": 2, "st.f32": 11}


def kernel_of(built):
    (kernel,) = kernel_accesses(built.device_mod)
    return kernel


def depthwise_32(y, x):
    knobs = DepthwiseBlogKnobs(blocking_h=32, blocking_w=32, num_thread_y=y, num_thread_x=x,
                               num_vthread_y=1, num_vthread_x=1)
    return build(Spec("depthwise_blog", DepthwiseConv2d(channels=256, height=32, width=32), knobs))


def test_unrolled_final_schedule_counts_by_hand():
    counts = static_counts(compiled_instructions(kernel_of(build(get_preset("dw-blog-final-96").spec)), FINAL_PLAN))
    # Input: rows ty*4 + 0..5 (4 outputs + 2 halo) × 3 columns × 2 vthreads = 36 scalar loads;
    # filter: 9 uniform taps = two 128-bit loads + 1 scalar; stores: 10 fetch steps + 1 filter.
    assert counts == {("ld", 1): 37, ("ld", 4): 2, ("st", 1): 11}
    assert ptx_kinds(FINAL_PTX) == counts


def test_plan_is_found_from_ptx_counts():
    plan, distance = choose_plan(kernel_of(build(get_preset("dw-blog-final-96").spec)), FINAL_PTX)
    assert distance == 0 and plan["ax0"] == Unroll(3) and plan["ax0_ax1_fused_0"] == Unroll(1)
    assert choose_plan(kernel_of(build(get_preset("dw-blog-final-96").spec)), {}) == ({}, None)


def test_hoisted_filter_and_partially_unrolled_rows():
    # (y, x) = (1, 32): each thread computes 32 rows; nvcc unrolls the 3×3 taps and 2 rows
    # per iteration. Per 2 rows: 4 input rows × 3 columns = 12 loads; the 9 filter taps do
    # not depend on the row loop and are loaded once (v4, v4, scalar).
    banks = analyze_compiled(kernel_of(depthwise_32(1, 32)), {"ax0": Unroll(2, 2), "ax0_ax1_fused_0": Unroll(0, 4)})
    loads = [a for a in banks.accesses if a.op == "load"]
    pad = [a for a in loads if a.buffer == "PaddedInput_shared"]
    filt = [a for a in loads if a.buffer == "Filter_shared"]
    assert len(pad) == 12 and sorted(a.access_bytes for a in filt) == [4, 16, 16]
    blocks = 256  # one warp each
    assert all(a.requests == blocks * 16 for a in pad) and all(a.requests == blocks for a in filt)
    assert banks.loads.requests == blocks * (16 * 12 + 3)


def test_64_bit_loads_of_a_column_of_threads_are_conflict_free():
    # (y, x) = (32, 1): as scalar loads, rows 34 words apart are 2-way conflicts; nvcc pairs
    # columns 2o, 2o+1 into 64-bit loads, served per half-warp: ty 0-15 cover banks 2·ty, 2·ty+1.
    banks = analyze_compiled(kernel_of(depthwise_32(32, 1)), {"ax0": Unroll(2, 2), "ax0_ax1_fused_0": Unroll(0, 4)})
    pad = [a for a in banks.accesses if a.op == "load" and a.buffer == "PaddedInput_shared"]
    assert pad and all(a.access_bytes == 8 and a.conflicts == 0 for a in pad)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc is not installed")
def test_ptx_of_the_final_schedule():
    built = build(get_preset("dw-blog-final-96").spec)
    assert shared_instructions(built.cuda, built.target.arch) == {"main_kernel": FINAL_PTX}
