"""The diagnosis graded against the lessons: for each step k → k+1 of every lesson, does the
diagnosis at step k rank the change step k+1 makes among its top two suggestions?

A suggestion *agrees* with a step when it moves a knob the step changes, the same way: to
the same value (a switch, an option) or in the same direction (a number; a split's factors,
towards its inner levels or its outer ones). A step is *graded* when it keeps the template
and changes at least one knob, the tutorial does not mark it slower than an earlier step (a
step that shows a slower setting on purpose, e.g. the thread table's bad cases, is not
advice to follow), and it is not a search's best for another workload (a preset with a
``found_by`` command was searched for its own shape, not made from the step before). Other steps
are listed with the reason they are not graded.

The setting diagnosed is the one whose knobs the step moves: step k's, on step k+1's workload
(:func:`diagnosed_setting`; the same as step k's own where the step keeps the workload). A step
that changes the workload as well as knobs makes its knob move on the new workload: the diagnosis
of step k on its old workload speaks of another problem.

Two grades (:class:`StepGrade`):

- **strict** (:attr:`StepGrade.agrees_strictly`): one of the top two suggestions makes the step's move.
- **against the GPU** (:attr:`StepGrade.agrees`): where the GPU measured both settings, its verdict is the
  truth a student meets. A step measured faster (beyond the noise band, ±5%) agrees as strictly; a step
  measured no faster (the lesson's own claim not reproduced, or a claim of "no slower") agrees when the
  diagnosis *declines* its move: none of its top two suggestions makes it (it says the setting is near its
  limit, or suggests another move, whose worth ``--try-on-gpu`` measures). Where the GPU has not measured
  both, the tutorial's claim stands in for it: a step it claims faster agrees as strictly, one it does not
  also when the diagnosis says the setting is near its limit.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

from .analysis.diagnosis import Diagnosis, diagnose_spec
from .build import Spec
from .claims import SAME_SPEED
from .lessons import Lesson, Step
from .presets import all_presets

TOP_SUGGESTIONS = 2
SLOWER = ("slower", "fewer_gflops")
FASTER = ("faster", "more_gflops")

NEW_TEMPLATE = "changes the template"
SEARCHED = "a search's best for another workload, not a change made to the step before"
WORKLOAD_ONLY = "changes only the workload"
SLOWER_ON_PURPOSE = "shows a slower setting on purpose"
FIRST_STEP = "first step"
REFUSED = "step k's knobs do not build for step k+1's workload"


@dataclass(frozen=True)
class StepGrade:
    lesson: str
    step: int  # the number of step k+1
    before: str  # preset of step k
    after: str  # preset of step k+1
    changes: tuple[tuple[str, str, str], ...]  # what step k+1 changes: (knob, from, to)
    not_graded: str  # why the step is not graded ("" when it is)
    suggestions: tuple[str, ...] = ()  # the top suggestions at step k, described
    agreeing: int | None = None  # rank (1, 2) of the suggestion that agrees, None if none
    findings: tuple[str, ...] = ()  # the findings at step k, by rule
    costs: tuple[float, ...] = ()  # their estimated costs, µs
    agreeing_later: int | None = None  # rank of an agreeing suggestion beyond the top two, if any
    claims_faster: bool = True  # the tutorial claims step k+1 faster than step k
    near_limit: bool = False  # the diagnosis at step k says no one-knob move is estimated faster
    measured_speedup: float | None = None  # the GPU's time of the setting diagnosed ÷ step k+1's, where it has both
    diagnosed: str = ""  # the setting diagnosed where it is not step k's own: step k's knobs on k+1's workload

    @property
    def graded(self) -> bool:
        return not self.not_graded

    @property
    def agrees_strictly(self) -> bool:
        """One of the top two suggestions makes the step's move."""
        return self.agreeing is not None

    @property
    def measured(self) -> bool:
        return self.measured_speedup is not None

    @property
    def faster(self) -> bool:
        """Whether the step's move pays: the GPU's verdict where it measured both settings (beyond the noise
        band), else the tutorial's claim."""
        return self.measured_speedup >= 1 + SAME_SPEED if self.measured else self.claims_faster

    @property
    def agrees(self) -> bool:
        """Against the GPU: a move measured faster is suggested; one measured no faster is declined. Not measured:
        a move the tutorial claims faster is suggested; one it does not is suggested or the setting is near its
        limit (the tutorial's silence says neither)."""
        if self.measured:
            return self.agrees_strictly if self.faster else not self.agrees_strictly
        return self.agrees_strictly or not self.claims_faster and self.near_limit

    @property
    def agrees_near_limit(self) -> bool:
        """A move that does not pay, at a setting the diagnosis says is near its limit."""
        return self.agrees and not self.agrees_strictly and self.near_limit

    @property
    def declines(self) -> bool:
        """A move the GPU measured no faster, which the diagnosis does not suggest (it suggests another)."""
        return self.agrees and not self.agrees_strictly and not self.near_limit

    def to_dict(self) -> dict:
        return {**asdict(self), "graded": self.graded, "agrees": self.agrees, "agrees_strictly": self.agrees_strictly}


def _sign(x: float) -> int:
    return (x > 0) - (x < 0)


def _depth(split: tuple) -> float:
    """Where a split's factors sit: Σ level × log(factor) (0 for the outermost level)."""
    return sum(level * math.log(factor) for level, factor in enumerate(split))


def same_move(old, suggested, wanted) -> bool:
    """Whether moving a knob from ``old`` to ``suggested`` goes the way ``old`` → ``wanted`` does."""
    if isinstance(old, bool) or isinstance(old, str):
        return suggested == wanted
    if isinstance(old, tuple):  # a split: which way its factors move, towards the inner levels or out
        return _sign(_depth(suggested) - _depth(old)) == _sign(_depth(wanted) - _depth(old)) != 0
    return _sign(suggested - old) == _sign(wanted - old) != 0


def agrees(before: Spec, after: Spec, suggested: Spec) -> bool:
    """Whether the suggestion ``before`` → ``suggested`` moves a knob the step ``before`` →
    ``after`` changes, the same way."""
    moved = suggested.knobs.changed_from(before.knobs)
    wanted = set(after.knobs.changed_from(before.knobs))
    return any(name in wanted and same_move(getattr(before.knobs, name), getattr(suggested.knobs, name),
                                            getattr(after.knobs, name)) for name in moved)


def claims_faster(step: Step) -> bool:
    """Whether the tutorial claims step k+1 faster (or more GFLOP/s) than the setting diagnosed: step k
    itself, or the step of the lesson that has step k's knobs on step k+1's workload."""
    diagnosed = diagnosed_setting(step)
    return any(c.expect in FASTER and (c.other == step.previous.id if diagnosed == step.previous.spec else
                                       _spec_of(c.other) == diagnosed) for c in step.preset.compare)


def _spec_of(preset_id: str) -> Spec | None:
    preset = all_presets().get(preset_id)
    return preset.spec if preset is not None else None


def diagnosed_setting(step: Step) -> Spec:
    """The setting whose diagnosis grades ``step``: step k's knobs on step k+1's workload (step k's own
    setting where the step keeps the workload)."""
    before, after = step.previous.spec, step.preset.spec
    if before.workload == after.workload or before.template != after.template:
        return before
    return dataclasses.replace(before, workload=after.workload)


def why_not_graded(step: Step) -> str:
    if step.previous is None:
        return FIRST_STEP
    if step.previous.spec.template != step.preset.spec.template:
        return NEW_TEMPLATE
    if not step.changed_knobs:
        return WORKLOAD_ONLY
    if any(c.expect in SLOWER for c in step.preset.compare):
        return SLOWER_ON_PURPOSE
    if step.preset.found_by and step.changed_shape:
        return SEARCHED
    return ""


def measured_speedup(step: Step, times: Mapping[Spec, float] | None) -> float | None:
    """The measured time of the setting diagnosed ÷ step k+1's, where ``times`` (µs by setting) has both."""
    if not times:
        return None
    before, after = times.get(diagnosed_setting(step)), times.get(step.preset.spec)
    return before / after if before and after else None


def grade_step(lesson: str, step: Step, diagnosis: Diagnosis | None,
               times: Mapping[Spec, float] | None = None) -> StepGrade:
    """``step`` graded by ``diagnosis`` (of :func:`diagnosed_setting`), against the GPU's ``times`` where
    given (µs by setting: what the GPU measured)."""
    before, after = diagnosed_setting(step), step.preset.spec
    knobs = after.knobs
    changes = tuple((name, before.knobs.to_strings().get(name, ""), knobs.to_strings()[name])
                    for name in step.changed_knobs) if before.template == after.template else ()
    base = dict(lesson=lesson, step=step.number, before=step.previous.id, after=step.preset.id, changes=changes,
                claims_faster=claims_faster(step), measured_speedup=measured_speedup(step, times),
                diagnosed="" if before == step.previous.spec else f"{step.previous.id}'s knobs on {step.preset.id}'s "
                                                                   "workload")
    reason = why_not_graded(step)
    if diagnosis is not None and diagnosis.refused is not None and not reason:
        reason = REFUSED
    if diagnosis is None or not changes or diagnosis.refused is not None:  # not graded may still be compared
        return StepGrade(**base, not_graded=reason)
    every = diagnosis.suggestions(len(diagnosis.findings))
    rank = next((i for i, s in enumerate(every, start=1) if agrees(before, after, s.spec)), None)
    top = every[:TOP_SUGGESTIONS]
    return StepGrade(**base, not_graded=reason, suggestions=tuple(s.describe() for s in top),
                     agreeing=rank if rank is not None and rank <= TOP_SUGGESTIONS else None,
                     findings=tuple(f.rule for f in diagnosis.findings),
                     costs=tuple(round(f.cost_us, 2) for f in diagnosis.findings),
                     agreeing_later=rank if rank is not None and rank > TOP_SUGGESTIONS else None,
                     near_limit=diagnosis.limit is not None)


def lesson_agreement(lessons: Iterable[Lesson], diagnose: Callable[[Spec], Diagnosis] = diagnose_spec,
                     on_step: Callable[[StepGrade], None] | None = None,
                     times: Mapping[Spec, float] | None = None) -> list[StepGrade]:
    """Every step after the first of ``lessons``, graded (the diagnosis runs only for graded ones)."""
    grades = []
    for lesson in lessons:
        for step in lesson.steps[1:]:
            diagnosis = None if why_not_graded(step) else diagnose(diagnosed_setting(step))
            grade = grade_step(lesson.id, step, diagnosis, times)
            grades.append(grade)
            if on_step is not None:
                on_step(grade)
    return grades


def agreement_share(grades: Iterable[StepGrade], strict: bool = False) -> tuple[int, int]:
    """(agreeing, graded) steps: against the GPU, or ``strict``ly."""
    graded = [g for g in grades if g.graded]
    return sum(g.agrees_strictly if strict else g.agrees for g in graded), len(graded)
