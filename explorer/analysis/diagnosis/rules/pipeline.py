"""No pipeline: a loop that stages tiles in shared memory waits for each copy."""
from __future__ import annotations

from ....units import count
from ..counters import stall_evidence
from ..facts import Facts
from ..findings import Finding, Rule, finding

# Cycles a load from global memory takes to arrive (an assumption of the model: microbenchmarks
# of recent GPUs put it at 500-600 cycles when it misses the L1).
MEMORY_LATENCY_CYCLES = 600
PIPELINE_COST = (f"one global-memory latency ({MEMORY_LATENCY_CYCLES} cycles, an assumption) per step of the "
                 "shared-memory loop per wave of blocks: the loads a pipeline would overlap")


def pipeline_rule(f: Facts) -> Finding | None:
    """A loop that stages tiles in shared memory with synchronous copies: every step waits for
    its loads (on sm_80+ cp.async and a multi-stage pipeline overlap them with the work)."""
    if not f.staged_steps or f.async_copies or f.device.arch < 80:
        return None
    waves = -(-f.blocks // (f.device.sms * f.resident_blocks))
    evidence = [f"A loop of {f.staged_steps} steps loads tiles into shared memory and waits at a barrier each "
                "step; no cp.async in the kernel.",
                f"{count(waves, 'wave')} of {f.device.sms * f.resident_blocks} blocks.",
                *stall_evidence(f, "long_scoreboard", "barrier")]
    return finding("pipeline", f"Each of {f.staged_steps} steps waits for its copy to shared memory.", evidence,
                   f.device.cycles_us(waves * f.device.sms * f.staged_steps * MEMORY_LATENCY_CYCLES),
                   PIPELINE_COST)


RULE = Rule("pipeline", "a loop that stages tiles in shared memory with synchronous copies", PIPELINE_COST,
            pipeline_rule)
