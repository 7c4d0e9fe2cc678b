"""The records of a diagnosis: a rule, the finding it makes, the suggestion that addresses the
finding, and the diagnosis of one setting."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from ...build import Spec
from .calibration import scale
from .facts import Facts


@dataclass(frozen=True)
class Suggestion:
    spec: Spec
    changes: tuple[tuple[str, str, str], ...]  # (knob, from, to)
    cost_us: float  # the finding's estimated cost after the change
    total_us: float  # the estimated total after the change

    def describe(self) -> str:
        return ", ".join(f"{name} {old} → {new}" for name, old, new in self.changes)


@dataclass(frozen=True)
class Finding:
    rule: str  # the rule's name
    title: str  # one sentence
    evidence: tuple[str, ...]
    cost_us: float
    cost_rule: str  # how the cost is estimated
    suggestion: Suggestion | None = None
    wrong: bool = False  # the kernel computes a wrong result (a race): ranked first, whatever it costs
    # A cost the roofline's least time already holds (the roof of the units the kernel multiplies on), not
    # one beyond it: the estimate (rules.estimated_total) leaves it out.
    within_roof: bool = False


def finding(rule: str, title: str, evidence: Iterable[str], cost_us: float, cost_rule: str,
            wrong: bool = False, within_roof: bool = False) -> Finding:
    """A rule's finding; a cost its model puts below zero counts as none."""
    return Finding(rule, title, tuple(evidence), max(0.0, cost_us), cost_rule, wrong=wrong, within_roof=within_roof)


@dataclass(frozen=True)
class Rule:
    """One rule: its name (a Finding's ``rule``), what it looks for and how its cost is estimated
    (its row of the table the documentation prints), and its check, a pure function of Facts."""

    name: str
    looks_for: str
    cost: str
    check: Callable[[Facts], Finding | None]
    # Knobs whose move relieves the finding, where a template has them: a neighbour that raises this finding
    # is tried with one of them moved as well (.search: an overlapped softmax that needs a third stage).
    relieved_by: tuple[str, ...] = ()

    def __call__(self, f: Facts) -> Finding | None:
        """The check's finding, its cost scaled by the factor the calibration fitted to this rule
        (:mod:`.calibration`; the check itself charges its model's constants as assumed)."""
        found = self.check(f)
        k = scale(self.name)
        if found is None or k == 1.0 or found.within_roof:  # a cost the roofline's own time holds: not fitted
            return found
        return replace(found, cost_us=found.cost_us * k,
                       cost_rule=f"{found.cost_rule}; × {k:.2f}, the factor fitted to measurements (calibration)")


@dataclass(frozen=True)
class Diagnosis:
    spec: Spec
    findings: tuple[Finding, ...]  # ranked
    bound_us: float = 0.0
    bound: str = ""
    estimate_us: float = 0.0  # the roofline's least time plus every finding's cost
    measured_us: float | None = None
    tried: int = 0  # neighbouring settings built and analysed
    refused: str | None = None  # the setting cannot be built: this sentence is the whole diagnosis
    notes: tuple[str, ...] = ()
    # Where no neighbour is estimated faster by more than the model's error: the sentence that says the
    # setting is near its limit and what holds it (its findings then carry no suggestion).
    limit: str | None = None

    @property
    def static(self) -> bool:
        return self.measured_us is None

    def suggestions(self, n: int = 2) -> list[Suggestion]:
        """The first ``n`` distinct suggestions, in the findings' order."""
        out: list[Suggestion] = []
        for found in self.findings:
            if found.suggestion is not None and all(s.spec != found.suggestion.spec for s in out):
                out.append(found.suggestion)
        return out[:n]
