"""Shareable links (explorer.urlstate): query parameters <-> Spec, through the dataclasses."""
import pytest

from explorer import urlstate
from explorer.build import Spec
from explorer.errors import ExplorerError, InvalidKnobs, InvalidWorkload, PresetError
from explorer.presets import all_presets, get_preset
from explorer.schedules.depthwise_blog import DepthwiseBlogKnobs
from explorer.workloads import DepthwiseConv2d


@pytest.mark.parametrize("preset", sorted(all_presets()))
def test_every_preset_round_trips(preset):
    spec = get_preset(preset).spec
    assert urlstate.from_query(urlstate.to_query(spec, preset)) == (spec, preset)
    assert urlstate.from_query(urlstate.to_query(spec)) == (spec, None)


def test_query_is_plain_text():
    spec = get_preset("dw-blog-final-96").spec.with_knobs(num_thread_x=8, unroll=True)
    query = urlstate.to_query(spec, "dw-blog-final-96")
    assert query["template"] == "depthwise_blog"
    assert query["workload"] == "depthwise_conv2d"
    assert query["preset"] == "dw-blog-final-96"
    assert query["knob.num_thread_x"] == "8"
    assert query["knob.unroll"] == "true"
    assert query["shape.height"] == "96"
    assert all(isinstance(v, str) for v in query.values())


def test_missing_fields_come_from_the_preset():
    spec, preset = urlstate.from_query({"preset": "dw-blog-channel-21", "knob.num_thread_x": "4"})
    assert preset == "dw-blog-channel-21"
    assert spec == get_preset("dw-blog-channel-21").spec.with_knobs(num_thread_x=4)


def test_missing_fields_come_from_the_defaults():
    spec, preset = urlstate.from_query({"template": "depthwise_blog", "shape.height": "32", "knob.unroll": "yes"})
    assert preset is None
    assert spec == Spec("depthwise_blog", DepthwiseConv2d(height=32), DepthwiseBlogKnobs(unroll=True))


def test_repeated_key_counts_once_and_other_keys_are_ignored():
    spec, _ = urlstate.from_query({"template": "depthwise_blog", "knob.num_thread_y": ["2", "4"], "utm_source": "chat"})
    assert spec.knobs.num_thread_y == 4


def test_a_link_that_changes_the_template_drops_the_preset_values():
    spec, preset = urlstate.from_query({"preset": "dw-blog-final-96", "template": "matmul"})
    assert spec.template == "matmul" and spec.workload == spec.template_def.default_workload()
    assert preset == "dw-blog-final-96"


@pytest.mark.parametrize("params,error,fragment", [
    ({"template": "depthwise_blog", "knob.num_thread_x": "3"}, InvalidKnobs, "num_thread_x"),
    ({"template": "depthwise_blog", "knob.num_thread_x": "__import__('os')"}, InvalidKnobs, "cannot read"),
    ({"template": "depthwise_blog", "knob.warp_size": "32"}, InvalidKnobs, "warp_size"),
    ({"template": "depthwise_blog", "shape.height": "0"}, InvalidWorkload, "height"),
    ({"template": "depthwise_blog", "workload": "matmul"}, ExplorerError, "schedules"),
    ({"template": "nope"}, ExplorerError, "Unknown schedule template"),
    ({"template": "depthwise_blog", "workload": "nope"}, ExplorerError, "Unknown workload"),
    ({"preset": "nope"}, PresetError, "No preset"),
    ({"knob.unroll": "true"}, ExplorerError, "neither a template nor a preset"),
])
def test_bad_links_fail_with_one_sentence(params, error, fragment):
    with pytest.raises(error) as raised:
        urlstate.from_query(params)
    assert fragment in str(raised.value)
    assert "\n" not in str(raised.value)


def test_has_spec():
    assert urlstate.has_spec({"preset": "x"}) and urlstate.has_spec({"template": "x"})
    assert not urlstate.has_spec({}) and not urlstate.has_spec({"utm_source": "chat"})
