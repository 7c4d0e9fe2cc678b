"""Shared-memory bank conflicts: a warp's lanes that share a bank wait for one another."""
from __future__ import annotations

from ..counters import stall_evidence
from ..facts import Facts
from ..findings import Finding, Rule, finding

SHARED_WAVEFRONTS_PER_CYCLE = 1  # per SM: 32 banks × 4 bytes
BANK_COST = "one cycle per extra wavefront, each SM serving one shared-memory wavefront per cycle"


def bank_conflict_rule(f: Facts) -> Finding | None:
    conflicts = sum(a.conflicts for a in f.shared)
    if not conflicts:
        return None
    worst = max(f.shared, key=lambda a: (a.conflicts, a.max_degree))
    wavefronts = sum(a.wavefronts for a in f.shared)
    evidence = [f"Worst: {worst.op} {worst.text}, {worst.max_degree}-way, {worst.conflicts:,} extra wavefronts.",
                f"{conflicts:,} of {wavefronts:,} shared-memory wavefronts are conflicts "
                f"({conflicts / wavefronts:.0%})."]
    if "bank_conflicts" in f.counters:
        evidence.append(f"Nsight Compute: {f.counters['bank_conflicts']:,.0f} bank conflicts.")
    evidence += stall_evidence(f, "mio_throttle", "short_scoreboard")
    return finding("bank-conflicts", f"Shared-memory bank conflicts: up to {worst.max_degree}-way.", evidence,
                   f.device.cycles_us(conflicts / SHARED_WAVEFRONTS_PER_CYCLE), BANK_COST)


RULE = Rule("bank-conflicts", "shared-memory accesses whose lanes share a bank", BANK_COST, bank_conflict_rule)
