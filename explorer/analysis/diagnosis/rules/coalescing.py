"""Uncoalesced global accesses: more 32-byte sectors moved than the lanes' data fill."""
from __future__ import annotations

from ...coalescing import SECTOR_BYTES
from ..counters import stall_evidence
from ..facts import Facts
from ..findings import Finding, Rule, finding

COALESCING_COST = ("the extra 32-byte sectors' bytes at the roof's bandwidth, or at the L2's measured bandwidth where "
                   "the workload's inputs fit in the L2 (the extra sectors hold data that other requests read: the L2 "
                   "serves them again, memory once, in the roofline's time)")


def coalescing_rule(f: Facts) -> Finding | None:
    extra = sum(a.sectors - a.ideal_sectors for a in f.globals)
    if extra <= 0:
        return None
    worst = max(f.globals, key=lambda a: a.sectors - a.ideal_sectors)
    per_request = worst.sectors / worst.requests if worst.requests else 0
    ideal = worst.ideal_sectors / worst.requests if worst.requests else 0
    evidence = [f"Worst: {worst.op} {worst.text}, {per_request:.1f} sectors per request where {ideal:.1f} hold "
                f"its data ({worst.access_bytes} B per lane).",
                f"{extra * SECTOR_BYTES / 1e6:,.2f} MB moved beyond what the warps ask for."]
    if "l2_hit_rate" in f.counters:
        evidence.append(f"Nsight Compute: L2 hit rate {f.counters['l2_hit_rate']:.0f}%.")
    evidence += stall_evidence(f, "long_scoreboard", "lg_throttle")
    nbytes = extra * SECTOR_BYTES
    if f.device.l2_gbps and f.input_bytes and f.input_bytes <= f.device.l2_bytes:
        evidence.append(f"The inputs ({f.input_bytes / 1e6:,.2f} MB) fit in the L2 "
                        f"({f.device.l2_bytes / 1e6:,.0f} MB): it serves the extra sectors, at {f.device.l2_gbps:,.0f} "
                        "GB/s.")
        cost = nbytes / (f.device.l2_gbps * 1e3)
    else:
        cost = f.device.bytes_us(nbytes)
    return finding("coalescing", f"Global accesses are not coalesced: {per_request:.1f} sectors per request.",
                   evidence, cost, COALESCING_COST)


RULE = Rule("coalescing", "global accesses that touch more 32-byte sectors than their data fill", COALESCING_COST,
            coalescing_rule)
