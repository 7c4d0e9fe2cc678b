"""Instructions beside the multiply-adds: fused attention on the CUDA cores whose inner loops load
and convert an element for every few multiply-adds. An SM issues four warp instructions a cycle,
which multiply-adds alone fill at the FP32 peak: every load and conversion takes one of them."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

ISSUE_COST = ("the loop's multiply-adds at the FP32 peak × (the inner loops' other instructions ÷ their "
              "multiply-adds): each takes an issue slot that a multiply-add would have used")


def issue_rule(f: Facts) -> Finding | None:
    loop = f.fma_loop
    if loop is None or not loop.others:
        return None
    share = loop.others / loop.fmas
    evidence = [f"Per key tile each thread issues {loop.fmas:,} multiply-adds and {loop.others:,} loads and "
                f"conversions beside them ({share:.2f} per multiply-add).",
                "More rows per thread (rows_per_thread) or more keys per thread (fewer threads_per_row) make each "
                "loaded element feed more multiply-adds; float_tiles converts each element once into shared "
                "memory; vector loads several with one instruction."]
    return finding("issue", f"The inner loops issue {share:.2f} loads and conversions per multiply-add.", evidence,
                   loop.fma_us * share, ISSUE_COST)


RULE = Rule("issue", "fused attention on the CUDA cores whose inner loops load and convert beside the multiply-adds",
            ISSUE_COST, issue_rule, relieved_by=("rows_per_thread", "threads_per_row", "float_tiles", "vector"))
