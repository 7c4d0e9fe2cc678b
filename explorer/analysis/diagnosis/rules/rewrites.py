"""Rewrites: more bytes stored to global memory than the output holds."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

OUTPUT_BYTES = 4  # outputs are float32
REWRITE_COST = ("every byte stored beyond the output's own, written and read back at the roof's bandwidth; an "
                "address stored again by the same kernel, at the L2's measured bandwidth where the buffers stored "
                "fit in the L2 (the sectors a store wastes are the coalescing finding's; a store to one address on "
                "every iteration of a loop, unconditional, the compiler keeps in a register: it counts once)")


def rewrite_rule(f: Facts) -> Finding | None:
    """More bytes stored to global memory than the output holds: partial results accumulated
    in global memory, or intermediates passed between kernels. Not an accumulator the compiler keeps in a
    register (Facts.register_kept_bytes)."""
    stored = sum(a.ideal_bytes for a in f.globals if a.op == "store") - f.register_kept_bytes
    output = f.outputs * OUTPUT_BYTES
    if stored <= output * 1.5:
        return None
    evidence = [f"{stored / 1e6:,.2f} MB stored to global memory for an output of {output / 1e6:,.2f} MB "
                f"({stored / output:.1f}×)."]
    # Intermediates (the distinct bytes stored beyond the output) go to memory and back; an address the kernel
    # stores again, while the buffers it stores fit in the L2, is served by the L2.
    again = max(0, stored - f.stored_footprint) if f.stored_footprint else 0
    in_l2 = bool(again and f.device.l2_gbps and f.stored_footprint <= f.device.l2_bytes)
    if in_l2:
        evidence.append(f"{again / 1e6:,.2f} MB of it store addresses stored before, in buffers of "
                        f"{f.stored_footprint / 1e6:,.2f} MB that the L2 ({f.device.l2_bytes / 1e6:,.0f} MB) holds: "
                        f"they go at its {f.device.l2_gbps:,.0f} GB/s.")
    else:
        again = 0
    cost = f.device.bytes_us(2 * (stored - output - again)) + (2 * again / (f.device.l2_gbps * 1e3) if again else 0)
    return finding("rewrites", f"The output is written {stored / output:.1f} times over: partial results go "
                   "through global memory.", evidence, cost, REWRITE_COST)


RULE = Rule("rewrites", "more bytes stored to global memory than the output holds", REWRITE_COST, rewrite_rule)
