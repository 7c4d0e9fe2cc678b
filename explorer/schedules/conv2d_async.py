"""conv2d the way today's GEMM kernels are written: split-K blocks, register tiles and a cp.async pipeline.

Seen as a matrix multiply (an implicit GEMM), ResNet's last layer is small and lopsided: 512
output channels × 49 output pixels, summed over 512 input channels × 9 filter taps = 4,608
terms each. Tiling only the outputs gives few blocks for a GPU of 132 SMs, so ``split_k``
also cuts the input channels into slices, one block per slice and channel tile: each block
writes its partial sums, and a second small kernel adds the ``split_k`` partials of each
output (TVM's ``rfactor``).

A block computes ``block_f`` output channels over the whole output plane for its slice of
input channels; each thread a ``thread_f × thread_y × thread_x`` register tile. The slice is
walked ``block_k`` input channels at a time: the input window (``block_k`` channels of the
padded plane, zero padding written while copying) and the filter tile (``block_f × block_k ×
kh × kw``, ``fetch_vector`` elements per copy) are staged in shared memory. As in
matmul_async, ``stages`` > 1 turns that walk into a software pipeline whose copies are
``cp.async`` instructions with ``async_copy``, and ``dynamic_shared`` allocates the buffers
dynamically so a block may opt in to more than 48 KB.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..workloads import BYTES_PER_ELEMENT, Conv2d
from .common import (
    Template,
    async_copy_knob,
    bind,
    check_pipeline,
    cooperative_fetch,
    dynamic_shared_knob,
    loops_below,
    new_schedule,
    pipeline,
    rfactor_slices,
    schedule_errors,
    stages_knob,
    sum_partials,
    unroll,
    unroll_max_step_knob,
)


@dataclass(frozen=True)
class Conv2dAsyncKnobs(KnobSet):

    block_f: int = knob(64, "Output channels computed by one CUDA block (over the whole output plane).",
                        choices=(4, 8, 16, 32, 64, 128))
    thread_f: int = knob(4, "Output channels each thread computes (its register tile along channels).",
                         choices=(1, 2, 4, 8))
    thread_y: int = knob(1, "Output rows each thread computes; must divide the output height.", low=1, high=16)
    thread_x: int = knob(7, "Output columns each thread computes; must divide the output width.", low=1, high=16)
    split_k: int = knob(16, "Slices of the input channels, each summed by its own blocks (more blocks for a "
                        "small output); a second kernel adds the partial sums. 1 = one kernel, no partials.",
                        choices=(1, 2, 4, 8, 16, 32, 64))
    block_k: int = knob(8, "Input channels staged in shared memory per step of the reduction.",
                        choices=(1, 2, 4, 8, 16, 32))
    stages: int = stages_knob()
    async_copy: bool = async_copy_knob()
    fetch_vector: int = knob(4, "Filter elements per copy instruction (4 = 16 bytes, cp.async's widest); the "
                             "input window, with its zero padding, is copied one element at a time.",
                             choices=(1, 2, 4))
    transpose_filter: bool = knob(True, "Store the filter tile channel-minor (block_k × kh × kw × block_f), so "
                                  "that a thread's output channels are contiguous and read as vectors; the copy "
                                  "then transposes, one element per copy instruction.")
    read_vector: int = knob(4, "Filter elements each thread reads per instruction from shared memory into its "
                            "registers when transpose_filter is on.", choices=(1, 2, 4))
    shared_pad: int = knob(4, "Elements added to each row of the filter tile in shared memory (a row is one "
                           "output channel's taps, or one tap's channels when transposed), so that threads "
                           "reading or writing different rows hit different banks; 0 = none.",
                           choices=(0, 1, 2, 4, 8))
    dynamic_shared: bool = dynamic_shared_knob()
    unroll_max_step: int = unroll_max_step_knob()


def threads_per_block(workload: Conv2d, k: Conv2dAsyncKnobs) -> int:
    return (k.block_f // k.thread_f) * (workload.out_height // k.thread_y) * (workload.out_width // k.thread_x)


def filter_row(workload: Conv2d, k: Conv2dAsyncKnobs) -> int:
    """Elements of one output channel's filter tile per step: block_k input channels × kh × kw."""
    return k.block_k * workload.kernel_h * workload.kernel_w


def filter_tile_elements(workload: Conv2d, k: Conv2dAsyncKnobs) -> int:
    """Elements of one stage's filter tile in shared memory, rows padded by shared_pad."""
    if k.transpose_filter:
        return filter_row(workload, k) * (k.block_f + k.shared_pad)
    return k.block_f * (filter_row(workload, k) + k.shared_pad)


def window_shape(workload: Conv2d) -> tuple[int, int]:
    """Rows and columns of the input a block reads per input channel (the padded plane it needs)."""
    s = workload.stride
    return ((workload.out_height - 1) * s + workload.kernel_h, (workload.out_width - 1) * s + workload.kernel_w)


def shared_tile_bytes(workload: Conv2d, k: Conv2dAsyncKnobs) -> int:
    """Shared memory of all stages: the input window and the (padded) filter tile of one step."""
    rows, cols = window_shape(workload)
    per_stage = k.block_k * rows * cols + filter_tile_elements(workload, k)
    return BYTES_PER_ELEMENT * k.stages * per_stage


def check_knobs(workload: Conv2d, k: Conv2dAsyncKnobs) -> None:
    if k.block_f % k.thread_f:
        raise InvalidKnobs(f"block_f = {k.block_f} is not a multiple of thread_f = {k.thread_f}: the threads "
                           f"cannot share the block's output channels evenly.", ("block_f", "thread_f"))
    for name, size, axis in (("block_f", k.block_f, "out_channels"), ("thread_y", k.thread_y, "out_height"),
                             ("thread_x", k.thread_x, "out_width")):
        total = getattr(workload, axis)
        if total % size:
            raise InvalidKnobs(f"{name} = {size} does not divide {axis} = {total}: this template has no guard "
                               f"for partial tiles.", (name,))
    if workload.in_channels % (k.split_k * k.block_k):
        raise InvalidKnobs(
            f"split_k × block_k = {k.split_k} × {k.block_k} does not divide in_channels = {workload.in_channels}: "
            f"each slice must hold whole steps of block_k channels.", ("split_k", "block_k"))
    threads = threads_per_block(workload, k)
    if threads > 1024:
        raise InvalidKnobs(f"A block would have {threads} threads, more than the 1024 a CUDA block may have: "
                           f"raise thread_f, thread_y or thread_x, or lower block_f.",
                           ("block_f", "thread_f", "thread_y", "thread_x"))
    check_pipeline(k)
    _check_vectors(workload, k)


def _check_vectors(workload: Conv2d, k: Conv2dAsyncKnobs) -> None:
    """A vector must not straddle rows and must start on a multiple of its size: a misaligned
    16-byte cp.async or float4 load faults at run time. Copies read rows of in_channels × kh × kw
    in global memory; untransposed they write rows of block_k × kh × kw + shared_pad, transposed
    they scatter single elements and the reads take rows of block_f + shared_pad instead."""
    taps = workload.kernel_h * workload.kernel_w
    if k.transpose_filter:
        checks = [("read_vector", k.read_vector, {"thread_f": k.thread_f, "block_f": k.block_f,
                                                  "shared_pad": k.shared_pad})]
    else:
        checks = [("fetch_vector", k.fetch_vector, {"block_k × kh × kw": filter_row(workload, k),
                                                    "in_channels × kh × kw": workload.in_channels * taps,
                                                    "shared_pad": k.shared_pad})]
    knob_of = {"block_k × kh × kw": "block_k", "in_channels × kh × kw": None}
    for name, vector, sizes in checks:
        bad = [size_name for size_name, size in sizes.items() if size % vector]
        if bad:
            listed = ", ".join(f"{size_name} = {sizes[size_name]}" for size_name in bad)
            named = [knob_of.get(size_name, size_name) for size_name in bad]
            raise InvalidKnobs(f"{name} = {vector} moves {vector} consecutive filter elements at once, but {listed} "
                               f"{'is' if len(bad) == 1 else 'are'} not a multiple of {vector}: the vectors would "
                               f"straddle rows or be misaligned.",
                               tuple(dict.fromkeys((name, *(n for n in named if n)))))


def schedule(workload: Conv2d, k: Conv2dAsyncKnobs):
    check_knobs(workload, k)
    with schedule_errors(k):
        return _schedule(workload, k)


def _schedule(workload: Conv2d, k: Conv2dAsyncKnobs):
    sch = new_schedule(workload)
    conv = sch.get_sblock("conv")
    if k.split_k > 1:
        # The input channels' outer loop becomes a spatial axis of a partial-sum block
        # ("conv_rf", one partial per slice); "conv" then adds the partials.
        partial = rfactor_slices(sch, sch.get_loops(conv)[4], k.split_k)
        _schedule_partial_sums(sch, workload, k, partial, sliced=True)
        sum_partials(sch, conv)
    else:
        _schedule_partial_sums(sch, workload, k, conv, sliced=False)
    return sch


def _schedule_partial_sums(sch, workload: Conv2d, k: Conv2dAsyncKnobs, conv, sliced: bool) -> None:
    """One block per (channel tile, input-channel slice): register tiles fed by pipelined shared tiles."""
    scope = "shared.dyn" if k.dynamic_shared else "shared"
    output = sch.cache_write(conv, 0, "local")
    # Stage the input before inlining the padding: the zeros are written while copying.
    data_shared = sch.cache_read(conv, 0, scope)
    sch.compute_inline(sch.get_sblock("pad_temp"))
    kernel_shared = sch.cache_read(conv, 1, scope)
    if k.transpose_filter:
        sch.transform_layout(kernel_shared, ("write", 0), lambda f, c, h, w: (c, h, w, f))
    data_local = sch.cache_read(conv, 0, "local")
    kernel_local = sch.cache_read(conv, 1, "local")

    loops = sch.get_loops(output)
    slice_, (n, f, y, x) = (loops[0], loops[1:]) if sliced else (None, loops)
    bf, tf, fi = sch.split(f, factors=[None, k.block_f // k.thread_f, k.thread_f])
    ty, yi = sch.split(y, factors=[None, k.thread_y])
    tx, xi = sch.split(x, factors=[None, k.thread_x])
    sch.reorder(bf, *([slice_] if sliced else []), n, tf, ty, tx, fi, yi, xi)
    thread = sch.fuse(n, tf, ty, tx)
    bind(sch, bf, "blockIdx.x")
    if sliced:
        bind(sch, slice_, "blockIdx.y")
    bind(sch, thread, "threadIdx.x")

    sch.compute_at(conv, thread, preserve_unit_loops=True)
    *_, fo, yo, xo, rc, ry, rx = sch.get_loops(conv)
    ko, ki = sch.split(rc, factors=[None, k.block_k])
    sch.reorder(ko, ki, ry, rx, fo, yo, xo)
    # Per input channel of a step: the thread's input window and filter taps go to registers once.
    sch.compute_at(data_local, ki)
    sch.compute_at(kernel_local, ki)
    if k.transpose_filter:
        _read_filter_as_vectors(sch, kernel_local, ki, k.read_vector)
    threads = [("threadIdx.x", threads_per_block(workload, k))]
    # Transposed, consecutive filter elements of global memory land a row apart: one per copy.
    for stage, vector in ((data_shared, 1), (kernel_shared, 1 if k.transpose_filter else k.fetch_vector)):
        sch.compute_at(stage, ko)
        cooperative_fetch(sch, stage, ko, threads, vector=vector)
    if k.shared_pad:
        # A row is the innermost axis: one output channel's taps, or one tap's output channels.
        row_axis, row = (2, k.block_f) if k.transpose_filter else (0, filter_row(workload, k))
        sch.storage_align(kernel_shared, 0, axis=row_axis, factor=row + k.shared_pad, offset=0)
    sch.decompose_reduction(conv, ko)
    pipeline(sch, ko, k.stages, k.async_copy)  # ko's body: [copy input, copy filter, multiply]
    unroll(sch, thread, k.unroll_max_step)


def _read_filter_as_vectors(sch, kernel_local, anchor, vector: int) -> None:
    """The register copy follows the transposed shared tile (taps, then output channels), so its
    innermost loop walks a thread's output channels of one tap: ``vector`` of them per load."""
    *_, channels = loops_below(sch, kernel_local, anchor)
    if vector > 1:
        sch.vectorize(sch.split(channels, factors=[None, vector])[1])


TEMPLATE = Template(
    name="conv2d_async",
    title="Conv2d — split-K blocks, register tiles and a cp.async pipeline",
    summary="Output channels and slices of the input channels over the blocks (a second kernel adds the "
            "slices' partial sums); register tiles per thread; input windows and filter tiles copied by "
            "cp.async into shared buffers that run stages − 1 reduction steps ahead.",
    workload=Conv2d,
    knobs=Conv2dAsyncKnobs,
    apply=schedule,
    tag_knobs={
        "blockIdx.x": ("block_f",),
        "blockIdx.y": ("split_k",),
        "threadIdx.x": ("block_f", "thread_f", "thread_y", "thread_x"),
    },
    shared_knobs=("block_f", "block_k", "stages", "shared_pad", "dynamic_shared"),
)
