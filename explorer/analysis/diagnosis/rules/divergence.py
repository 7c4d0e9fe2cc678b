"""A tree whose active threads are spread over the warps: each warp with one lane adding costs the
whole warp's instructions (Harris's kernel 1: ``if (tid % (2*s) == 0)``)."""
from __future__ import annotations

from ...resources import SUB_PARTITIONS
from ..facts import Facts
from ..findings import Finding, Rule, finding

# Instructions one warp issues for a tree step: the index arithmetic and its test, two shared-memory loads, the
# add, the store and the branch (an assumption of the model, one cycle each; the SM's schedulers issue in parallel).
STEP_INSTRUCTIONS = 8
DIVERGENCE_COST = (f"{STEP_INSTRUCTIONS} issue cycles (an assumption) for each warp a step keeps busy beyond the "
                   f"warps its adding threads would fill side by side, in every block, {SUB_PARTITIONS} schedulers "
                   "per SM issuing at once")


def divergence_rule(f: Facts) -> Finding | None:
    if not f.divergent_warp_steps:
        return None
    evidence = [f"The tree's adding threads are spread over the warps: its steps keep {f.divergent_warp_steps} "
                f"warps busy in each block that threads side by side would leave idle.",
                "A warp runs a step's instructions if any one of its lanes adds; the other lanes wait.",
                "Indexing so that the adding threads are the first ones of the block (tid < s) keeps whole warps "
                "idle instead."]
    return finding("divergence", f"Divergent warps in the tree: {f.divergent_warp_steps} extra warp steps per block.",
                   evidence,
                   f.device.cycles_us(f.blocks * f.divergent_warp_steps * STEP_INSTRUCTIONS / SUB_PARTITIONS),
                   DIVERGENCE_COST)


RULE = Rule("divergence", "a tree whose adding threads are spread over the warps (some lanes of many warps add)",
            DIVERGENCE_COST, divergence_rule)
