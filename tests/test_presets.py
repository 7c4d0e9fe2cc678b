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
    path.write_text('[lesson]\ntitle = "T"\n' + text)
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


def test_a_lesson_s_id_is_its_file_s_name_and_its_former_ids_still_name_it(tmp_path):
    from explorer.lessons import current_lesson_id, get_lesson
    from explorer.presets import CURRICULUM_FILE, PRESET_DIR

    files = sorted(path.stem for path in PRESET_DIR.glob("*.toml") if path.name != CURRICULUM_FILE)
    assert sorted(lesson.id for lesson in all_lessons()) == files
    # Renamed to their files' names; links and class boards made before name them by their old ids.
    for old, now in (("attention-hopper", "attention_hopper"), ("attention-tensor-cores", "attention_tensor_cores")):
        assert get_lesson(old) is get_lesson(now) and current_lesson_id(old) == now
        assert {p.lesson for p in get_lesson(old).presets} == {now}
    assert current_lesson_id("depthwise_blog") == "depthwise_blog" and current_lesson_id("nope") == "nope"


def test_a_lesson_file_that_names_its_id_or_lists_former_ids_badly_is_refused(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('[lesson]\nid = "other"\ntitle = "T"\n' + GOOD)
    with pytest.raises(PresetError, match=r"mine.toml: a lesson's id is its file's name \('mine'\)"):
        load_file(path)
    path.write_text('[lesson]\ntitle = "T"\nformerly = "old"\n' + GOOD)
    with pytest.raises(PresetError, match="formerly is a list of the ids the lesson had"):
        load_file(path)
    path.write_text('[lesson]\ntitle = "T"\nformerly = ["old"]\n' + GOOD)
    assert load_file(path).formerly == ("old",) and load_file(path).presets[0].lesson == "mine"


def _tabs_and_diagnosis(preset_id):
    """The diagnosis's facts and findings of a preset beside what its Roofline and Resources tabs show (the
    tabs' own functions), from the build the other tests of this process made."""
    from explorer.analysis.diagnosis import facts_of, findings_of
    from explorer.analysis.resources import analyze_resources
    from explorer.errors import ExplorerError
    from explorer.tabs import _static_roofline

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


@pytest.mark.parametrize("preset_id", CUDA_CORE_PRESETS)
def test_products_on_cuda_cores_have_the_cuda_cores_roof_in_both(preset_id):
    """Fused attention on CUDA cores: the diagnosis's cuda-cores finding is part of the roofline's time (at most
    100% of it), as the Roofline tab places the setting under the CUDA cores' FP32 roof."""
    facts, findings, roofline, _ = _tabs_and_diagnosis(preset_id)
    assert roofline.compute_roof[1] == "FP32" and "FP32" in facts.roof
    assert "cuda-cores" in findings and findings["cuda-cores"].cost_us <= facts.bound_us


# -- the curriculum ---------------------------------------------------------------------------


def test_the_lessons_come_in_the_curriculums_order_each_once():
    import tomllib

    from explorer.presets import CURRICULUM_FILE, PRESET_DIR, default_preset

    order = tomllib.loads((PRESET_DIR / CURRICULUM_FILE).read_text())["lessons"]
    assert [lesson.id for lesson in all_lessons()] == order
    assert order[0] == "depthwise_blog" and order[-1] == "best"  # the blog first, the search's results last
    # Without a link, a student starts on the first step of the first lesson (not on step 14 of 19).
    assert get_preset(default_preset()).step == 1 and get_preset(default_preset()).lesson == order[0]
    assert list(all_presets())[0] == default_preset()


def test_every_shipped_lesson_says_what_the_start_page_lists():
    from explorer.presets import LEVELS

    for lesson in all_lessons():
        assert lesson.name and len(lesson.name) <= 32 and lesson.name != lesson.title, lesson.id
        assert lesson.tagline and "\n" not in lesson.tagline and len(lesson.tagline) <= 130, lesson.id
        assert lesson.level in LEVELS and lesson.gpu, lesson.id
        # A template that needs an architecture (wgmma, TMA): the lesson names it as the GPU its timing needs.
        for arch in {a for p in lesson.presets for a in p.spec.template_def.archs}:
            assert arch in lesson.gpu, (lesson.id, arch)
        # Its source by title, never a file name of the seeds it was written from.
        assert not lesson.source.endswith(".txt"), lesson.id


def test_the_depthwise_lesson_names_the_blog_and_links_it():
    (blog,) = [lesson for lesson in all_lessons() if lesson.id == "depthwise_blog"]
    assert "“Optimize Deep Learning GPU Operators with TVM: A Depthwise Convolution Example”" in blog.source
    assert blog.url == ("https://tvm.apache.org/2017/08/22/"
                        "Optimize-Deep-Learning-GPU-Operators-with-TVM-A-Depthwise-Convolution-Example")


def lesson_file(directory, lesson_id: str, extra: str = ""):
    (directory / f"{lesson_id}.toml").write_text(f'[lesson]\ntitle = "T"\n{extra}'
                                                 + GOOD.replace('"p"', f'"{lesson_id}-p"'))


def test_the_curriculum_orders_a_folders_lessons(tmp_path):
    for lesson_id in ("a", "b", "c"):
        lesson_file(tmp_path, lesson_id)
    assert [lesson.id for lesson in all_lessons.__wrapped__(tmp_path)] == ["a", "b", "c"]  # no curriculum: by name
    (tmp_path / "curriculum.toml").write_text('lessons = ["c", "a", "b"]\n')
    assert [lesson.id for lesson in all_lessons.__wrapped__(tmp_path)] == ["c", "a", "b"]


@pytest.mark.parametrize("order, message", [
    ('["a", "b"]', "leaves out c"),
    ('["a", "b", "c", "a"]', "names twice a"),
    ('["a", "b", "c", "z"]', "names no lesson file for z"),
    ('"a, b, c"', "needs 'lessons' = a list of lesson ids"),
])
def test_a_curriculum_that_misses_or_repeats_a_lesson_fails_loudly(tmp_path, order, message):
    for lesson_id in ("a", "b", "c"):
        lesson_file(tmp_path, lesson_id)
    (tmp_path / "curriculum.toml").write_text(f"lessons = {order}\n")
    with pytest.raises(PresetError, match=message):
        all_lessons.__wrapped__(tmp_path)


def test_a_lesson_level_is_one_of_the_levels(tmp_path):
    lesson_file(tmp_path, "a", 'level = "easy"\n')
    with pytest.raises(PresetError, match="level 'easy' is not one of introductory, intermediate, advanced"):
        load_file(tmp_path / "a.toml")
    lesson_file(tmp_path, "b", "gpu = 80\n")
    with pytest.raises(PresetError, match="'gpu' must be text"):
        load_file(tmp_path / "b.toml")
