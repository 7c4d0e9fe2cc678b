"""mma.sync on Hopper: the tensor cores' full rate needs wgmma, which the warpgroups issue from
shared memory; a warp's mma.sync reaches a part of it."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding
from ..tiles import MMA_SYNC_SHARE, product_us

MMA_SYNC_COST = (f"the loop's products at {MMA_SYNC_SHARE:.0%} of the tensor cores' peak (an assumption) − at the "
                 "peak")


def mma_sync_rule(f: Facts) -> Finding | None:
    loop = f.loop
    if loop is None or loop.instruction != "mma.sync" or f.device.arch < 90 or not loop.tensor_us:
        return None
    evidence = [f"The products are mma.sync instructions, {product_us(f):,.1f} µs at the rate they reach on this GPU "
                f"against {loop.tensor_us:,.1f} µs at the tensor cores' peak.",
                "On sm_90 the peak needs wgmma (a warpgroup's product from shared memory): another template "
                "(attention_hopper, matmul_hopper), not a knob."]
    return finding("mma-sync", "mma.sync on Hopper reaches part of the tensor cores' peak.", evidence,
                   product_us(f) - loop.tensor_us, MMA_SYNC_COST)


RULE = Rule("mma-sync", "products on mma.sync where the GPU's tensor-core peak needs wgmma", MMA_SYNC_COST,
            mma_sync_rule)
