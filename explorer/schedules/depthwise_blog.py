"""The 2017 TVM blog's depthwise conv2d schedule (topi's schedule_depthwise_conv2d_nchw).

Translated from TE to TensorIR. With the default knobs it is the blog's final schedule:
32×32 output blocks, 8×16 threads, vthreads (1, 2), input and filter staged through
shared memory, the accumulator in registers. ``blocking_h = blocking_w = 0`` means one
CUDA block per whole channel (the blog's first step).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..workloads import DepthwiseConv2d
from .common import Template, bind, cooperative_fetch, new_schedule, schedule_errors

POWERS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class DepthwiseBlogKnobs(KnobSet):

    blocking_h: int = knob(32, "Output rows per CUDA block; 0 = the whole channel (one block per channel).",
                           choices=(0, 4, 8, 16, 32, 64))
    blocking_w: int = knob(32, "Output columns per CUDA block; 0 = the whole channel.", choices=(0, 4, 8, 16, 32, 64))
    num_thread_y: int = knob(8, "Threads per block along the output height (threadIdx.y).", choices=POWERS)
    num_thread_x: int = knob(16, "Threads per block along the output width (threadIdx.x).", choices=POWERS)
    num_vthread_y: int = knob(1, "Virtual threads along the height: each thread computes this many strided row tiles.",
                              choices=(1, 2, 4, 8))
    num_vthread_x: int = knob(2, "Virtual threads along the width: strided column tiles per thread.",
                              choices=(1, 2, 4, 8))
    input_cache: str = knob("shared", "Where the padded input tile is staged: shared (loaded once per block by all "
                            "threads), local (each thread copies its own window to registers) or none.",
                            choices=("shared", "local", "none"))
    filter_cache: str = knob("shared", "Where the filter is staged: shared, local or none.",
                             choices=("shared", "local", "none"))
    local_accumulator: bool = knob(True, "Accumulate in registers and write the output once (cache_write 'local').")
    fuse_epilogue: bool = knob(True, "With a scale_shift + ReLU epilogue: compute it in the same kernel (fusion) "
                               "instead of separate kernels that round-trip through global memory.")
    unroll: bool = knob(False, "Unroll the filter loops (di, dj) so the compiler keeps the filter in registers.")


def _block_extent(blocking: int, size: int) -> int:
    return size if blocking == 0 else blocking


def schedule(workload: DepthwiseConv2d, k: DepthwiseBlogKnobs):
    _, channels, out_h, out_w = workload.output_shape()
    block_h = _block_extent(k.blocking_h, out_h)
    block_w = _block_extent(k.blocking_w, out_w)
    for axis, block, vthreads, threads in (
        ("h", block_h, k.num_vthread_y, k.num_thread_y),
        ("w", block_w, k.num_vthread_x, k.num_thread_x),
    ):
        if vthreads * threads > block:
            dim = "y" if axis == "h" else "x"
            raise InvalidKnobs(
                f"A block has {block} output {'rows' if axis == 'h' else 'columns'} but num_vthread_{dim} × "
                f"num_thread_{dim} = {vthreads * threads}: some threads would have no output at all.",
                (f"blocking_{axis}", f"num_vthread_{dim}", f"num_thread_{dim}"),
            )
    with schedule_errors(k):
        return _schedule(workload, k, block_h, block_w)


def _schedule(workload: DepthwiseConv2d, k: DepthwiseBlogKnobs, block_h: int, block_w: int):
    sch = new_schedule(workload)
    conv = sch.get_sblock("DepthwiseConv2d")
    # Stage the input before inlining the padding, so the zero padding is produced while
    # loading the tile (no padded copy in global memory).
    input_stage = sch.cache_read(conv, 0, k.input_cache) if k.input_cache != "none" else None
    sch.compute_inline(sch.get_sblock("PaddedInput"))
    filter_stage = sch.cache_read(conv, 1, k.filter_cache) if k.filter_cache != "none" else None

    fused_epilogue = workload.epilogue and k.fuse_epilogue
    if fused_epilogue:
        # The convolution becomes a per-thread temporary; the ReLU block is what the
        # threads write to global memory (the blog's set_scope("local") + compute_at).
        sch.compute_inline(sch.get_sblock("ScaleShift"))
        sch.set_scope(conv, 0, "local")
        output, compute = sch.get_sblock("Relu"), conv
    elif k.local_accumulator:
        output, compute = sch.cache_write(conv, 0, "local"), conv
    else:
        output, compute = conv, None

    b, c, h, w = sch.get_loops(output)[:4]
    by = sch.fuse(b, c)
    # Like TE's split(nparts=...): each thread takes ceil(block / threads) rows; when that
    # does not divide (a whole 21x21 channel on 8 threads), TVM adds a guard.
    bh, vy, ty, yi = sch.split(h, factors=[None, k.num_vthread_y, k.num_thread_y,
                                           -(-block_h // (k.num_vthread_y * k.num_thread_y))])
    bw, vx, tx, xi = sch.split(w, factors=[None, k.num_vthread_x, k.num_thread_x,
                                           -(-block_w // (k.num_vthread_x * k.num_thread_x))])
    sch.reorder(by, bh, bw, vy, vx, ty, tx, yi, xi)
    bx = sch.fuse(bh, bw)
    bind(sch, by, "blockIdx.y")
    bind(sch, bx, "blockIdx.x")
    bind(sch, vy, "vthread.y")
    bind(sch, vx, "vthread.x")
    bind(sch, ty, "threadIdx.y")
    bind(sch, tx, "threadIdx.x")

    if compute is not None:
        sch.compute_at(compute, tx)
    reduction_owner = compute if compute is not None else output
    if k.unroll:
        for loop in sch.get_loops(reduction_owner)[-2:]:
            sch.unroll(loop)

    threads = [("threadIdx.y", k.num_thread_y), ("threadIdx.x", k.num_thread_x)]
    # Local caches must be placed before shared ones (compute_at needs the consumer under
    # the target loop); each thread copies its own window.
    for stage, scope in ((input_stage, k.input_cache), (filter_stage, k.filter_cache)):
        if stage is not None and scope == "local":
            sch.compute_at(stage, tx)
    for stage, scope in ((input_stage, k.input_cache), (filter_stage, k.filter_cache)):
        if stage is not None and scope == "shared":
            sch.compute_at(stage, bx)
            cooperative_fetch(sch, stage, bx, threads)

    if workload.epilogue and not fused_epilogue:
        # Unfused: scale_shift and ReLU are kernels of their own, each reading and writing
        # the whole tensor in global memory (the blog's "separate" baseline).
        for name in ("ScaleShift", "Relu"):
            _bind_elementwise(sch, sch.get_sblock(name))
    return sch


def _bind_elementwise(sch, block, threads: int = 256) -> None:
    """A separate element-wise kernel: one output per thread, 256 threads per block."""
    fused = sch.fuse(*sch.get_loops(block))
    bx, tx = sch.split(fused, factors=[None, threads])
    bind(sch, bx, "blockIdx.x")
    bind(sch, tx, "threadIdx.x")


TEMPLATE = Template(
    name="depthwise_blog",
    title="Depthwise conv2d — TVM blog 2017",
    summary="Output blocking, threads, vthreads, shared/local staging and fusion, as in the 2017 depthwise blog.",
    workload=DepthwiseConv2d,
    knobs=DepthwiseBlogKnobs,
    apply=schedule,
    tag_knobs={
        "threadIdx.x": ("num_thread_x",),
        "threadIdx.y": ("num_thread_y",),
        "vthread.x": ("num_vthread_x",),
        "vthread.y": ("num_vthread_y",),
        "blockIdx.x": ("blocking_h", "blocking_w"),
    },
    shared_knobs=("blocking_h", "blocking_w", "input_cache", "filter_cache"),
)
