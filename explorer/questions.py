"""Predict, then measure: the question a lesson step asks before its measurement is shown.

Students who predict a demonstration's outcome before they see it understand it better than
those who only watch it; a step's question makes them commit first. Four kinds (:data:`KINDS`):

- ``direction``: will this step be faster than another (by default the step before), about
  the same, or slower? "About the same" is within the lessons' noise band (±5%);
- ``speedup``: how many times faster than another is this step? A number, judged on a log
  scale: a guess within a factor of :data:`SPEEDUP_FACTOR` of the answer is right, so twice
  too high is as wrong as twice too low;
- ``limit``: what limits this setting most? The choices are rules of the diagnosis
  (explorer.analysis.diagnosis); the answer is the lesson's, and the GPU checks it by timing
  the step against ``fix``, the setting that addresses that limit;
- ``pick``: which of two settings is faster?

Every question is answered by the times of two settings (:attr:`Question.settings`): measured
on the class's GPU when there is one, else the lesson's recorded figures, which ship with the
question (``recorded``) and must agree with its ``answer`` (checked when the lesson loads).
``bench/questions_check.py`` measures every shipped question on the GPU machine.

In a preset file, after the preset's own keys::

    [preset.question]
    kind = "direction"                 # direction, speedup, limit or pick
    answer = "faster"                  # faster/same/slower; a ratio; a rule of `choices`; "a" or "b"
    with = "dw-blog-channel-96"        # direction, speedup: compared with (default: the step before)
    recorded = { hardware = "NVIDIA H100 80GB HBM3", us = { dw-blog-blocking-96 = 13.13, dw-blog-channel-96 = 63.12 } }
    # limit: fix = "<preset id>", choices = ["grid", "pipeline", ...]; pick: a = "<preset id>", b = "<preset id>"
    # text = "..."                     # optional: the question in the lesson's own words

This module is plain data and arithmetic (explorer.presets reads the tables through
:func:`load_question`); explorer.lessons words a question with its presets' titles.
"""
from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from .analysis.diagnosis import RULES
from .claims import SAME_SPEED
from .errors import PresetError

KINDS = {
    "direction": "Will step {step} be faster than {other}, about the same, or slower?",
    "speedup": "How many times faster than {other} is step {step}?",
    "limit": "What limits step {step} most?",
    "pick": "Which of these two settings is faster?",
}
DIRECTIONS = {"faster": "faster", "same": "about the same", "slower": "slower"}
PICKS = ("a", "b")
RULE_NAMES = {rule.name: rule.looks_for for rule in RULES}
# A speedup guess within this factor of the answer is right: judged on a log scale, twice too
# high is as far off as twice too low, and 3 for an answer of 2.9 is as good as 2.8.
SPEEDUP_FACTOR = 1.5
# The bins of the speedup guesses' distribution (× faster), a 1-1.5-2-3-5 series.
SPEEDUP_EDGES = (1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 15.0, 20.0, 30.0, 50.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0)
LIMIT_CHOICES = (2, 5)  # a limit question offers between 2 and 5 of the diagnosis's rules

_KEYS = {"kind", "text", "answer", "with", "a", "b", "choices", "fix", "recorded"}
_KIND_KEYS = {"direction": {"with"}, "speedup": {"with"}, "limit": {"fix", "choices"}, "pick": {"a", "b"}}


@dataclass(frozen=True)
class Recorded:
    """The two settings' times the lesson records (in the order of ``Question.settings``)."""

    us: tuple[float, float]
    hardware: str


@dataclass(frozen=True)
class Question:
    kind: str  # one of KINDS
    # The preset ids whose times answer it: (this step, the one compared) for direction and
    # speedup, (this step, its fix) for limit, (a, b) for pick.
    settings: tuple[str, str]
    answer: str | float  # a choice's key (choice_keys), or the ratio for speedup
    recorded: Recorded
    choices: tuple[str, ...] = ()  # limit: rule names of the diagnosis
    text: str = ""  # the question in the lesson's words ("" for the kind's)

    def choice_keys(self) -> tuple[str, ...]:
        """The answers a student picks from (none for speedup, which takes a number)."""
        if self.kind == "direction":
            return tuple(DIRECTIONS)
        if self.kind == "pick":
            return PICKS
        return self.choices


@dataclass(frozen=True)
class Answer:
    """The right answer to a question, and the figures it comes from."""

    value: str | float  # a choice's key, or the ratio (speedup)
    us: tuple[float, float]  # the two settings' times, in the order of Question.settings
    where: str  # the GPU that measured them, or the recorded figures' hardware
    measured: bool  # True: measured for this class; False: the lesson's recorded figures
    confirmed: bool = True  # limit: whether the fix is faster beyond the noise band on these figures
    note: str = ""  # why the recorded figures answer although a GPU is here (its measurement failed)

    @property
    def ratio(self) -> float:
        """The second setting's time over the first's: above 1, the first (this step, or a) is faster."""
        return self.us[1] / self.us[0]

    def source(self) -> str:
        if self.measured:
            return f"measured on {self.where}"
        return f"the lesson's recorded figures ({self.where}), not measured here" + (f": {self.note}" if self.note
                                                                                     else "")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Answer:
        values = json.loads(text)
        return cls(**{**values, "us": tuple(values["us"])})


# -- answers and judging ---------------------------------------------------------------------


def direction_of(ratio: float) -> str:
    """"faster", "same" or "slower" for a step whose compared setting takes ``ratio`` times its time."""
    if abs(ratio - 1) <= SAME_SPEED:
        return "same"
    return "faster" if ratio > 1 else "slower"


def answer_from(question: Question, us: tuple[float, float], where: str, measured: bool, note: str = "") -> Answer:
    """The answer that the two settings' times ``us`` give."""
    ratio = us[1] / us[0]
    confirmed = True
    if question.kind == "direction":
        value = direction_of(ratio)
    elif question.kind == "speedup":
        value = ratio
    elif question.kind == "pick":
        value = "a" if ratio >= 1 else "b"
    else:  # limit: the lesson's answer, which the fix (the second setting) confirms by being faster, or not
        value, confirmed = question.answer, direction_of(1 / ratio) == "faster"
    return Answer(value, (float(us[0]), float(us[1])), where, measured, confirmed, note)


def recorded_answer(question: Question, note: str = "") -> Answer:
    return answer_from(question, question.recorded.us, question.recorded.hardware, False, note)


def parse_given(question: Question, given) -> str | float | None:
    """A student's answer as the question takes it (a speedup as a positive number), or None."""
    if question.kind == "speedup":
        try:
            value = float(given)
        except (TypeError, ValueError):
            return None
        return value if math.isfinite(value) and value > 0 else None
    return given if given in question.choice_keys() else None


def is_right(question: Question, given, answer: Answer) -> bool:
    """Whether ``given`` (a choice's key, or a number for speedup) is the answer."""
    value = parse_given(question, given)
    if value is None:
        return False
    if question.kind == "speedup":
        return abs(math.log(value / float(answer.value))) <= math.log(SPEEDUP_FACTOR) + 1e-9
    return value == answer.value


def reproduces(question: Question, answer: Answer) -> bool:
    """Whether ``answer`` (e.g. measured on another GPU) gives the question's own answer."""
    if question.kind == "limit":
        return answer.confirmed
    return is_right(question, question.answer, answer)


def speedup_bin(value: float) -> str:
    """The distribution's bin of a speedup guess: "×2–3", "below ×1", "×1000 or more"."""
    if value < SPEEDUP_EDGES[0]:
        return f"below ×{SPEEDUP_EDGES[0]:g}"
    for low, high in zip(SPEEDUP_EDGES, SPEEDUP_EDGES[1:], strict=False):
        if value < high:
            return f"×{low:g}–{high:g}"
    return f"×{SPEEDUP_EDGES[-1]:g} or more"


def speedup_bins() -> list[str]:
    return [speedup_bin(SPEEDUP_EDGES[0] / 2), *(speedup_bin(edge) for edge in SPEEDUP_EDGES)]


def distribution(question: Question, given: Iterable) -> list[tuple[str, int]]:
    """How many gave each answer: every choice (key) in order, or the speedup bins from the
    lowest to the highest guessed."""
    values = [v for v in (parse_given(question, g) for g in given) if v is not None]
    if question.kind != "speedup":
        counts = Counter(values)
        return [(key, counts[key]) for key in question.choice_keys()]
    counts = Counter(speedup_bin(v) for v in values)
    bins = speedup_bins()
    used = [i for i, label in enumerate(bins) if counts[label]]
    if not used:
        return []
    return [(label, counts[label]) for label in bins[used[0]:used[-1] + 1]]


# -- reading a preset's [preset.question] table ------------------------------------------------------


def load_question(table, here: str, this_id: str, previous_id: str | None) -> Question:
    """A preset's question, checked: PresetError (naming the file, the preset and the key) for
    an unknown key, a wrong type, a missing setting, or recorded figures that contradict the answer."""
    here = f"{here} question"
    if not isinstance(table, dict):
        raise PresetError(f"{here}: 'question' must be a table ([preset.question]).")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise PresetError(f"{here}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(_KEYS))}.")
    kind = table.get("kind")
    if kind not in KINDS:
        raise PresetError(f"{here}: 'kind' must be one of {', '.join(KINDS)}.")
    foreign = sorted((set(table) & set().union(*_KIND_KEYS.values())) - _KIND_KEYS[kind])
    if foreign:
        raise PresetError(f"{here}: a '{kind}' question takes no {', '.join(repr(k) for k in foreign)}.")
    text = table.get("text", "")
    if not isinstance(text, str):
        raise PresetError(f"{here}: 'text' must be text.")
    settings = _settings(table, kind, here, this_id, previous_id)
    choices = _choices(table, here) if kind == "limit" else ()
    answer = _answer(table.get("answer"), kind, choices, here)
    recorded = _recorded(table.get("recorded"), settings, here)
    question = Question(kind, settings, answer, recorded, choices, text)
    _check_recorded(question, here)
    return question


def _preset_id(table: dict, key: str, here: str) -> str:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise PresetError(f"{here}: '{key}' must be a preset id.")
    return value


def _settings(table: dict, kind: str, here: str, this_id: str, previous_id: str | None) -> tuple[str, str]:
    if kind == "pick":
        a, b = _preset_id(table, "a", here), _preset_id(table, "b", here)
        if a == b:
            raise PresetError(f"{here}: 'a' and 'b' must be two different presets.")
        return a, b
    if kind == "limit":
        other = _preset_id(table, "fix", here)
    elif "with" in table:
        other = _preset_id(table, "with", here)
    elif previous_id is None:
        raise PresetError(f"{here}: the first step has no step before it; name the setting it is compared with "
                          "('with').")
    else:
        other = previous_id
    if other == this_id:
        raise PresetError(f"{here}: the step cannot be compared with itself.")
    return this_id, other


def _choices(table: dict, here: str) -> tuple[str, ...]:
    choices = table.get("choices")
    low, high = LIMIT_CHOICES
    if (not isinstance(choices, list) or not low <= len(choices) <= high
            or len(set(map(str, choices))) != len(choices)):
        raise PresetError(f"{here}: 'choices' must list {low} to {high} different rules of the diagnosis.")
    unknown = [c for c in choices if c not in RULE_NAMES]
    if unknown:
        raise PresetError(f"{here}: {', '.join(map(repr, unknown))} is not a rule of the diagnosis; the rules are: "
                          f"{', '.join(RULE_NAMES)}.")
    return tuple(choices)


def _answer(answer, kind: str, choices: tuple[str, ...], here: str) -> str | float:
    if kind == "speedup":
        if isinstance(answer, bool) or not isinstance(answer, (int, float)) or not answer > 1:
            raise PresetError(f"{here}: a speedup question's 'answer' is how many times faster, a number above 1 "
                              "(for a slower step, ask a 'direction' question).")
        return float(answer)
    allowed = {"direction": tuple(DIRECTIONS), "pick": PICKS, "limit": choices}[kind]
    if answer not in allowed:
        raise PresetError(f"{here}: 'answer' must be one of {', '.join(allowed)}.")
    return answer


def _recorded(table, settings: tuple[str, str], here: str) -> Recorded:
    where = f"{here}: 'recorded' must be {{ hardware = \"...\", us = {{ {settings[0]} = µs, {settings[1]} = µs }} }}"
    if not isinstance(table, dict) or set(table) != {"hardware", "us"} or not isinstance(table["hardware"], str):
        raise PresetError(f"{where}: the figures the answer rests on, and the GPU they were measured on.")
    us = table["us"]
    if not isinstance(us, dict) or set(us) != set(settings):
        raise PresetError(f"{where}: one time for each of the question's two settings.")
    values = [us[s] for s in settings]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 for v in values):
        raise PresetError(f"{where}: each time a number of µs above 0.")
    return Recorded((float(values[0]), float(values[1])), table["hardware"])


def _check_recorded(question: Question, here: str) -> None:
    answer = recorded_answer(question)
    a, b = question.recorded.us
    figures = f"{a:g} vs {b:g} µs on {question.recorded.hardware}"
    if question.kind == "pick" and direction_of(answer.ratio) == "same":
        raise PresetError(f"{here}: the two settings' recorded times ({figures}) are within ±{SAME_SPEED:.0%}, so "
                          "neither is faster; ask a 'direction' question whose answer is 'same' instead.")
    if not reproduces(question, answer):
        said = {"limit": "its fix is not faster", "speedup": f"×{answer.ratio:.2f}"}.get(question.kind, answer.value)
        raise PresetError(f"{here}: the answer {question.answer!r} is not what its recorded figures say ({figures}: "
                          f"{said}); correct the answer or the figures.")
