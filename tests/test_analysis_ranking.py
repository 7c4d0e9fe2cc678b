"""The static rank key: its lane and warp figures come from the kernel's launch
(hand-counted on [1,8,32,32], blocking 32×32: 8 blocks of num_thread_y × num_thread_x)."""
import pytest

from explorer.analysis.ranking import STATIC_MODEL, static_score
from explorer.build import Spec, build
from explorer.schedules.depthwise_blog import DepthwiseBlogKnobs
from explorer.workloads import DepthwiseConv2d


def score(threads_y, threads_x):
    spec = Spec("depthwise_blog", DepthwiseConv2d(channels=8, height=32, width=32),
                DepthwiseBlogKnobs(num_vthread_x=1, num_thread_y=threads_y, num_thread_x=threads_x))
    return static_score(build(spec, "h100"))


@pytest.mark.parametrize("threads_y, threads_x, lanes_used, warps_per_sm", [
    (1, 1, 0.031, 1),  # 1 thread: 1 of the warp's 32 lanes
    (1, 16, 0.5, 1),  # 16 threads: half a warp
    (32, 32, 1.0, 32),  # 1,024 threads: 32 full warps; 8 blocks are at most one per SM
])
def test_lanes_and_resident_warps_come_from_the_launch(threads_y, threads_x, lanes_used, warps_per_sm):
    metrics = dict(score(threads_y, threads_x).metrics)
    assert (metrics["lanes_used"], metrics["warps_per_sm"]) == (lanes_used, warps_per_sm)


def test_the_cost_is_the_model_it_states():
    """cost = loads per output × conflict factor ÷ lanes used ÷ min(1, warps per SM ÷ 16)."""
    scored = score(1, 16)
    metrics = dict(scored.metrics)
    expected = metrics["loads_per_output"] * metrics["conflict_factor"] / 0.5 / (1 / 16)
    assert scored.cost == pytest.approx(expected, rel=1e-2)  # the metrics are rounded to 3 places
    assert scored.explanation == STATIC_MODEL and "32 lanes" in STATIC_MODEL
