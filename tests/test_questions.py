"""Questions in lessons (explorer.questions): read from a preset file and refused with a sentence
that names the file, the preset and the key; answered from two times (measured, or the lesson's
recorded figures); a student's answer judged (a speedup on a log scale); the shipped questions."""
import math

import pytest
import questions_check  # bench/ (pytest's pythonpath)

from explorer import lessons as L
from explorer.errors import ExplorerError, PresetError
from explorer.presets import load_file
from explorer.questions import (
    SPEEDUP_FACTOR,
    Answer,
    Question,
    Recorded,
    answer_from,
    direction_of,
    distribution,
    is_right,
    recorded_answer,
    speedup_bin,
)

TWO_STEPS = """
[lesson]
title = "T"

[[preset]]
id = "one"
title = "One"
source = "s"
template = "depthwise_blog"
claim = "c"
workload = { kind = "depthwise_conv2d", height = 32, width = 32 }

[[preset]]
id = "two"
title = "Two"
source = "s"
template = "depthwise_blog"
claim = "c"
workload = { kind = "depthwise_conv2d", height = 32, width = 32 }
knobs = { num_thread_x = 16 }

[preset.question]
"""
FASTER = 'kind = "direction"\nanswer = "faster"\nrecorded = { hardware = "GPU", us = { two = 2.0, one = 3.0 } }\n'


def lesson_with(tmp_path, question: str):
    path = tmp_path / "t.toml"
    path.write_text(TWO_STEPS + question)
    return load_file(path)


def test_a_direction_question_compares_with_the_step_before(tmp_path):
    (_, two) = lesson_with(tmp_path, FASTER).presets
    assert two.question == Question("direction", ("two", "one"), "faster", Recorded((2.0, 3.0), "GPU"))


@pytest.mark.parametrize("question, message", [
    ('kind = "guess"\n', r"t.toml preset 'two' question: 'kind' must be one of direction, speedup, limit, pick"),
    (FASTER + 'colour = "red"\n', r"unknown key\(s\) colour"),
    (FASTER + 'a = "one"\n', r"a 'direction' question takes no 'a'"),
    (FASTER.replace('"faster"', '"quicker"'), r"'answer' must be one of faster, same, slower"),
    (FASTER.replace("two = 2.0", "two = 4.0"),
     r"the answer 'faster' is not what its recorded figures say \(4 vs 3 µs on GPU: slower\)"),
    (FASTER.replace("one = 3.0", "three = 3.0"), r"one time for each of the question's two settings"),
    (FASTER.replace("two = 2.0", "two = -2.0"), r"each time a number of µs above 0"),
    (FASTER.replace('hardware = "GPU", ', ""), r"the figures the answer rests on, and the GPU"),
    (FASTER + 'with = "two"\n', r"cannot be compared with itself"),
    (FASTER.replace("direction", "speedup").replace('"faster"', "0.5"), r"a number above 1 \(for a slower step"),
    (FASTER.replace("direction", "speedup").replace('"faster"', "3.0"),
     r"the answer 3.0 is not what its recorded figures say \(2 vs 3 µs on GPU: ×1.50\)"),
    ('kind = "pick"\na = "one"\nb = "one"\nanswer = "a"\n', r"'a' and 'b' must be two different presets"),
    ('kind = "pick"\na = "one"\nb = "two"\nanswer = "a"\n'
     'recorded = { hardware = "GPU", us = { one = 3.0, two = 3.1 } }\n',
     r"within ±5%, so neither is faster; ask a 'direction' question"),
    ('kind = "limit"\nfix = "one"\nchoices = ["grid", "luck"]\nanswer = "grid"\n', r"'luck' is not a rule of the "
     r"diagnosis; the rules are: occupancy, grid"),
    ('kind = "limit"\nfix = "one"\nchoices = ["grid"]\nanswer = "grid"\n', r"'choices' must list 2 to 5 different"),
    ('kind = "limit"\nfix = "one"\nchoices = ["grid", "spills"]\nanswer = "grid"\n'
     'recorded = { hardware = "GPU", us = { two = 3.0, one = 3.0 } }\n',
     r"the answer 'grid' is not what its recorded figures say \(3 vs 3 µs on GPU: its fix is not faster\)"),
])
def test_a_wrong_question_is_refused_naming_the_file_the_preset_and_the_key(tmp_path, question, message):
    with pytest.raises(PresetError, match=message):
        lesson_with(tmp_path, question)


def test_the_first_step_must_name_what_it_is_compared_with(tmp_path):
    first_asks = TWO_STEPS.replace("\n[preset.question]\n", "").replace(
        'height = 32, width = 32 }\n\n[[preset]]\nid = "two"',
        'height = 32, width = 32 }\n[preset.question]\n' + FASTER.replace("two =", "x =") + '\n[[preset]]\nid = "two"',
        1)
    path = tmp_path / "t.toml"
    path.write_text(first_asks)
    with pytest.raises(PresetError, match=r"preset 'one' question: the first step has no step before it"):
        load_file(path)


def test_direction_of_a_ratio_uses_the_lessons_noise_band():
    assert [direction_of(r) for r in (1.06, 1.04, 1.0, 0.96, 0.94)] == ["faster", "same", "same", "same", "slower"]


QUESTION = {kind: Question(kind, ("this", "other"), answer, Recorded((1.0, 3.0), "GPU"),
                           ("grid", "spills") if kind == "limit" else ())
            for kind, answer in (("direction", "faster"), ("speedup", 3.0), ("pick", "a"), ("limit", "grid"))}


def test_two_times_answer_each_kind():
    us = (2.0, 5.0)  # the first setting takes 2 µs, the second 5 µs
    assert answer_from(QUESTION["direction"], us, "GPU", True).value == "faster"
    assert answer_from(QUESTION["speedup"], us, "GPU", True).value == pytest.approx(2.5)
    assert answer_from(QUESTION["pick"], us, "GPU", True).value == "a"
    assert answer_from(QUESTION["pick"], (5.0, 2.0), "GPU", True).value == "b"
    limit = answer_from(QUESTION["limit"], us, "GPU", True)  # the fix (second) is slower: not confirmed
    assert (limit.value, limit.confirmed) == ("grid", False)
    assert answer_from(QUESTION["limit"], (5.0, 2.0), "GPU", True).confirmed


def test_a_speedup_is_judged_on_a_log_scale():
    answer = answer_from(QUESTION["speedup"], (1.0, 3.0), "GPU", True)
    high, low = 3.0 * SPEEDUP_FACTOR, 3.0 / SPEEDUP_FACTOR  # 4.5 and 2.0: as far off on either side
    assert is_right(QUESTION["speedup"], high, answer) and is_right(QUESTION["speedup"], low, answer)
    assert not is_right(QUESTION["speedup"], 4.6, answer) and not is_right(QUESTION["speedup"], 1.95, answer)
    assert not is_right(QUESTION["speedup"], "fast", answer) and not is_right(QUESTION["speedup"], -3, answer)
    assert math.isclose(math.log(high / 3.0), -math.log(low / 3.0))


def test_the_choices_are_judged_by_key():
    answer = answer_from(QUESTION["direction"], (1.0, 3.0), "GPU", True)
    assert is_right(QUESTION["direction"], "faster", answer)
    assert not is_right(QUESTION["direction"], "same", answer) and not is_right(QUESTION["direction"], "Faster", answer)


def test_the_distribution_counts_every_choice_and_bins_speedups():
    assert distribution(QUESTION["direction"], ["faster", "slower", "faster", "nonsense"]) == [
        ("faster", 2), ("same", 0), ("slower", 1)]
    assert [speedup_bin(v) for v in (0.5, 1.0, 2.9, 3.0, 250, 5000)] == [
        "below ×1", "×1–1.5", "×2–3", "×3–5", "×200–300", "×1000 or more"]
    # From the lowest bin guessed to the highest, the empty ones between them included.
    assert distribution(QUESTION["speedup"], ["2.5", "6", "2.1", "x"]) == [("×2–3", 2), ("×3–5", 0), ("×5–10", 1)]
    assert distribution(QUESTION["speedup"], []) == []


def test_an_answer_is_kept_as_json_and_says_where_it_comes_from():
    measured = Answer("faster", (2.0, 5.0), "NVIDIA H200", True)
    assert Answer.from_json(measured.to_json()) == measured
    assert measured.source() == "measured on NVIDIA H200"
    recorded = recorded_answer(QUESTION["direction"], note="wrong result")
    assert recorded.source() == "the lesson's recorded figures (GPU), not measured here: wrong result"


def test_a_question_is_answered_by_its_measurer_or_else_by_its_recorded_figures():
    question = L.asked(L.get_lesson("depthwise_blog").step(15).preset)  # 5×5 filter against 3×3
    times = {question.settings[0].spec: 5.0, question.settings[1].spec: 4.0}
    measured = L.answer_question(question, times.__getitem__, "Test GPU")
    assert (measured.value, measured.us, measured.measured, measured.where) == ("slower", (5.0, 4.0), True, "Test GPU")

    def failing(spec):
        raise ExplorerError("the kernel's output is wrong")

    recorded = L.answer_question(question, failing, "Test GPU")
    assert not recorded.measured and recorded.us == question.question.recorded.us
    assert recorded.note == "the kernel's output is wrong"
    assert L.answer_question(question) == recorded_answer(question.question)


def test_the_shipped_questions():
    """At least one question per lesson and 30 in all, each about two shipped steps, each kind asked."""
    questions = L.questions()
    assert len(questions) >= 30
    assert {q.preset.lesson for q in questions} == {lesson.id for lesson in L.lessons()}
    assert {q.question.kind for q in questions} == {"direction", "speedup", "limit", "pick"}
    for q in questions:
        assert q.text.endswith("?") and len(q.settings) == 2
        assert q.choices() or q.question.kind == "speedup"


# -- bench/questions_check.py without a GPU ---------------------------------------------------------


def test_the_check_script_writes_its_table_from_the_recorded_figures_in_a_dry_run(tmp_path):
    out = tmp_path / "questions.md"
    assert questions_check.main(["--dry-run", "--only", "dw-blog-kernel5-96", "dw-blog-fused-96",
                                 "--out", str(out)]) == 0
    text = out.read_text()
    assert "**Dry run, nothing measured:**" in text and "**2 of 2 questions reproduced.**" in text
    assert "| depthwise_blog | 15 | Will step 15 be faster than step 14" in text
    assert "| slower (step 15 13.59 µs, step 14 10.03 µs, on NVIDIA H100 80GB HBM3) |" in text


def test_the_check_says_why_a_question_is_not_reproduced():
    question = L.asked(L.get_lesson("depthwise_blog").step(9).preset)  # what limits step 9? grid; fix: step 8
    ids = [p.id for p in question.settings]
    fix_slower = questions_check.check(question, dict(zip(ids, (4.0, 5.0), strict=True)), {}, "GPU", "spills")
    assert fix_slower["verdict"] == "not reproduced"
    assert fix_slower["why"] == "its fix is not faster beyond the noise band; the diagnosis ranks spills first"
    assert questions_check.check(question, dict(zip(ids, (9.0, 4.0), strict=True)), {}, "GPU", "grid")[
        "verdict"] == "reproduced"
    failed = questions_check.check(question, {ids[0]: 9.0}, {ids[1]: "wrong result"}, "GPU", None)
    assert (failed["verdict"], failed["why"]) == ("not reproduced", "wrong result")
