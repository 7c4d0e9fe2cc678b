"""The online softmax beside the products: its exponentials and their FP32 instructions run on the
CUDA cores between a tile's two products, and only other warps (or, with FlashAttention-3's
overlap, the same warpgroup's next product) keep the tensor cores busy meanwhile. Its rescaling of
O, once per key tile, is the ``rescale`` rule's share of the same exposed time."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding
from ..tiles import SFU_PER_SM, SOFTMAX_OPS, exposed_softmax_us, product_us, softmax_parts_us

SOFTMAX_COST = (f"the softmax's CUDA-core time (an exponential at {SFU_PER_SM} per cycle per SM and {SOFTMAX_OPS} FP32 "
                "instructions per score, an assumption; the rescaling of O is the rescale finding's) beyond the "
                "products' time, plus of the rest the share one of the SM's independent streams (consumers of "
                "each resident block, twice with overlap) leaves unhidden")


def exposed_share(f: Facts, part: int) -> float:
    """``part`` (0: exponentials, 1: rescaling) of the exposed softmax time, in proportion to its CUDA-core time."""
    parts = softmax_parts_us(f)
    return exposed_softmax_us(f) * parts[part] / sum(parts) if sum(parts) else 0.0


def softmax_rule(f: Facts) -> Finding | None:
    """Attention on the tensor cores whose softmax the products do not hide: too few consumers on
    an SM to alternate, or a warpgroup that waits for its scores before it multiplies again."""
    loop = f.loop
    if loop is None or not loop.scores or not loop.tensor_us:
        return None
    streams = loop.streams(f.resident_blocks)
    exp_us, rescale_us = softmax_parts_us(f)
    evidence = [f"The softmax of every step takes {exp_us + rescale_us:,.1f} µs on the CUDA cores (its "
                f"{loop.scores:,} exponentials a step and block), the products {product_us(f):,.1f} µs on the "
                "tensor cores.",
                f"{streams} independent stream(s) of products and softmax per SM ({f.resident_blocks} block(s) × "
                f"{loop.consumers} {'warpgroup' if loop.instruction == 'wgmma' else 'warp'}(s)"
                + (", × 2 with overlap" if loop.overlap else "") + "): the rest of the softmax waits beside "
                f"1 / {streams} of them.",
                "More consumers per block, or overlap (the softmax of tile j while P·V of tile j − 1 runs), keep "
                "the tensor cores busy during the softmax."]
    return finding("softmax", f"The softmax is not hidden behind the products: {streams} stream(s) per SM.",
                   evidence, exposed_share(f, 0), SOFTMAX_COST)


RULE = Rule("softmax", "attention on the tensor cores whose online softmax the products do not hide", SOFTMAX_COST,
            softmax_rule, relieved_by=("consumers", "overlap"))
