"""The records of a diagnosis: a rule, the finding it makes, the suggestion that addresses the
finding, and the diagnosis of one setting."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from ...build import Spec
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

    def __call__(self, f: Facts) -> Finding | None:
        return self.check(f)


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
