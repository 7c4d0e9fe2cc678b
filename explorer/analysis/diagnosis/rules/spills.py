"""Register spills: local memory, which lives in global memory."""
from __future__ import annotations

from ..counters import stall_evidence
from ..facts import Facts
from ..findings import Finding, Rule, finding

SPILL_COST = "the spilled bytes of every thread at the roof's bandwidth (local memory lives in global memory)"


def spill_rule(f: Facts) -> Finding | None:
    if not f.spill_bytes:
        return None
    threads = f.blocks * f.threads_per_block
    evidence = [f"{f.spill_bytes} bytes of spill stores and loads per thread ({f.registers} registers).",
                *stall_evidence(f, "lg_throttle")]
    return finding("spills", f"Registers spill to local memory: {f.spill_bytes} bytes per thread.", evidence,
                   f.device.bytes_us(f.spill_bytes * threads), SPILL_COST)


RULE = Rule("spills", "registers spilled to local memory", SPILL_COST, spill_rule)
