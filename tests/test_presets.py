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
