"""Lessons: each step's claims checked.

A lesson is a file of ``presets/`` (explorer.presets' :class:`Lesson`) that follows a
tutorial, blog post or paper; its steps are its presets in file order, each knowing which
knobs (and shape parameters) changed from the previous step. This module checks the
steps' claims:

- ``static`` facts (shared bytes, bank-conflict degree, per-thread tiles, global writes…)
  are computed from the build with explorer.analysis and compared with the values the
  claim states: reproduced or not, on any machine;
- ``compare`` entries (timing claims) give the tutorial's two numbers and, when timings
  are given, the measured two, side by side: reproduced, not reproduced or needs a GPU.

What the relations and facts mean lives in explorer.claims; why a measured claim may
differ from the tutorial's, in explorer.lesson_reasons.

Timings come in as plain data, a mapping ``preset id -> µs`` (measured by
:func:`measure_presets` through any ``measurer(spec) -> µs``, e.g. explorer.measure's
``latency_us``), so the Lessons page, bench/lessons_h100.py and the tests share one
judgement.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from .build import Spec, build
from .claims import FACTS, RELATIONS, SAME_SPEED
from .errors import ExplorerError, PresetError
from .presets import Comparison, Lesson, Preset, Step, all_lessons, all_presets
from .questions import DIRECTIONS, KINDS, RULE_NAMES, Answer, Question, answer_from, direction_of, recorded_answer

REPRODUCED = "reproduced"
NOT_REPRODUCED = "not reproduced"
NEEDS_GPU = "needs a GPU"


@dataclass(frozen=True)
class ClaimThresholds:
    """How strictly a measured comparison must match the tutorial's."""

    tolerance: float = SAME_SPEED  # the noise band (explorer.claims)


def lessons() -> tuple[Lesson, ...]:
    """The lessons with at least one step, in the curriculum's order (presets/curriculum.toml):
    the first is where the Lessons page and a class start."""
    return tuple(lesson for lesson in all_lessons() if lesson.steps)


def get_lesson(lesson_id: str) -> Lesson:
    for lesson in lessons():
        if lesson.id == lesson_id:
            return lesson
    known = ", ".join(lesson.id for lesson in lessons())
    raise PresetError(f"No lesson named '{lesson_id}'; the lessons are: {known}.")


def lesson_specs() -> tuple[Spec, ...]:
    """Every shipped step, in lesson order, once each: the links a class opens."""
    return tuple(dict.fromkeys(step.preset.spec for lesson in lessons() for step in lesson.steps))


def first_lesson_specs() -> tuple[Spec, ...]:
    """The steps of the lesson a class starts with: measured ahead of the students first."""
    return tuple(dict.fromkeys(step.preset.spec for step in lessons()[0].steps))


def lesson_of(preset_id: str) -> tuple[Lesson, Step]:
    """The lesson and step a preset belongs to."""
    for lesson in lessons():
        for step in lesson.steps:
            if step.preset.id == preset_id:
                return lesson, step
    raise PresetError(f"No preset named '{preset_id}' in any lesson.")


# -- verdicts ---------------------------------------------------------------------------


def gflops(preset: Preset, us: float) -> float:
    return preset.spec.workload.flops / (us * 1e3)


def ratio(comparison: Comparison, this: Preset, this_us: float, other: Preset, other_us: float) -> float:
    """How far the claimed relation holds: above 1 means in the claimed direction (for
    ``same_speed`` and ``no_slower``, the other's time over this one's)."""
    if comparison.expect in ("faster", "same_speed", "no_slower"):
        return other_us / this_us
    if comparison.expect == "slower":
        return this_us / other_us
    rate = gflops(this, this_us) / gflops(other, other_us)
    return rate if comparison.expect == "more_gflops" else 1 / rate


def holds(comparison: Comparison, value: float, thresholds: ClaimThresholds = ClaimThresholds()) -> bool:
    """Whether a ratio from :func:`ratio` supports the claim."""
    if comparison.expect == "same_speed":
        return abs(value - 1) <= thresholds.tolerance
    if comparison.expect == "no_slower":
        return value >= 1 - thresholds.tolerance
    return value >= (comparison.at_least or 1 + thresholds.tolerance)


@dataclass(frozen=True)
class Figures:
    """One pair of times: this step's and the step it is compared with."""

    this_us: float
    other_us: float
    ratio: float
    holds: bool
    where: str  # hardware


@dataclass(frozen=True)
class ComparisonCheck:
    comparison: Comparison
    other: Preset
    tutorial: Figures | None  # None when the tutorial gives no time for one of the two
    measured: Figures | None  # None without timings
    measure_error: str = ""  # why a timing is missing although a GPU was used

    @property
    def verdict(self) -> str:
        if self.measured is None:
            return NOT_REPRODUCED if self.measure_error else NEEDS_GPU
        return REPRODUCED if self.measured.holds else NOT_REPRODUCED

    def sentence(self, this: Preset) -> str:
        """The claim in words: "Step 8 is faster than step 7: Threads 8×32 on 32×32 …"."""
        words = RELATIONS[self.comparison.expect]
        bound = f", by at least ×{self.comparison.at_least:g}" if self.comparison.at_least else ""
        return f"Step {this.step} is {words} {step_name(this, self.other)}{bound}: {self.other.title}."


def step_name(this: Preset, other: Preset) -> str:
    """How ``this`` step names ``other``: "step 4", or "the matmul lesson's step 2"."""
    return f"step {other.step}" if other.lesson == this.lesson else f"the {other.lesson} lesson's step {other.step}"


def check_comparison(
    this: Preset,
    comparison: Comparison,
    times_us: Mapping[str, float] | None = None,
    where: str = "",
    errors: Mapping[str, str] | None = None,
    thresholds: ClaimThresholds = ClaimThresholds(),
) -> ComparisonCheck:
    """The tutorial's figures and (with ``times_us``) the measured ones for one claim.
    ``errors`` maps preset ids to why measuring them failed."""
    other = all_presets()[comparison.other]
    tutorial = None
    mine, theirs = this.own_reported, other.own_reported
    if mine is not None and theirs is not None and mine.value_us and theirs.value_us:
        value = ratio(comparison, this, mine.value_us, other, theirs.value_us)
        tutorial = Figures(mine.value_us, theirs.value_us, value, holds(comparison, value, thresholds), mine.hardware)
    measured, error = None, ""
    times_us, errors = times_us or {}, errors or {}
    if this.id in times_us and other.id in times_us:
        value = ratio(comparison, this, times_us[this.id], other, times_us[other.id])
        measured = Figures(times_us[this.id], times_us[other.id], value, holds(comparison, value, thresholds), where)
    else:
        error = errors.get(this.id) or errors.get(other.id) or ""
    return ComparisonCheck(comparison, other, tutorial, measured, error)


def step_checks(
    preset: Preset,
    times_us: Mapping[str, float] | None = None,
    where: str = "",
    errors: Mapping[str, str] | None = None,
    thresholds: ClaimThresholds = ClaimThresholds(),
) -> tuple[ComparisonCheck, ...]:
    return tuple(check_comparison(preset, c, times_us, where, errors, thresholds) for c in preset.compare)


def overall(verdicts: Iterable[str]) -> str | None:
    """One verdict for several: any failure fails; all reproduced reproduces; else a GPU
    is needed. None when there is nothing to judge."""
    verdicts = list(verdicts)
    if not verdicts:
        return None
    if NOT_REPRODUCED in verdicts:
        return NOT_REPRODUCED
    if all(v == REPRODUCED for v in verdicts):
        return REPRODUCED
    return NEEDS_GPU


def presets_to_time(presets: Iterable[Preset]) -> tuple[Preset, ...]:
    """The presets whose timings the given presets' claims need (themselves and the
    presets they compare with), each once, in order."""
    table = all_presets()
    out: dict[str, Preset] = {}
    for preset in presets:
        if preset.compare:
            out.setdefault(preset.id, preset)
            for comparison in preset.compare:
                out.setdefault(comparison.other, table[comparison.other])
    return tuple(out.values())


def measure_presets(
    presets: Iterable[Preset],
    measurer: Callable[[Spec], float],
    on_done: Callable[[Preset, float | None, str], None] | None = None,
) -> tuple[dict[str, float], dict[str, str]]:
    """Time each preset with ``measurer(spec) -> µs`` (which raises ExplorerError when a
    kernel fails); presets with the same spec are measured once. Returns (µs by preset
    id, error sentence by preset id)."""
    times: dict[str, float] = {}
    errors: dict[str, str] = {}
    by_spec: dict[Spec, tuple[float | None, str]] = {}
    for preset in presets:
        if preset.spec not in by_spec:
            try:
                value = float(measurer(preset.spec))
                by_spec[preset.spec] = (value, "") if math.isfinite(value) and value > 0 else (
                    None, f"the measurement returned {value!r}")
            except ExplorerError as error:
                by_spec[preset.spec] = (None, str(error))
        value, error = by_spec[preset.spec]
        if value is not None:
            times[preset.id] = value
        else:
            errors[preset.id] = error
        if on_done is not None:
            on_done(preset, value, error)
    return times, errors


# -- questions ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Asked:
    """A step's question (explorer.questions) with the presets its answer is about."""

    preset: Preset  # the step that asks it
    question: Question
    settings: tuple[Preset, Preset]  # in the order of question.settings

    @property
    def text(self) -> str:
        if self.question.text:
            return self.question.text
        other = self.settings[1]
        return KINDS[self.question.kind].format(step=self.preset.step,
                                                other=f"{step_name(self.preset, other)} ({other.title})")

    def choices(self) -> dict[str, str]:
        """Each choice's key and its words (empty for speedup, which takes a number)."""
        kind = self.question.kind
        if kind == "direction":
            return dict(DIRECTIONS)
        if kind == "pick":
            return {key: f"{key.upper()}: {p.title}" for key, p in zip("ab", self.settings, strict=True)}
        return {rule: f"{rule} — {RULE_NAMES[rule]}" for rule in self.question.choices}

    def words(self, value) -> str:
        """An answer (a choice's key or a speedup) in words."""
        if self.question.kind == "speedup":
            return f"×{float(value):.3g} faster"
        return self.choices().get(value, str(value))

    def figures(self, answer: Answer) -> str:
        """The two times behind ``answer``, in words."""
        (a, b), (first, second) = answer.us, self.settings
        if self.question.kind == "pick":
            return f"A {a:,.2f} µs, B {b:,.2f} µs: A is {speed_words(answer.ratio)}, {answer.source()}"
        other = step_name(self.preset, second)
        if self.question.kind != "limit":
            return (f"{other} {b:,.2f} µs → step {first.step} {a:,.2f} µs: {speed_words(answer.ratio)}, "
                    f"{answer.source()}")
        line = f"step {first.step} {a:,.2f} µs → its fix, {other}, {b:,.2f} µs: {speed_words(1 / answer.ratio)}"
        if not answer.confirmed:
            line += " (the fix is not faster here, so these figures do not confirm the lesson's answer)"
        return f"{line}, {answer.source()}"


def speed_words(ratio: float) -> str:
    """A ratio of times (the other's over this one's) in words: "×2.50 faster", "×1.25 slower",
    "about the same (×0.98)"."""
    words = direction_of(ratio)
    if words == "same":
        return f"about the same (×{ratio:.2f})"
    return f"×{ratio:.2f} faster" if words == "faster" else f"×{1 / ratio:.2f} slower"


def asked(preset: Preset) -> Asked | None:
    """The question ``preset``'s step asks, or None."""
    if preset.question is None:
        return None
    table = all_presets()
    return Asked(preset, preset.question, tuple(table[s] for s in preset.question.settings))


def questions() -> tuple[Asked, ...]:
    """Every shipped question, in lesson order."""
    return tuple(q for lesson in lessons() for step in lesson.steps if (q := asked(step.preset)) is not None)


def answer_question(question: Asked, measurer: Callable[[Spec], float] | None = None, where: str = "") -> Answer:
    """The answer measured with ``measurer(spec) -> µs`` (on ``where``), or, without one or when a
    measurement fails, the lesson's recorded figures (saying why)."""
    if measurer is None:
        return recorded_answer(question.question)
    times, errors = measure_presets(question.settings, measurer)
    first, second = (p.id for p in question.settings)
    if first in times and second in times:
        return answer_from(question.question, (times[first], times[second]), where, True)
    return recorded_answer(question.question, note=errors.get(first) or errors.get(second, ""))


# -- static facts -----------------------------------------------------------------------


def format_fact(value) -> str:
    """A fact's value for display: tiles as 10 × 3, global writes per kernel as a; b."""
    if isinstance(value, tuple) and value and all(isinstance(v, tuple) for v in value):
        return "; ".join(", ".join(v) for v in value)
    if isinstance(value, tuple):
        return " × ".join(str(v) for v in value)
    if isinstance(value, float):
        return f"{value:g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def _same(claimed, actual) -> bool:
    if isinstance(claimed, float) or isinstance(actual, float):
        return math.isclose(float(claimed), float(actual), rel_tol=1e-3)
    return claimed == actual


@dataclass(frozen=True)
class StaticCheck:
    fact: str
    claimed: object
    actual: object  # None when the analysis could not compute it
    error: str = ""

    @property
    def verdict(self) -> str:
        return REPRODUCED if self.actual is not None and _same(self.claimed, self.actual) else NOT_REPRODUCED

    @property
    def label(self) -> str:
        return FACTS[self.fact].label


def static_checks(preset: Preset, target: str | None = None) -> tuple[StaticCheck, ...]:
    """The preset's static claims against its build for ``target`` (default: this
    machine's GPU, else an H100)."""
    if not preset.static:
        return ()
    built = build(preset.spec, target)
    checks = []
    for fact, claimed in preset.static:
        try:
            checks.append(StaticCheck(fact, claimed, FACTS[fact].of(built)))
        except ExplorerError as error:
            checks.append(StaticCheck(fact, claimed, None, str(error)))
    return tuple(checks)
