"""Rewrites: more bytes stored to global memory than the output holds."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

OUTPUT_BYTES = 4  # outputs are float32
REWRITE_COST = ("every byte stored beyond the output's own, written and read back at the roof's bandwidth (the "
                "sectors a store wastes are the coalescing finding's)")


def rewrite_rule(f: Facts) -> Finding | None:
    """More bytes stored to global memory than the output holds: partial results accumulated
    in global memory, or intermediates passed between kernels."""
    stored = sum(a.ideal_bytes for a in f.globals if a.op == "store")
    output = f.outputs * OUTPUT_BYTES
    if stored <= output * 1.5:
        return None
    evidence = [f"{stored / 1e6:,.2f} MB stored to global memory for an output of {output / 1e6:,.2f} MB "
                f"({stored / output:.1f}×)."]
    return finding("rewrites", f"The output is written {stored / output:.1f} times over: partial results go "
                   "through global memory.", evidence, f.device.bytes_us(2 * (stored - output)), REWRITE_COST)


RULE = Rule("rewrites", "more bytes stored to global memory than the output holds", REWRITE_COST, rewrite_rule)
