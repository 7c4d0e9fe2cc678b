"""Block-wide barriers where one warp works: the tree's last steps, which only the first warp's
lanes add in, each ended by a __syncthreads() that every warp of the block waits at (Harris's
kernel 5 writes them out for that warp alone)."""
from __future__ import annotations

from ..counters import stall_evidence
from ..facts import Facts
from ..findings import Finding, Rule, finding

# What a step ended by __syncthreads() costs beyond the same step done by the first warp alone
# (warp-synchronous, or with shuffles): every warp of each block arrives and waits for the slowest,
# the blocks of an SM side by side (an assumption of the model before calibration).
BARRIER_CYCLES = 100
BARRIER_COST = (f"{BARRIER_CYCLES} cycles (an assumption) for each step of the tree that only the first warp works "
                "in but that ends in a block-wide __syncthreads(), once per wave of blocks")


def barrier_rule(f: Facts) -> Finding | None:
    """A tree whose last steps keep the block-wide barrier though only the first warp adds: that warp
    alone could finish them (``last_warp``: unrolled with __syncwarp, or shuffles)."""
    if not f.warp_only_barriers:
        return None
    waves = -(-f.blocks // (f.device.sms * f.resident_blocks))
    evidence = [f"{f.warp_only_barriers} steps of the tree add in the first warp only, yet each ends in "
                f"__syncthreads(): all {f.warps_per_block} warps of the block wait there.",
                f"{f.blocks:,} blocks: {waves} wave(s) of {f.device.sms * f.resident_blocks}, each paying those "
                "barriers.",
                "Once 32 or fewer sums remain, the first warp can add them alone: warp-synchronous steps with "
                "__syncwarp(), or shuffles in registers, and no block-wide barrier.",
                *stall_evidence(f, "barrier")]
    return finding("barriers", f"{f.warp_only_barriers} block-wide barriers for steps that one warp works in.",
                   evidence, f.device.cycles_us(waves * f.device.sms * f.warp_only_barriers * BARRIER_CYCLES),
                   BARRIER_COST)


RULE = Rule("barriers", "a tree's last steps, which one warp works in, each ended by a block-wide barrier",
            BARRIER_COST, barrier_rule, relieved_by=("last_warp",))
