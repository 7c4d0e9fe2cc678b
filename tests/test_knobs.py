"""Knob dataclasses: validation, parsing, and the errors a student sees."""
import dataclasses

import pytest

from explorer.errors import InvalidKnobs, InvalidWorkload
from explorer.knobs import factorizations
from explorer.schedules.depthwise_blog import DepthwiseBlogKnobs
from explorer.workloads import Conv2d, DepthwiseConv2d


def test_defaults_are_the_blog_final_schedule():
    k = DepthwiseBlogKnobs()
    assert (k.blocking_h, k.blocking_w, k.num_thread_y, k.num_thread_x, k.num_vthread_y, k.num_vthread_x) == (
        32, 32, 8, 16, 1, 2,
    )


def test_knobs_are_frozen_and_hashable():
    k = DepthwiseBlogKnobs()
    with pytest.raises(dataclasses.FrozenInstanceError):
        k.num_thread_x = 4  # type: ignore[misc]
    assert hash(k) == hash(DepthwiseBlogKnobs()) and {k: 1}[DepthwiseBlogKnobs()] == 1


@pytest.mark.parametrize(
    "changes, knob",
    [
        ({"num_thread_x": 3}, "num_thread_x"),
        ({"num_thread_x": "8"}, "num_thread_x"),
        ({"num_thread_x": True}, "num_thread_x"),
        ({"input_cache": "global"}, "input_cache"),
        ({"unroll": 1}, "unroll"),
    ],
)
def test_out_of_domain_values_name_the_knob(changes, knob):
    with pytest.raises(InvalidKnobs) as error:
        DepthwiseBlogKnobs(**changes)
    assert error.value.knobs == (knob,)
    assert knob in str(error.value) and "allowed" in str(error.value)


def test_unknown_knob_is_rejected_with_the_list_of_knobs():
    with pytest.raises(InvalidKnobs, match="There is no knob 'threads'; the knobs are: .*num_thread_x"):
        DepthwiseBlogKnobs.from_mapping({"threads": 8})


def test_parse_from_strings_round_trips():
    k = DepthwiseBlogKnobs().replace(num_thread_x=32, unroll=True, input_cache="local")
    assert DepthwiseBlogKnobs.from_strings(k.to_strings()) == k
    assert DepthwiseBlogKnobs.from_strings({"unroll": "on"}).unroll is True
    with pytest.raises(InvalidKnobs, match="cannot read 'eight'"):
        DepthwiseBlogKnobs.from_strings({"num_thread_x": "eight"})


def test_changed_from_lists_only_changed_knobs():
    a = DepthwiseBlogKnobs()
    assert a.replace(num_thread_y=4, num_thread_x=32).changed_from(a) == ("num_thread_y", "num_thread_x")


def test_workload_parameters_use_their_own_error_type():
    with pytest.raises(InvalidWorkload, match="Shape parameter 'channels'"):
        DepthwiseConv2d(channels=0)
    with pytest.raises(InvalidWorkload, match="more than"):
        DepthwiseConv2d(batch=16, channels=2048, height=1024, width=1024)


def test_factorizations_counts_ordered_factorizations():
    # 12 = 2^2 * 3: ordered 2-way factorizations are its 6 divisors.
    assert len(factorizations(12, 2)) == 6
    # 7 is prime: 4-way splits put 7 in one of 4 places (AutoTVM's "len=4" for tile_y on 7).
    assert factorizations(7, 4) == ((1, 1, 1, 7), (1, 1, 7, 1), (1, 7, 1, 1), (7, 1, 1, 1))
    # 512 = 2^9 into 4 parts: C(9+3, 3) = 220, as AutoTVM's tile_f for CO=512.
    assert len(factorizations(512, 4)) == 220
    assert all(a * b * c * d == 512 for a, b, c, d in factorizations(512, 4))
    assert Conv2d().out_height == 7
