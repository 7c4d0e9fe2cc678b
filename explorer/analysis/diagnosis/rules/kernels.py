"""More than one kernel: a launch each."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

LAUNCH_US = 1.2  # an empty kernel launched from a CUDA graph costs about this on an H100, per extra kernel
KERNELS_COST = f"{LAUNCH_US} µs per extra kernel launch (the data they pass on is the rewrites finding's)"


def kernels_rule(f: Facts) -> Finding | None:
    if f.kernels <= 1:
        return None
    evidence = [f"{f.kernels} kernels: each after the first reads what the one before wrote to global memory."]
    return finding("kernels", f"{f.kernels} kernels instead of one.", evidence, (f.kernels - 1) * LAUNCH_US,
                   KERNELS_COST)


RULE = Rule("kernels", "more than one kernel launch", KERNELS_COST, kernels_rule)
