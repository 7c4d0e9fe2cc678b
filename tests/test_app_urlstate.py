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


# -- a link that is partly wrong: the rest of it still opens ------------------------------------


def test_a_link_with_one_bad_parameter_keeps_the_rest():
    link = urlstate.read_link({"preset": "reduce-2-interleaved-strided", "knob.threads": "7"})
    assert (link.spec, link.preset) == (get_preset("reduce-2-interleaved-strided").spec, "reduce-2-interleaved-strided")
    assert [d.key for d in link.dropped] == ["knob.threads"]
    assert link.summary() == "knob.threads (Knob 'threads' = 7 is not allowed; allowed: 64, 128, 256, 512, 1024.)"


def test_each_bad_value_is_left_out_with_its_reason_and_the_good_ones_kept():
    base = get_preset("dw-blog-final-96").spec
    link = urlstate.read_link({"preset": "dw-blog-final-96", "knob.num_thread_x": "7", "knob.unroll": "true",
                               "knob.nope": "1", "shape.height": "0", "shape.width": "64", "utm_source": "chat"})
    assert link.spec == Spec("depthwise_blog", base.workload.replace(width=64), base.knobs.replace(unroll=True))
    assert [d.key for d in link.dropped] == ["shape.height", "knob.num_thread_x", "knob.nope"]
    assert all("\n" not in str(d) for d in link.dropped)


def test_values_valid_only_together_are_kept_together():
    # 4096 × 32000 float32 is too large a tensor for the default 4096 rows: the rows come first in the link.
    spec = get_preset("rowwise-softmax-vocabulary").spec
    link = urlstate.read_link(urlstate.to_query(spec, "rowwise-softmax-vocabulary"))
    assert (link.spec, link.dropped) == (spec, ())


def test_an_unknown_preset_or_template_is_left_out_and_the_rest_applies():
    link = urlstate.read_link({"preset": "nope", "template": "depthwise_blog", "knob.unroll": "true"})
    assert link.preset is None and link.spec.knobs == DepthwiseBlogKnobs(unroll=True)
    assert [d.key for d in link.dropped] == ["preset"] and "No preset named 'nope'" in link.summary()
    assert "python -m explorer" not in link.summary()  # no command line in a browser's sentence
    link = urlstate.read_link({"preset": "dw-blog-final-96", "template": "nope", "workload": "matmul"})
    assert link.spec == get_preset("dw-blog-final-96").spec and [d.key for d in link.dropped] == ["template",
                                                                                                  "workload"]


def test_a_link_that_names_nothing_usable_opens_nothing_and_says_why():
    link = urlstate.read_link({"knob.x": "<script>alert(1)</script>"})
    assert urlstate.has_spec({"knob.x": "<script>"})  # not ignored in silence: the app says why it opened its default
    assert link.spec is None and link.summary() == "template (This link names neither a template nor a preset.)"
    link = urlstate.read_link({"preset": "nope"})
    assert link.spec is None and "No preset named 'nope'" in link.summary()


def test_a_very_long_value_is_refused_without_being_repeated():
    link = urlstate.read_link({"template": "depthwise_blog", "knob.unroll": "x" * 5000})
    assert link.spec == Spec("depthwise_blog", DepthwiseConv2d(), DepthwiseBlogKnobs())
    assert link.summary() == "knob.unroll (a value of 5,000 characters, longer than any)"
