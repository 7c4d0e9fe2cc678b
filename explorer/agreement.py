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

A step the tutorial does not claim *faster* than the step before (it claims it no slower or the
same speed, or makes no claim against it) is not advice that a move pays: it also agrees when the
diagnosis of step k says that no one-knob move is estimated faster (the setting is near its limit,
:data:`explorer.analysis.diagnosis.LIMIT_RULE`).
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

from .analysis.diagnosis import Diagnosis, diagnose_spec
from .build import Spec
from .lessons import Lesson, Step

TOP_SUGGESTIONS = 2
SLOWER = ("slower", "fewer_gflops")
FASTER = ("faster", "more_gflops")

NEW_TEMPLATE = "changes the template"
SEARCHED = "a search's best for another workload, not a change made to the step before"
WORKLOAD_ONLY = "changes only the workload"
SLOWER_ON_PURPOSE = "shows a slower setting on purpose"
FIRST_STEP = "first step"


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

    @property
    def graded(self) -> bool:
        return not self.not_graded

    @property
    def agrees(self) -> bool:
        return self.agreeing is not None or self.agrees_near_limit

    @property
    def agrees_near_limit(self) -> bool:
        """A step not claimed faster, at a setting the diagnosis says is near its limit."""
        return self.agreeing is None and not self.claims_faster and self.near_limit

    def to_dict(self) -> dict:
        return {**asdict(self), "graded": self.graded, "agrees": self.agrees}


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
    """Whether the tutorial claims step k+1 faster (or more GFLOP/s) than step k itself."""
    return any(c.other == step.previous.id and c.expect in FASTER for c in step.preset.compare)


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


def grade_step(lesson: str, step: Step, diagnosis: Diagnosis | None) -> StepGrade:
    before, after = step.previous.spec, step.preset.spec
    knobs = after.knobs
    changes = tuple((name, before.knobs.to_strings().get(name, ""), knobs.to_strings()[name])
                    for name in step.changed_knobs) if before.template == after.template else ()
    base = dict(lesson=lesson, step=step.number, before=step.previous.id, after=step.preset.id, changes=changes,
                claims_faster=claims_faster(step))
    reason = why_not_graded(step)
    if diagnosis is None or not changes:  # a step not graded may still be compared, for the record
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
                     on_step: Callable[[StepGrade], None] | None = None) -> list[StepGrade]:
    """Every step after the first of ``lessons``, graded (the diagnosis runs only for graded ones)."""
    grades = []
    for lesson in lessons:
        for step in lesson.steps[1:]:
            diagnosis = None if why_not_graded(step) else diagnose(step.previous.spec)
            grade = grade_step(lesson.id, step, diagnosis)
            grades.append(grade)
            if on_step is not None:
                on_step(grade)
    return grades


def agreement_share(grades: Iterable[StepGrade]) -> tuple[int, int]:
    """(agreeing, graded) steps."""
    graded = [g for g in grades if g.graded]
    return sum(g.agrees for g in graded), len(graded)
