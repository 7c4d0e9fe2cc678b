"""No producer warpgroup: the consumers issue their own copies (warp specialization's absence). A
consumer thread waits for a buffer to be released and issues its copy between its own multiplies,
so the copies start half a tile later than a warpgroup that does nothing else would start them."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding
from ..tiles import ahead, copy_wait_us

PRODUCER_COST = ("the ring-depth finding's model with the copies issued by a consumer, half a tile later, − the same "
                 "with a producer warpgroup issuing them")


def producer_rule(f: Facts) -> Finding | None:
    loop = f.loop
    if loop is None or loop.producer or loop.instruction != "wgmma" or loop.stages < 2 or not loop.tensor_us:
        return None
    cost = copy_wait_us(f, ahead(loop)) - copy_wait_us(f, ahead(loop, producer=True))
    if cost <= 0:
        return None
    evidence = [f"The first consumer's thread 0 issues the TMA copies between its own multiplies: they run "
                f"{ahead(loop):g} tile(s) ahead instead of {ahead(loop, producer=True):g}.",
                "A producer warpgroup (warp_specialize) does nothing but wait for free buffers and copy, and hands "
                "its registers to the consumers (setmaxnreg)."]
    return finding("producer", "The consumers issue their own copies: no producer warpgroup.", evidence, cost,
                   PRODUCER_COST)


RULE = Rule("producer", "a wgmma tile loop whose consumers issue their own copies (no warp specialization)",
            PRODUCER_COST, producer_rule, relieved_by=("warp_specialize",))
