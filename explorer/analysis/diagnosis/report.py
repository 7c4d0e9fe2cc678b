"""A diagnosis as text (the command line) and as JSON. The JSON names each suggestion's link as
query parameters made by the caller's ``query`` (``explorer.urlstate.to_query`` at the command
line): links are the app's, above the analyses."""
from __future__ import annotations

from collections.abc import Callable, Mapping

from ...build import Spec
from .diagnoser import LIMIT_RULE, MIN_SHARE, RANKING_RULE
from .findings import Diagnosis, Finding
from .search import SUGGESTION_RULE


def diagnosis_json(d: Diagnosis, query: Callable[[Spec], Mapping[str, str]]) -> dict:
    """``d`` as JSON; ``query(spec)`` gives the link parameters of a suggested setting."""

    def finding(rank: int, found: Finding) -> dict:
        s = found.suggestion
        return {"rank": rank, "rule": found.rule, "title": found.title, "wrong": found.wrong,
                "evidence": list(found.evidence),
                "cost_us": round(found.cost_us, 3),
                "cost_percent_of_roofline": _percent(found.cost_us, d.bound_us),
                "cost_rule": found.cost_rule,
                "suggestion": None if s is None else {
                    "changes": [{"knob": k, "from": a, "to": b} for k, a, b in s.changes],
                    "set": [f"{k}={b}" for k, _, b in s.changes], "query": query(s.spec),
                    "cost_us": round(s.cost_us, 3), "estimate_us": round(s.total_us, 3)}}

    return {
        "knobs": d.spec.knobs.to_strings(), "evidence": "static" if d.static else "measured",
        "refused": d.refused,
        "roofline": {"least_us": round(d.bound_us, 3), "bound": d.bound, "measured_us": d.measured_us,
                     "percent_of_roofline": _percent(d.bound_us, d.measured_us)},
        "estimate_us": round(d.estimate_us, 3), "neighbours_tried": d.tried, "limit": d.limit,
        "findings": [finding(rank, found) for rank, found in enumerate(d.findings, start=1)],
        "ranking_rule": RANKING_RULE, "suggestion_rule": SUGGESTION_RULE, "limit_rule": LIMIT_RULE,
        "notes": list(d.notes),
    }


def _percent(part: float, whole: float | None) -> float | None:
    return round(100 * part / whole, 1) if whole else None


def format_diagnosis(d: Diagnosis, command: str = "python -m explorer show TEMPLATE") -> str:
    """The diagnosis as text; ``command`` (e.g. ``python -m explorer show PRESET``) prefixes
    each suggestion's command line."""
    if d.refused is not None:
        return d.refused
    lines = [f"Roofline: at least {d.bound_us:.2f} µs ({d.bound}-bound); static estimate {d.estimate_us:.2f} µs"
             + (f"; measured {d.measured_us:.2f} µs" if d.measured_us is not None else "") + "."]
    if d.limit is not None:
        lines.append(d.limit)
    if not d.findings:
        lines.append("No finding costs more than "
                     f"{MIN_SHARE:.0%} of the roofline's time: nothing here limits this setting much.")
    for rank, found in enumerate(d.findings, start=1):
        share = f", {100 * found.cost_us / d.bound_us:.0f}% of the roofline's time" if d.bound_us else ""
        lines.append(f"{rank}. {found.title}" if found.wrong else
                     f"{rank}. {found.title} (about {found.cost_us:.2f} µs{share})")
        lines.extend(f"   - {line}" for line in found.evidence)
        lines.append(f"   cost: {found.cost_rule}")
        s = found.suggestion
        if s is None:
            if found.wrong:
                lines.append("   no single knob move removes it")
            elif d.limit is None:
                lines.append("   no single knob move lowers this by more than the model's error")
        else:
            sets = " ".join(f"--set {k}={b}" for k, _, b in s.changes)
            lines.append(f"   try {s.describe()} (estimate {s.total_us:.2f} µs): {command} {sets} --view diagnosis")
    lines.append(f"Ranking: {RANKING_RULE}")
    lines.append(f"Suggestions: {SUGGESTION_RULE} ({d.tried} neighbours built)")
    lines.extend(f"note: {n}" for n in d.notes)
    return "\n".join(lines)
