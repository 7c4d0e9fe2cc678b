"""Narrow loads: coalesced global loads of fewer than 16 bytes per lane."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

LSU_ISSUE_PER_CYCLE = 4  # memory instructions an SM issues per cycle (one per sub-partition)
WIDEST_ACCESS_BYTES = 16  # float4
VECTOR_COST = (f"the extra load instructions a {WIDEST_ACCESS_BYTES}-byte access would save, at "
               f"{LSU_ISSUE_PER_CYCLE} per cycle per SM")


def vector_rule(f: Facts) -> Finding | None:
    """Coalesced global loads of fewer than 16 bytes per lane: more instructions than needed. A
    warp's lanes read one contiguous run (32 × its bytes per lane, up to 4 sectors per request: a
    warp of one-element 16-bit loads asks for 64 bytes, 2 sectors)."""
    narrow = [a for a in f.globals if a.op == "load" and a.access_bytes < WIDEST_ACCESS_BYTES
              and a.requests and a.sectors <= a.ideal_sectors * 1.25
              and a.ideal_sectors >= a.requests * min(4, a.access_bytes)]
    if not narrow:
        return None
    saved = sum(a.requests * (1 - a.access_bytes / WIDEST_ACCESS_BYTES) for a in narrow)
    evidence = [f"{a.op} {a.text}: {a.access_bytes} B per lane, {a.requests:,} requests." for a in narrow[:2]]
    if any(a.access_bytes == 2 for a in narrow):
        evidence.append(f"A 2-byte load moves one 16-bit element; a {WIDEST_ACCESS_BYTES}-byte load moves "
                        f"{WIDEST_ACCESS_BYTES // 2} of them with one instruction.")
    return finding("vector-width", f"Global loads of {min(a.access_bytes for a in narrow)} bytes per lane where "
                   f"{WIDEST_ACCESS_BYTES} would do.", evidence,
                   f.device.cycles_us(saved / LSU_ISSUE_PER_CYCLE), VECTOR_COST)


RULE = Rule("vector-width", "coalesced global loads narrower than 16 bytes per lane (one 16-bit element included)",
            VECTOR_COST, vector_rule)
