"""Depthwise conv2d with the output flattened: one thread per run of outputs along a row.

The blog's schedule gives each CUDA block a tile of one channel, so a 21-wide row leaves a
third of each warp idle and a small image makes few, tiny blocks. Here the output axes
(n, c, h and the row split into runs of ``outputs_per_thread``) are fused into one index
and cut into blocks of ``threads`` threads: neighbouring threads compute neighbouring runs
whatever the channel boundaries, every lane of a warp has work, and there is no shared
memory and no barrier — inputs come straight from global memory (through L1) or from a
per-thread register window.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..knobs import KnobSet, knob
from ..workloads import DepthwiseConv2d
from .common import Template, bind, new_schedule, schedule_errors


@dataclass(frozen=True)
class DepthwiseFlatKnobs(KnobSet):

    threads: int = knob(128, "Threads per CUDA block (threadIdx.x); blocks are cut from the flattened output.",
                        choices=(32, 64, 128, 256, 512, 1024))
    outputs_per_thread: int = knob(1, "Consecutive outputs along a row computed by one thread (a guard covers a "
                                   "row width they do not divide).", choices=(1, 2, 3, 4, 6, 7, 8))
    input_cache: str = knob("none", "Where each thread reads its input window: none (straight from global memory, "
                            "cached in L1) or local (copied once to registers, shared by its outputs).",
                            choices=("none", "local"))
    filter_cache: str = knob("none", "Where each thread reads the filter: none (global memory) or local (registers).",
                             choices=("none", "local"))
    unroll: bool = knob(True, "Unroll the per-thread loops (outputs and filter taps) so values stay in registers.")


def schedule(workload: DepthwiseConv2d, k: DepthwiseFlatKnobs):
    with schedule_errors(k):
        return _schedule(workload, k)


def _schedule(workload: DepthwiseConv2d, k: DepthwiseFlatKnobs):
    sch = new_schedule(workload)
    conv = sch.get_sblock("DepthwiseConv2d")
    # Cache the input before inlining the padding, so the zeros are made while filling the window.
    input_stage = sch.cache_read(conv, 0, "local") if k.input_cache == "local" else None
    sch.compute_inline(sch.get_sblock("PaddedInput"))
    filter_stage = sch.cache_read(conv, 1, "local") if k.filter_cache == "local" else None

    if workload.epilogue:
        # scale_shift + ReLU in the same kernel: the convolution is a per-thread register.
        sch.compute_inline(sch.get_sblock("ScaleShift"))
        sch.set_scope(conv, 0, "local")
        output = sch.get_sblock("Relu")
    else:
        output = sch.cache_write(conv, 0, "local")  # accumulate in a register, store once

    n, c, h, w = sch.get_loops(output)[:4]
    wo, wi = sch.split(w, factors=[None, k.outputs_per_thread])
    bx, tx = sch.split(sch.fuse(n, c, h, wo), factors=[None, k.threads])
    bind(sch, bx, "blockIdx.x")
    bind(sch, tx, "threadIdx.x")

    sch.compute_at(conv, tx)
    for stage in (input_stage, filter_stage):
        if stage is not None:
            sch.compute_at(stage, tx)
    if k.unroll:
        for block in (conv, output):
            for loop in sch.get_loops(block)[2:]:  # everything below blockIdx.x, threadIdx.x
                sch.unroll(loop)
    return sch


TEMPLATE = Template(
    name="depthwise_flat",
    title="Depthwise conv2d — flattened output",
    summary="All outputs in one flat index cut into blocks of threads; each thread computes a run along a row.",
    workload=DepthwiseConv2d,
    knobs=DepthwiseFlatKnobs,
    apply=schedule,
    tag_knobs={"threadIdx.x": ("threads",), "blockIdx.x": ("threads", "outputs_per_thread")},
    shared_knobs=(),
)
