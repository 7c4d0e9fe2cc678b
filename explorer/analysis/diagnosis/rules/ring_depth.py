"""Copies that do not arrive in time: a tensor-core tile loop whose ring of shared buffers runs too
few tiles ahead of the multiplies to hide a copy's latency and transfer."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding
from ..tiles import COPY_LATENCY_CYCLES, FILL_BYTES_PER_CYCLE, ahead, copy_wait_us

RING_COST = (f"per round of the SM's resident blocks' steps, a copy's latency ({COPY_LATENCY_CYCLES} cycles) and "
             f"transfer (its bytes at {FILL_BYTES_PER_CYCLE} B per cycle per SM), both assumptions, beyond the "
             "compute of the tiles the copies run ahead (stages − 1, half a tile less with overlap), counted as "
             "if a producer warpgroup issued them (the producer finding's is the rest)")


def ring_rule(f: Facts) -> Finding | None:
    loop = f.loop
    if loop is None or loop.stages < 2 or not loop.tensor_us:
        return None
    tiles_ahead = ahead(loop, producer=True)
    cost = copy_wait_us(f, tiles_ahead)
    if cost <= 0:
        return None
    evidence = [f"{loop.stages} buffers of {loop.step_bytes:,} bytes in the ring: the copies run "
                f"{tiles_ahead:g} tile(s) ahead of the multiplies"
                + (" (with overlap a buffer is held until the next tile's scores are out)" if loop.overlap else "")
                + ".",
                "Another stage lets each copy start a tile earlier, as far as shared memory allows."]
    return finding("ring-depth", f"The products wait for their copies: {loop.stages} stages run {tiles_ahead:g} "
                   "tile(s) ahead.", evidence, cost, RING_COST)


RULE = Rule("ring-depth", "a tensor-core tile loop whose ring of buffers runs too few tiles ahead of the multiplies",
            RING_COST, ring_rule, relieved_by=("stages", "warp_specialize"))
