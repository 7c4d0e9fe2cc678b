"""CUDA cores: the products of 16-bit inputs computed without the tensor cores."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

CUDA_CORES_COST = ("the roofline's least time, whose compute roof is the CUDA cores' FP32 peak (one fused multiply-add "
                   "a core a cycle), − the same work's least time at the tensor cores' peak: part of the roofline's "
                   "time, not added to the estimate (another template, not a knob, moves it)")


def cuda_cores_rule(f: Facts) -> Finding | None:
    """16-bit inputs multiplied by a template that does not use the tensor cores (no mma instruction):
    its roofline is the CUDA cores' FP32 peak, a fraction of the tensor cores' for the same inputs."""
    if f.tensor_core_us is None or f.tensor_core_us >= f.bound_us:
        return None
    evidence = [f"This template multiplies on the CUDA cores (no mma.sync or wgmma): its roofline allows "
                f"{f.bound_us:,.1f} µs at the FP32 peak, against {f.tensor_core_us:,.1f} µs on the tensor cores.",
                "The tensor cores multiply 16-bit tiles (16 × 8 × 16 per mma.sync, for a warp) and add in float32: "
                "a template that uses them (mma.sync, wgmma) has their roof."]
    return finding("cuda-cores", "The products run on CUDA cores, not on the tensor cores.", evidence,
                   f.bound_us - f.tensor_core_us, CUDA_CORES_COST, within_roof=True)


RULE = Rule("cuda-cores", "16-bit products computed without the tensor cores", CUDA_CORES_COST, cuda_cores_rule)
