"""The AutoTVM tutorial's conv2d template ("Tuning High Performance Convolution on NVIDIA
GPUs", ``conv2d_no_batching``), translated from TE to TensorIR.

Its knob space is the tutorial's: each output axis (f, y, x) split four ways into
(block, vthread, thread, inner), each reduction axis (rc, ry, rx) three ways into
(outer, middle, inner), plus the two unroll knobs. The input and filter are staged in
shared memory once per outer reduction step (loaded cooperatively by all threads of the
block) and copied to registers once per middle step; each thread accumulates its outputs
in registers. The defaults are a plausible, untuned configuration for ResNet's last layer
([1,512,7,7] × [512,512,3,3], padding 1).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..workloads import Conv2d
from .common import Template, bind, cooperative_fetch, new_schedule, schedule_errors

SPATIAL_SPLIT = "(blocks, vthreads, threads, per-thread outputs)"
REDUCTION_SPLIT = "(outer: one shared-memory load each, middle: one register load each, inner)"


@dataclass(frozen=True)
class Conv2dAutoTVMKnobs(KnobSet):

    tile_f: tuple = knob((64, 2, 4, 1), f"Output channels split {SPATIAL_SPLIT}; threads go to threadIdx.z.",
                         split_of="out_channels")
    tile_y: tuple = knob((1, 1, 7, 1), f"Output rows split {SPATIAL_SPLIT}; threads go to threadIdx.y.",
                         split_of="out_height")
    tile_x: tuple = knob((1, 1, 7, 1), f"Output columns split {SPATIAL_SPLIT}; threads go to threadIdx.x.",
                         split_of="out_width")
    tile_rc: tuple = knob((32, 8, 2), f"Input channels (reduction) split {REDUCTION_SPLIT}.", split_of="in_channels")
    tile_ry: tuple = knob((1, 1, 3), f"Filter rows (reduction) split {REDUCTION_SPLIT}.", split_of="kernel_h")
    tile_rx: tuple = knob((1, 1, 3), f"Filter columns (reduction) split {REDUCTION_SPLIT}.", split_of="kernel_w")
    auto_unroll_max_step: int = knob(512, "Unroll inner loops automatically while the unrolled body stays under "
                                     "this many steps (0 = no automatic unrolling).", choices=(0, 512, 1500))
    unroll_explicit: bool = knob(True, "Unroll in TVM's IR (true) or leave it to nvcc with #pragma unroll (false).")


SPLIT_KNOBS = ("tile_f", "tile_y", "tile_x", "tile_rc", "tile_ry", "tile_rx")


def check_split_products(workload: Conv2d, k: Conv2dAutoTVMKnobs) -> None:
    """Each split must multiply out to the axis it tiles (AutoTVM's 'factors' policy)."""
    for name in SPLIT_KNOBS:
        knob = k.field(name)
        size = getattr(workload, knob.split_of)
        value = getattr(k, name)
        if math.prod(value) != size:
            raise InvalidKnobs(
                f"{name} = {knob.format(value)} multiplies to {math.prod(value)}, but it must split "
                f"{knob.split_of} = {size} exactly (choose factors whose product is {size}).",
                (name,),
            )


def schedule(workload: Conv2d, k: Conv2dAutoTVMKnobs):
    check_split_products(workload, k)
    with schedule_errors(k):
        return _schedule(workload, k)


def _schedule(workload: Conv2d, k: Conv2dAutoTVMKnobs):
    sch = new_schedule(workload)
    conv = sch.get_sblock("conv")
    output = sch.cache_write(conv, 0, "local")  # conv now accumulates in registers
    # Stage the input before inlining the padding, so the zero padding is produced while
    # loading the shared tile (no padded copy in global memory).
    data_shared = sch.cache_read(conv, 0, "shared")
    sch.compute_inline(sch.get_sblock("pad_temp"))
    kernel_shared = sch.cache_read(conv, 1, "shared")
    data_local = sch.cache_read(conv, 0, "local")
    kernel_local = sch.cache_read(conv, 1, "local")

    n, f, y, x = sch.get_loops(output)
    bf, vf, tf, fi = sch.split(f, factors=list(k.tile_f))
    by, vy, ty, yi = sch.split(y, factors=list(k.tile_y))
    bx, vx, tx, xi = sch.split(x, factors=list(k.tile_x))
    sch.reorder(n, bf, by, bx, vf, vy, vx, tf, ty, tx, fi, yi, xi)
    bf = sch.fuse(n, bf)  # batch 1: a loop outside the kernel would stay on the host
    for loop, tag in ((bf, "blockIdx.z"), (by, "blockIdx.y"), (bx, "blockIdx.x"),
                      # TensorIR needs a distinct tag per nested vthread loop (TE's plain
                      # "vthread" would be one tag bound three times).
                      (vf, "vthread.z"), (vy, "vthread.y"), (vx, "vthread.x"),
                      (tf, "threadIdx.z"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        bind(sch, loop, tag)
    # Keep unit loops so that the accumulation always has its n, f, y, x loops to reorder.
    sch.compute_at(conv, tx, preserve_unit_loops=True)

    *_, n_i, f_i, y_i, x_i, rc, ry, rx = sch.get_loops(conv)
    rco, rcm, rci = sch.split(rc, factors=list(k.tile_rc))
    # The tutorial applies tile_rx to ry and tile_ry to rx (a copy-paste slip that only
    # shows for non-square filters); here each knob splits its own axis.
    ryo, rym, ryi = sch.split(ry, factors=list(k.tile_ry))
    rxo, rxm, rxi = sch.split(rx, factors=list(k.tile_rx))
    sch.reorder(rco, ryo, rxo, rcm, rym, rxm, rci, ryi, rxi, n_i, f_i, y_i, x_i)

    # Local caches first: compute_at needs the consumer already under the target loop.
    sch.compute_at(data_local, rxm)
    sch.compute_at(kernel_local, rxm)
    threads = [("threadIdx.z", k.tile_f[2]), ("threadIdx.y", k.tile_y[2]), ("threadIdx.x", k.tile_x[2])]
    for stage in (data_shared, kernel_shared):
        # rxo lies inside the thread loops; the copy's own threadIdx loops have the same
        # extents and TVM merges them with those, so each thread copies only its share.
        sch.compute_at(stage, rxo)
        cooperative_fetch(sch, stage, rxo, threads)

    # The tutorial's "kernel_scope" pragmas: TVM's UnrollLoop pass reads them from the
    # outermost loop of the kernel.
    sch.annotate(bf, "pragma_auto_unroll_max_step", k.auto_unroll_max_step)
    sch.annotate(bf, "pragma_unroll_explicit", int(k.unroll_explicit))
    return sch


TEMPLATE = Template(
    name="conv2d_autotvm",
    title="Conv2d — AutoTVM tutorial template",
    summary="4-way output splits (block, vthread, thread, inner), 3-way reduction splits, shared + local caches "
            "and unroll pragmas: the knob space of TVM's 'Tuning High Performance Convolution on NVIDIA GPUs'.",
    workload=Conv2d,
    knobs=Conv2dAutoTVMKnobs,
    apply=schedule,
    tag_knobs={
        "blockIdx.z": ("tile_f",),
        "blockIdx.y": ("tile_y",),
        "blockIdx.x": ("tile_x",),
        "vthread.z": ("tile_f",),
        "vthread.y": ("tile_y",),
        "vthread.x": ("tile_x",),
        "threadIdx.z": ("tile_f",),
        "threadIdx.y": ("tile_y",),
        "threadIdx.x": ("tile_x",),
    },
    shared_knobs=SPLIT_KNOBS,
)
