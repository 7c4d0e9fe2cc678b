"""Little work per thread before a block's tree over its threads' values."""
from __future__ import annotations

from ....units import article, count
from ..counters import stall_evidence
from ..facts import Facts
from ..findings import Finding, Rule, finding

LITTLE_WORK = 2  # elements per thread before a tree: Harris's kernels 3 (one) and 4 (two) pay its cost per few loads
# Cycles one step of a tree over a block's values takes: a shared-memory load, an add, a store and the barrier
# that ends the step, each waiting for the one before (an assumption of the model, not a measurement).
TREE_STEP_CYCLES = 60
WORK_COST = (f"the tree's log2(threads) steps at {TREE_STEP_CYCLES} cycles each (an assumption: a shared-memory "
             "load, an add, a store and a barrier), once per wave of blocks: the time an SM's blocks spend adding "
             "instead of loading")


def work_per_thread_rule(f: Facts) -> Finding | None:
    """A reduction whose threads load one or two elements each before the block's tree: every
    block pays the tree's steps and barriers for a few loads (Brent's theorem: fewer threads,
    each summing more elements serially, pay it once per many elements)."""
    if not f.tree_steps or not f.loads_per_thread or f.loads_per_thread > LITTLE_WORK:
        return None
    waves = -(-f.blocks // (f.device.sms * f.resident_blocks))
    per_thread = f"{f.loads_per_thread:g} element{'s' if f.loads_per_thread != 1 else ''}"
    evidence = [f"Each thread loads {per_thread} from global memory, then the block adds its "
                f"{f.threads_per_block} values in a tree of {f.tree_steps} steps.",
                f"{f.blocks:,} blocks: {count(waves, 'wave')} of {f.device.sms * f.resident_blocks} blocks, each wave "
                "paying "
                f"the {f.tree_steps} steps for {f.threads_per_block * f.loads_per_thread:g} elements per block.",
                "Summing more elements per thread in a register before the tree needs fewer blocks, and so "
                "fewer trees.",
                *stall_evidence(f, "barrier")]
    return finding("work-per-thread", f"Too little work per thread: {per_thread} before "
                   f"{article(f.tree_steps)} {f.tree_steps}-step tree.", evidence,
                   f.device.cycles_us(waves * f.device.sms * f.tree_steps * TREE_STEP_CYCLES), WORK_COST)


RULE = Rule("work-per-thread", f"a block's tree over its threads' values after {LITTLE_WORK} or fewer loads per thread",
            WORK_COST, work_per_thread_rule)
