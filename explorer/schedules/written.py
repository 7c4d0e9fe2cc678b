"""What the templates whose kernel is written share (reduce_tree, attention_fused, attention_mma,
attention_hopper, matmul_hopper): a template is either *scheduled* (TVM's schedule primitives applied
to the workload's ``te.compute``: ``Schedule`` steps, a trace) or *written* (the kernel written in
TVMScript or TIRx for a plan of its knobs: a module with an empty trace). A written template has
``check_knobs(workload, knobs) -> plan``, which refuses, one sentence each, what cannot make a
correct kernel, and ``kernel(plan)``; ``schedule = WrittenKernel(check_knobs, kernel)``.
"""
from __future__ import annotations

import tvm
from tvm.s_tir import Schedule

from ..errors import InvalidKnobs
from ..gpus import ARCHITECTURES, gpu_of
from .parsing import parsed_once_per_plan


class WrittenKernel:
    """A written template's ``schedule(workload, knobs)``: the knobs checked into a plan, the plan's
    kernel parsed once per plan (``parsed``), in a Schedule with an empty trace."""

    def __init__(self, check_knobs, kernel):
        self.check_knobs = check_knobs
        self.parsed = parsed_once_per_plan(kernel)

    def __call__(self, workload, knobs) -> Schedule:
        return Schedule(tvm.IRModule({"main": self.parsed(self.check_knobs(workload, knobs))}))


def check_shared(needed: int, what: str, advice: str, knobs: tuple[str, ...], arch: str = "sm_90") -> None:
    """Refuse tiles (``what``: "The Q, K and V tiles") that need ``needed`` bytes of shared memory, more than
    a block may opt in to on ``arch`` (explorer/gpus.py), with ``advice`` and the ``knobs`` at fault."""
    limit = ARCHITECTURES[arch].max_shared_per_block
    if needed > limit:
        raise InvalidKnobs(f"{what} need {needed:,} bytes of shared memory, more than the {limit:,} a block may use "
                           f"on the {gpu_of(arch).name}: {advice}.", knobs)
