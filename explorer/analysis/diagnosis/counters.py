"""Nsight Compute's counters that the rules quote beside their static evidence."""
from __future__ import annotations

from .. import ncu
from .facts import Facts

L2_HIT_RATE = "lts__t_sector_hit_rate.pct"
# Warp stall reasons (share of the active warps' cycles stalled on each), and what they wait for.
STALLS = {
    "long_scoreboard": "global or local memory", "lg_throttle": "the global/local load queue",
    "barrier": "a barrier", "mio_throttle": "the shared-memory pipe", "short_scoreboard": "shared memory",
}
STALL_METRIC = "smsp__warp_issue_stalled_{}_per_warp_active.pct"


def ncu_metrics() -> tuple[str, ...]:
    """The counters the diagnosis reads (``explorer.analysis.ncu.profile(spec, metrics=...)``)."""

    return (*ncu.PANEL_METRICS, L2_HIT_RATE, *(STALL_METRIC.format(reason) for reason in STALLS))


def counters_of(launch) -> dict:
    """An ``explorer.analysis.ncu.KernelCounters`` launch → the counters the rules quote."""

    metrics = launch.metrics
    conflicts = [launch.get(op, "conflicts") for op in ("load", "store")]
    out = {"achieved_occupancy": metrics.get(ncu.OCCUPANCY), "l2_hit_rate": metrics.get(L2_HIT_RATE),
           "bank_conflicts": sum(conflicts) if None not in conflicts else None,
           "duration_us": metrics[ncu.DURATION] / 1e3 if metrics.get(ncu.DURATION) is not None else None,
           **{f"stall_{reason}": metrics.get(STALL_METRIC.format(reason)) for reason in STALLS}}
    return {name: value for name, value in out.items() if value is not None}


def stall_evidence(f: Facts, *reasons: str) -> list[str]:
    """Nsight Compute's stall reasons that bear on a finding, as evidence lines."""
    return [f"Nsight Compute: warps stalled on {STALLS[r]} ({r}) {f.counters[f'stall_{r}']:.0f}% of the time."
            for r in reasons if f"stall_{r}" in f.counters]
