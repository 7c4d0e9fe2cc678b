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
                 "shared-memory loop per wave of blocks, less what the SM's other resident blocks compute meanwhile "
                 "(each block's step at least its share of the roofline's least time): the loads a pipeline would "
                 "overlap")


def pipeline_rule(f: Facts) -> Finding | None:
    """A loop that stages tiles in shared memory with synchronous copies: every step waits for
    its loads (on sm_80+ cp.async and a multi-stage pipeline overlap them with the work)."""
    if not f.staged_steps or f.async_copies or f.device.arch < 80:
        return None
    waves = -(-f.blocks // (f.device.sms * f.resident_blocks))
    # While one block waits for its tile, the SM's other resident blocks compute: each block's step takes at least
    # its share of the roofline's least time (the SM's time for it at the roof).
    step_cycles = f.bound_us * f.device.sms / (f.blocks * f.staged_steps) * f.device.clock_ghz * 1e3
    hidden = min(MEMORY_LATENCY_CYCLES, (f.resident_blocks - 1) * step_cycles)
    evidence = [f"A loop of {f.staged_steps} steps loads tiles into shared memory and waits at a barrier each "
                "step; no cp.async in the kernel.",
                f"{count(waves, 'wave')} of {f.device.sms * f.resident_blocks} blocks."]
    if hidden:
        evidence.append(f"The SM's {f.resident_blocks - 1} other resident blocks compute about {hidden:,.0f} of each "
                        f"wait's {MEMORY_LATENCY_CYCLES} cycles.")
    evidence += stall_evidence(f, "long_scoreboard", "barrier")
    return finding("pipeline", f"Each of {f.staged_steps} steps waits for its copy to shared memory.", evidence,
                   f.device.cycles_us(waves * f.device.sms * f.staged_steps * (MEMORY_LATENCY_CYCLES - hidden)),
                   PIPELINE_COST)


RULE = Rule("pipeline", "a loop that stages tiles in shared memory with synchronous copies", PIPELINE_COST,
            pipeline_rule)
