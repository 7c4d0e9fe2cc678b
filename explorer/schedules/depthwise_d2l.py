"""Dive into Deep Learning Compiler (d2l-tvm), "Depthwise Convolution" on GPU, translated
from TE to TensorIR.

``schedule = "default"`` is d2l's bind-only schedule: the padding is inlined, the output
rows go to blockIdx.x and the columns to threadIdx.x, and nothing else is scheduled. d2l
leaves the channel axis unbound, so it stays a loop *outside* the kernel: the host
launches one kernel per channel (TVM passes the channel index as a kernel argument).

``schedule = "tiled"`` is d2l's tiled schedule: each output axis (channel, row, column) is
split into (blocks, threads, per-thread outputs); the padded input and the filter are
staged in shared memory per block, loaded cooperatively with the copy split over the
threads in their (z, y, x) layout, then copied to registers per thread; each thread
accumulates its outputs in registers. The defaults are d2l's values: tile_c = [1, 1],
tile_h = [2, 8], tile_w = [64, 1].

d2l writes each tile as one pair ``[threads, per-thread]``; here each pair is two knobs
(``tile_h_threads``, ``tile_h_per_thread``) so that each widget holds one quantity with a
short list of values, a sweep can vary the thread count alone, and an error names exactly
the number at fault.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..workloads import DepthwiseConv2d
from .common import Template, bind, cooperative_fetch, new_schedule, schedule_errors

THREADS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
PER_THREAD = (1, 2, 4, 8, 16, 32)
# The stages each cache knob creates, outermost first: global → shared → local.
CACHE_SCOPES = {"shared+local": ("shared", "local"), "shared": ("shared",), "local": ("local",), "none": ()}
# (output axis, thread tag, what a unit of the axis is called)
AXES = (("c", "threadIdx.z", "channels"), ("h", "threadIdx.y", "rows"), ("w", "threadIdx.x", "columns"))


@dataclass(frozen=True)
class DepthwiseD2lKnobs(KnobSet):

    schedule: str = knob("tiled", "tiled: d2l's tiled schedule (every knob below applies); default: d2l's "
                         "bind-only schedule (rows to blockIdx.x, columns to threadIdx.x, one kernel launch per "
                         "channel; the other knobs are ignored).", choices=("tiled", "default"))
    tile_c_threads: int = knob(1, "Output channels handled by the threads of a block (threadIdx.z): d2l's tile_c[0].",
                               choices=(1, 2, 4, 8, 16, 32, 64))
    tile_c_per_thread: int = knob(1, "Output channels each thread computes: d2l's tile_c[1].", choices=PER_THREAD)
    tile_h_threads: int = knob(2, "Threads along the output rows (threadIdx.y): d2l's tile_h[0].", choices=THREADS)
    tile_h_per_thread: int = knob(8, "Consecutive output rows each thread computes: d2l's tile_h[1].",
                                  choices=PER_THREAD)
    tile_w_threads: int = knob(64, "Threads along the output columns (threadIdx.x): d2l's tile_w[0].",
                               choices=THREADS)
    tile_w_per_thread: int = knob(1, "Consecutive output columns each thread computes: d2l's tile_w[1].",
                                  choices=PER_THREAD)
    input_cache: str = knob("shared+local", "How the padded input reaches the threads: through shared memory "
                            "(loaded once per block) and then registers (each thread copies its window), only one "
                            "of the two, or straight from global memory.", choices=tuple(CACHE_SCOPES))
    filter_cache: str = knob("shared+local", "How the filter reaches the threads: shared then registers, only one "
                             "of the two, or straight from global memory.", choices=tuple(CACHE_SCOPES))
    local_accumulator: bool = knob(True, "Accumulate in registers and write each output once (cache_write 'local').")
    fetch: str = knob("contiguous", "How the block's threads split a shared-memory load: contiguous (d2l: each "
                      "thread copies one run of consecutive elements) or interleaved (consecutive threads copy "
                      "consecutive elements, so a warp's reads coalesce).", choices=("contiguous", "interleaved"))


def tile(k: DepthwiseD2lKnobs, axis: str) -> tuple[int, int]:
    """(threads, per-thread outputs) along output axis ``axis`` ("c", "h" or "w")."""
    return getattr(k, f"tile_{axis}_threads"), getattr(k, f"tile_{axis}_per_thread")


def schedule(workload: DepthwiseConv2d, k: DepthwiseD2lKnobs):
    if k.schedule == "default":
        with schedule_errors(k):
            return _default_schedule(workload)
    batch, channels, out_h, out_w = workload.output_shape()
    sizes = {"c": batch * channels, "h": out_h, "w": out_w}
    for axis, _, unit in AXES:
        threads, per_thread = tile(k, axis)
        if (threads - 1) * per_thread >= sizes[axis]:
            raise InvalidKnobs(
                f"tile_{axis} gives each of {threads} threads {per_thread} {unit if per_thread > 1 else unit[:-1]}, "
                f"but the output has only "
                f"{sizes[axis]} {unit}{' (batch × channels)' if axis == 'c' else ''}: some threads would have "
                f"no output at all.",
                (f"tile_{axis}_threads", f"tile_{axis}_per_thread"),
            )
    if workload.epilogue and not k.local_accumulator:
        raise InvalidKnobs(
            "With a scale_shift + ReLU epilogue this template keeps the convolution in registers and applies the "
            "epilogue in the same kernel: turn local_accumulator on.",
            ("local_accumulator",),
        )
    with schedule_errors(k):
        return _tiled_schedule(workload, k)


def _default_schedule(workload: DepthwiseConv2d):
    sch = new_schedule(workload)
    sch.compute_inline(sch.get_sblock("PaddedInput"))
    # Bind-only, stage by stage: an epilogue becomes kernels of their own.
    for name in ("DepthwiseConv2d", "ScaleShift", "Relu") if workload.epilogue else ("DepthwiseConv2d",):
        _, _, h, w = sch.get_loops(sch.get_sblock(name))[:4]
        bind(sch, h, "blockIdx.x")
        bind(sch, w, "threadIdx.x")
    return sch


def _tiled_schedule(workload: DepthwiseConv2d, k: DepthwiseD2lKnobs):
    sch = new_schedule(workload)
    conv = sch.get_sblock("DepthwiseConv2d")
    # Every input stage is created before the padding is inlined, so the zero padding is
    # produced by the outermost copy (no padded tensor in global memory).
    input_stages = {scope: sch.cache_read(conv, 0, scope) for scope in CACHE_SCOPES[k.input_cache]}
    sch.compute_inline(sch.get_sblock("PaddedInput"))
    filter_stages = {scope: sch.cache_read(conv, 1, scope) for scope in CACHE_SCOPES[k.filter_cache]}

    if workload.epilogue:
        # The convolution becomes the per-thread accumulator; the ReLU block writes the
        # output (d2l has no epilogue; this is the 2017 blog's fusion).
        sch.compute_inline(sch.get_sblock("ScaleShift"))
        sch.set_scope(conv, 0, "local")
        output = sch.get_sblock("Relu")
    elif k.local_accumulator:
        output = sch.cache_write(conv, 0, "local")
    else:
        output = conv

    b, c, h, w = sch.get_loops(output)[:4]
    c = sch.fuse(b, c)  # d2l has no batch axis: batch × channels is its channel axis
    bc, tc, ic = sch.split(c, factors=[None, *tile(k, "c")])
    bh, th, ih = sch.split(h, factors=[None, *tile(k, "h")])
    bw, tw, iw = sch.split(w, factors=[None, *tile(k, "w")])
    sch.reorder(bc, bh, bw, tc, th, tw, ic, ih, iw)
    for loop, tag in ((bc, "blockIdx.z"), (bh, "blockIdx.y"), (bw, "blockIdx.x"),
                      (tc, "threadIdx.z"), (th, "threadIdx.y"), (tw, "threadIdx.x")):
        bind(sch, loop, tag)
    if output is not conv:
        sch.compute_at(conv, tw)

    # Local caches first: compute_at needs the consumer already under the target loop.
    for stages in (input_stages, filter_stages):
        if "local" in stages:
            sch.compute_at(stages["local"], tw)
    threads = [(tag, tile(k, axis)[0]) for axis, tag, _ in AXES]
    for stages in (input_stages, filter_stages):
        if "shared" in stages:
            sch.compute_at(stages["shared"], bw)
            cooperative_fetch(sch, stages["shared"], bw, threads, contiguous=k.fetch == "contiguous")
    return sch


TEMPLATE = Template(
    name="depthwise_d2l",
    title="Depthwise conv2d — Dive into Deep Learning Compiler",
    summary="d2l's bind-only default schedule and its tiled schedule: (threads, per-thread) tiles per output "
            "axis, shared + local caches, cooperative fetching.",
    workload=DepthwiseConv2d,
    knobs=DepthwiseD2lKnobs,
    apply=schedule,
    tag_knobs={
        "threadIdx.z": ("tile_c_threads",),
        "threadIdx.y": ("tile_h_threads",),
        "threadIdx.x": ("tile_w_threads",),
        "blockIdx.z": ("tile_c_threads", "tile_c_per_thread"),
        "blockIdx.y": ("tile_h_threads", "tile_h_per_thread"),
        "blockIdx.x": ("tile_w_threads", "tile_w_per_thread"),
    },
    shared_knobs=("tile_c_threads", "tile_c_per_thread", "tile_h_threads", "tile_h_per_thread", "tile_w_threads",
                  "tile_w_per_thread", "input_cache", "filter_cache"),
)
