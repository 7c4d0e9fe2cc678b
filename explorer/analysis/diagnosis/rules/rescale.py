"""The online softmax's rescaling: every key tile, each row's accumulators of O are multiplied by
exp(m − m') as the running maximum moves: head_dim / block_kv multiplies per score."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding
from ..tiles import softmax_parts_us
from .softmax import exposed_share

RESCALE_COST = ("the rescaling's share (one FP32 multiply per accumulator of O per key tile) of the softmax's time "
                "that the products do not hide (the softmax finding's model)")


def rescale_rule(f: Facts) -> Finding | None:
    loop = f.loop
    if loop is None or not loop.rescaled or not loop.tensor_us:
        return None
    _, rescale_us = softmax_parts_us(f)
    per_score = loop.rescaled / loop.scores
    evidence = [f"Each step rescales {loop.rescaled:,} accumulators of O per block ({per_score:g} per score): "
                f"{rescale_us:,.1f} µs on the CUDA cores in all.",
                "A larger key tile (block_kv) rescales O fewer times for the same scores, as far as registers allow."]
    return finding("rescale", f"The online softmax rescales O every key tile: {per_score:g} multiplies per score.",
                   evidence, exposed_share(f, 1), RESCALE_COST)


RULE = Rule("rescale", "the online softmax's rescaling of O, once per key tile, not hidden behind the products",
            RESCALE_COST, rescale_rule, relieved_by=("block_kv",))
