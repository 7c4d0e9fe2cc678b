"""The diagnosis of one setting: its Facts, every rule's finding, the ranking
(:data:`RANKING_RULE`), and each shown finding's suggestion among the neighbours."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import replace

from ...build import Build, Spec, build
from ...errors import ExplorerError
from ..roofline import Ceilings
from ..sass import compile_binary
from .calibration import source as calibration_source
from .calibration import speedup_error
from .facts import REGISTER_NOTE, Facts, facts_of
from .findings import Diagnosis, Finding
from .rules import estimated_total, findings_of
from .search import analysed_neighbours, move_error, suggest

MIN_SHARE = 0.05  # findings costing less than this share of the roofline's least time are not shown
TOP = 4  # findings shown


RANKING_RULE = (f"A finding that makes the result wrong (a race) comes first. The others are ranked by their "
                f"estimated cost in µs, largest first; one costing less than {MIN_SHARE:.0%} of the roofline's least "
                "time is not shown. Each cost is the extra time its rule's model charges (stated with the finding), a "
                "static estimate, not a measurement.")
STATIC_NOTE = ("Static evidence only (the build's analyses and the published figures of the target): "
               "no GPU measured this setting.")


def ranked(findings: Iterable[Finding], bound: float) -> list[Finding]:
    """The ranking rule (:data:`RANKING_RULE`)."""
    shown = [found for found in findings if found.wrong or found.cost_us >= MIN_SHARE * bound]
    return sorted(shown, key=lambda found: (not found.wrong, -found.cost_us))


def refusal(spec: Spec, error: ExplorerError) -> Diagnosis:
    """A setting the library refuses: its one sentence, nothing else."""
    return Diagnosis(spec, (), refused=str(error))


def diagnose(built: Build, *, binary=None, ceilings: Ceilings | None = None, measured_us: float | None = None,
             counters: dict | None = None, build_fn: Callable[[Spec], Build] | None = None,
             workers: int = 1) -> Diagnosis:
    """The diagnosis of ``built``: its findings ranked, each with the neighbour that addresses
    it. ``build_fn(spec)`` builds a neighbour (default: ``explorer.build.build`` for the same
    target); ``workers`` > 1 builds them from that many threads (a server's build pool)."""
    current = facts_of(built, binary=binary, ceilings=ceilings, measured_us=measured_us, counters=counters)
    found = ranked(findings_of(current).values(), current.bound_us)[:TOP]
    build_fn = build_fn or (lambda spec: build(spec, built.target))
    candidates = analysed_neighbours(built.spec, current, ceilings, build_fn, workers) if found else []
    suggested: list[Finding] = []
    for f in found:
        taken = [s.suggestion.spec for s in suggested if s.suggestion is not None]
        suggested.append(replace(f, suggestion=suggest(f.rule, current, candidates, taken)))
    suggests = any(f.suggestion is not None for f in suggested)
    limit = None if suggests or found and not candidates else near_limit(current, candidates)
    notes = [STATIC_NOTE if measured_us is None else
             f"Measured: {measured_us:.2f} µs, {100 * current.bound_us / measured_us:.0f}% of the roofline."]
    if binary is None:
        notes.append("Not compiled to a cubin here: registers, spills and the SASS mix are unknown.")
    if current.tensor_cores:
        notes.append("16-bit inputs run on the tensor cores, whose peak is not measured here: the roofline's least "
                     "time is the memory roof's.")
    if counters:
        notes.append("Nsight Compute profiled one launch: its counters are quoted beside the static evidence.")
    notes.append(REGISTER_NOTE)
    return Diagnosis(built.spec, tuple(suggested), current.bound_us, current.bound, estimated_total(current),
                     measured_us, len(candidates), None, tuple(notes), limit)


def near_limit(current: Facts, candidates: Iterable[tuple[Spec, tuple, Facts]]) -> str | None:
    """The sentence that says ``current`` is near its limit (:data:`LIMIT_RULE`), or None where a
    neighbour is estimated faster by more than the model's error."""
    total, error = estimated_total(current), speedup_error()
    found = findings_of(current)
    if any(f.wrong for f in found.values()) or any(
            total > estimated_total(facts) * (1 + move_error(found, findings_of(facts))) for _, _, facts in candidates):
        return None  # a wrong result is never near its limit; nor is a setting a neighbour beats
    head = (f"No setting one knob away is estimated faster by more than the model's error for its move (±{error:.0%} "
            f"over every move, {calibration_source()}): this setting is near its limit")
    roof = f"the roofline's least time, {current.bound_us:,.2f} µs, set by {current.roof}"
    if total <= current.bound_us * (1 + error):
        return f"{head}, within that error of {roof}."
    held = max(found.values(), key=lambda finding: finding.cost_us)
    return (f"{head} as one knob goes: its largest cost, {held.rule} ({held.cost_us:,.2f} µs), holds it above {roof}; "
            "lowering it takes another template or several knobs at once.")


LIMIT_RULE = ("Where no neighbouring setting is estimated faster by more than the model's held-out error for "
              "that move (calibration, as for a suggestion), the diagnosis suggests no move: it says the setting is "
              "near its limit, and whether the roofline's roof or its largest finding holds it.")


def diagnose_spec(spec: Spec, target=None, *, compile: bool = True, **options) -> Diagnosis:
    """Build ``spec`` (and compile it for registers, where the tools are here) and diagnose it;
    a setting the library refuses gets :func:`refusal`."""
    try:
        built = build(spec, target)
        binary = compile_binary(built) if compile else None
    except ExplorerError as error:
        return refusal(spec, error)
    return diagnose(built, binary=binary, **options)
