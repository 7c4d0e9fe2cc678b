"""CUDA cores: the products of 16-bit inputs computed without the tensor cores."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

CUDA_CORES_COST = ("the workload's FLOPs at the CUDA cores' FP32 peak (one fused multiply-add a core a cycle) − the "
                   "roofline's least time, which counts them at the tensor cores' peak")


def cuda_cores_rule(f: Facts) -> Finding | None:
    """16-bit inputs, whose roofline is the tensor cores', multiplied by a kernel without an mma
    instruction: its products run on the CUDA cores, whose peak is a fraction of the tensor cores'."""
    if f.cuda_core_us is None or f.cuda_core_us <= f.bound_us:
        return None
    evidence = [f"The kernel has no mma instruction (mma.sync or wgmma): its multiply-adds run on the CUDA cores, "
                f"{f.cuda_core_us:,.1f} µs of them at the FP32 peak, against {f.bound_us:,.1f} µs on the tensor cores.",
                "The tensor cores multiply 16-bit tiles (16 × 8 × 16 per mma.sync, for a warp) and add in float32."]
    return finding("cuda-cores", "The products run on CUDA cores, not on the tensor cores.", evidence,
                   f.cuda_core_us - f.bound_us, CUDA_CORES_COST)


RULE = Rule("cuda-cores", "16-bit products computed without the tensor cores", CUDA_CORES_COST, cuda_cores_rule)
