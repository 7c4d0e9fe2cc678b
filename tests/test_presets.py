"""Every shipped preset loads through its dataclasses and builds CUDA; bad files fail loudly."""
import pytest

from explorer.analysis.races import analyze_races
from explorer.build import build
from explorer.errors import PresetError
from explorer.presets import all_lessons, all_presets, get_preset, load_file

PRESET_IDS = sorted(all_presets())


@pytest.mark.parametrize("preset_id", PRESET_IDS)
def test_every_preset_builds_cuda_source(preset_id):
    preset = get_preset(preset_id)
    b = build(preset.spec, "h100")
    assert "__global__" in b.cuda and b.kernels
    assert preset.claim and preset.source and preset.title


@pytest.mark.parametrize("preset_id", PRESET_IDS)
def test_no_preset_has_a_shared_memory_race(preset_id):
    # The static race check (explorer/analysis/races.py) finds none in any shipped setting, each of which
    # computes the right result; tests/test_analysis_races.py shows it finding the races it should.
    report = analyze_races(build(get_preset(preset_id).spec, "h100"))
    assert not report.races, [race.sentence() for race in report.races]


def test_lessons_have_ordered_steps():
    for lesson in all_lessons():
        assert [p.step for p in lesson.presets] == list(range(1, len(lesson.presets) + 1))
        assert {p.lesson for p in lesson.presets} <= {lesson.id}


def write(tmp_path, text):
    path = tmp_path / "bad.toml"
    path.write_text('[lesson]\nid = "t"\ntitle = "T"\n' + text)
    return path


def test_a_tutorial_table_is_refused_naming_the_lesson_table(tmp_path):
    path = tmp_path / "old.toml"
    path.write_text('[tutorial]\nid = "t"\ntitle = "T"\n')
    with pytest.raises(PresetError, match=r"table is \[lesson\], not \[tutorial\]"):
        load_file(path)


GOOD = """
[[preset]]
id = "p"
title = "P"
source = "s"
template = "depthwise_blog"
claim = "c"
workload = { kind = "depthwise_conv2d", height = 32, width = 32 }
"""


def test_a_good_file_loads(tmp_path):
    (preset,) = load_file(write(tmp_path, GOOD)).presets
    assert preset.spec.workload.height == 32


@pytest.mark.parametrize(
    "edit, message",
    [
        ('knobs = { num_threads_x = 8 }', r"bad.toml preset 'p'.*no knob 'num_threads_x'"),
        ('knobs = { num_thread_x = "8" }', r"bad.toml preset 'p'.*'num_thread_x' = '8' is not allowed"),
        ('knobs = { num_thread_x = 48 }', r"'num_thread_x' = 48 is not allowed"),
        ('colour = "red"', r"bad.toml preset 'p': unknown key\(s\) colour"),
        ('reported = [ { what = "x", value_us = 1.0, gpu = "T4" } ]', r"unknown key\(s\) gpu"),
    ],
)
def test_bad_presets_name_the_file_and_key(tmp_path, edit, message):
    with pytest.raises(PresetError, match=message):
        load_file(write(tmp_path, GOOD + edit + "\n"))


def test_bad_workload_and_template(tmp_path):
    with pytest.raises(PresetError, match="Shape parameter 'height'"):
        load_file(write(tmp_path, GOOD.replace("height = 32", "height = -1")))
    with pytest.raises(PresetError, match="Unknown schedule template 'nope'"):
        load_file(write(tmp_path, GOOD.replace('template = "depthwise_blog"', 'template = "nope"')))


def test_a_step_s_title_does_not_repeat_its_number():
    # The pages number each step themselves ("Step 3: …", "3. …").
    import re

    from explorer.presets import all_presets

    numbered = [p.id for p in all_presets().values() if re.match(r"\d+\. ", p.title)]
    assert numbered == []


def _tabs_and_diagnosis(preset_id):
    """The diagnosis's facts and findings of a preset beside what its Roofline and Resources tabs show (the
    tabs' own functions), from the build the other tests of this process made."""
    from explorer.analyses import _static_roofline
    from explorer.analysis.diagnosis import facts_of, findings_of
    from explorer.analysis.resources import analyze_resources
    from explorer.errors import ExplorerError

    built = build(get_preset(preset_id).spec, "h100")
    facts = facts_of(built)
    try:
        roofline = _static_roofline(built)
    except ExplorerError:  # no compute roof for these inputs on these ceilings: the diagnosis uses bytes alone
        roofline = None
    return facts, findings_of(facts), roofline, analyze_resources(built).kernels[0]


@pytest.mark.parametrize("preset_id", PRESET_IDS)
def test_the_diagnosis_agrees_with_the_roofline_and_resources_tabs(preset_id):
    facts, findings, roofline, kernel = _tabs_and_diagnosis(preset_id)
    if roofline is not None:  # the same least time, and the same roof holding it
        assert facts.bound_us == pytest.approx(roofline.current.latency_us, rel=1e-9)
        memory = roofline.intensity < roofline.ridge(roofline.roof[0])
        assert facts.bound == ("memory" if memory else "compute")
        assert facts.roof.startswith(f"the {roofline.roof[1]} bandwidth" if memory else "the ")
    occupancy = kernel.occupancy
    assert (facts.threads_per_block, facts.shared_bytes, facts.blocks_per_sm, facts.limiter) == \
        (kernel.threads_per_block, kernel.shared_bytes, occupancy.blocks_per_sm, occupancy.limiter)
    if "occupancy" in findings:
        assert f"limited by {occupancy.limiter}: {occupancy.warps_per_sm} warps per SM" in findings["occupancy"].title


CUDA_CORE_PRESETS = [p for p in PRESET_IDS if get_preset(p).spec.template == "attention_fused"]


@pytest.mark.xfail(not hasattr(__import__("explorer.analysis.roofline", fromlist=["x"]), "compute_types"),
                   reason="the Roofline tab's roof of the units a template multiplies on (explorer.analysis.roofline."
                          "compute_types) is another branch's change", strict=True)
@pytest.mark.parametrize("preset_id", CUDA_CORE_PRESETS)
def test_products_on_cuda_cores_have_the_cuda_cores_roof_in_both(preset_id):
    """Fused attention on CUDA cores: the diagnosis's cuda-cores finding is part of the roofline's time (at most
    100% of it), as the Roofline tab places the setting under the CUDA cores' FP32 roof."""
    facts, findings, roofline, _ = _tabs_and_diagnosis(preset_id)
    assert roofline.compute_roof[1] == "FP32" and "FP32" in facts.roof
    assert "cuda-cores" in findings and findings["cuda-cores"].cost_us <= facts.bound_us
