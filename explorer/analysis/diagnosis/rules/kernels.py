"""More than one kernel: a launch each."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

LAUNCH_US = 1.2  # an empty kernel launched from a CUDA graph costs about this on an H100, per extra kernel
KERNELS_COST = (f"{LAUNCH_US} µs per extra kernel launch, a kernel launched from a loop on the host counted each "
                "time (the data they pass on is the rewrites finding's)")


def kernels_rule(f: Facts) -> Finding | None:
    launches = max(f.kernels, f.launches)
    if launches <= 1:
        return None
    if launches > f.kernels:
        evidence = [f"The host launches {f.kernels if f.kernels > 1 else 'its kernel'} {launches:,} times, from a "
                    "loop: each launch a small grid, each paying the launch."]
        title = f"{launches:,} kernel launches instead of one."
    else:
        evidence = [f"{f.kernels} kernels: each after the first reads what the one before wrote to global memory."]
        title = f"{f.kernels} kernels instead of one."
    return finding("kernels", title, evidence, (launches - 1) * LAUNCH_US, KERNELS_COST)


RULE = Rule("kernels", "more than one kernel launch", KERNELS_COST, kernels_rule)
