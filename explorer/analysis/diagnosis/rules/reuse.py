"""Little reuse: many loads per output that a larger thread tile would share."""
from __future__ import annotations

from ....targets import WARP_SIZE
from ....units import count
from ..facts import Facts
from ..findings import Finding, Rule, finding

REUSE_COST = ("loads beyond one per output (or beyond the inputs' elements per output, where each input feeds "
              "one output only), as one warp-wide request per 32 loads (per the threads a warp holds, where a block "
              "leaves lanes idle) at one per cycle per SM (the shared-memory or L1 rate)")


def reuse_rule(f: Facts) -> Finding | None:
    """Little work per thread: each output needs many loads that a larger thread tile shares.
    Not for tensor cores, whose warps load whole fragments (a thread's footprint says nothing),
    nor for loads no tile can share: a reduction over a row reads each element for one output only."""
    floor = max(1.0, f.compulsory_loads_per_output)
    if f.loads_per_output is None or f.loads_per_output <= floor or f.tensor_cores:
        return None
    # A warp issues one request per load for the lanes that hold a thread: a block of 8 threads, 8 loads a request.
    extra = (f.loads_per_output - floor) * f.outputs / (WARP_SIZE * f.lanes_used)
    evidence = [f"Each thread computes {count(f.outputs_per_thread, 'output')} and loads {f.loads_per_output:.2f} "
                "inputs per output (its input footprint once)."]
    if f.lanes_used < 1:
        evidence.append(f"A block of {count(f.threads_per_block, 'thread')} fills {f.lanes_used:.0%} of its warps' "
                        "lanes: each load is a request for those lanes only.")
    if f.ffma_share is not None:
        evidence.append(f"SASS: FFMA is {f.ffma_share:.0%} of the kernel's instructions.")
    return finding("reuse", f"Little work per thread: {f.loads_per_output:.1f} loads per output.", evidence,
                   f.device.cycles_us(extra), REUSE_COST)


RULE = Rule("reuse", "many loads per output that a larger thread tile would share", REUSE_COST, reuse_rule)
