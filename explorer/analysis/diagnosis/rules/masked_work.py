"""Masked work: causal attention whose kernels compute the scores the mask then discards."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

MASKED_COST = ("the kernels' measured time (without a measurement, the roofline's least time) × the share of the "
               "FLOPs they compute that go to masked scores")


def masked_work_rule(f: Facts) -> Finding | None:
    """Causal attention written as kernels that compute S = Q·Kᵀ whole: the scores above the
    diagonal are computed, stored and multiplied by V as zeros."""
    if not f.masked_flops or not f.workload_flops:
        return None
    evidence = [f"The causal mask keeps {f.workload_flops / 1e9:,.1f} GFLOP of the two products; the kernels also "
                f"compute {f.masked_flops / 1e9:,.1f} GFLOP for the scores above the diagonal, whose probabilities "
                f"are 0.",
                "A kernel that walks the keys in tiles can stop each block of queries at the diagonal and never "
                "load the later keys (the fused templates do)."]
    return finding("masked-work", "Half the scores are computed for the causal mask to discard.", evidence,
                   (f.measured_us or f.bound_us) * f.masked_flops / (f.masked_flops + f.workload_flops), MASKED_COST)


RULE = Rule("masked-work", "causal attention computing the scores its mask discards", MASKED_COST,
            masked_work_rule)
