"""Helpers shared by the schedule templates.

Templates call :func:`bind` instead of ``sch.bind`` (TVM silently replaces an existing
binding), and run under :func:`schedule_errors` so a primitive's ``ScheduleError``
becomes an :class:`InvalidKnobs` with a readable sentence.
"""
from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import tvm
from tvm.s_tir import Schedule
from tvm.s_tir.schedule.schedule import ScheduleError

from ..errors import InvalidKnobs
from ..knobs import KnobSet, knob
from ..workloads import DTYPE, Workload


@dataclass(frozen=True)
class Template:
    """A schedule template: one function from (workload, knobs) to a Schedule."""

    name: str
    title: str
    summary: str
    workload: type[Workload]
    knobs: type[KnobSet]
    apply: Callable[[Workload, KnobSet], Schedule]
    # Which knobs set each thread tag's extent and the shared-memory size: used to name
    # the knobs at fault when verification rejects a schedule.
    tag_knobs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    shared_knobs: tuple[str, ...] = ()
    # Shape values of the workload this template starts from where the workload's own
    # defaults do not suit it (tensor cores need 16-bit inputs).
    workload_defaults: Mapping[str, object] = field(default_factory=dict)
    # TVM's TIR pipeline that lowers the module: "default" for scheduled TensorIR, "tirx" for a
    # kernel written in the TIRx dialect (its statements are PTX instructions, not schedule steps).
    pipeline: str = "default"
    # CUDA architectures whose instructions the template uses; empty: any.
    archs: tuple[str, ...] = ()
    # Where its kernels multiply: on the tensor cores (mma.sync, wgmma: 16-bit tiles, float32 sums), or,
    # False, on the CUDA cores in float32 whatever the inputs' type (16-bit inputs converted first). It
    # chooses the compute roof of the roofline and the diagnosis (explorer.analysis.roofline.compute_types).
    tensor_cores: bool = False
    # What TVM's code generation of the template's kernels reads that scheduling sets up in a
    # process (TVM's tensor intrinsics register the fragment layouts a tensor-core store is
    # generated from): done first where a build made in another process is generated
    # (explorer.build.runtime_module_of).
    codegen_needs: Callable[[], None] | None = None

    def default_workload(self) -> Workload:
        return self.workload(**self.workload_defaults)

    def knobs_for_tags(self, tags) -> tuple[str, ...]:
        names: list[str] = []
        for tag in tags:
            for name in self.tag_knobs.get(tag, ()):
                if name not in names:
                    names.append(name)
        return tuple(names)


def check_float32_output(workload: Workload, template: str) -> None:
    """A template that schedules the workload's reduction block as C itself writes float32 sums."""
    if workload.output_dtype() != DTYPE:
        raise InvalidKnobs(f"The {template} template writes C in float32: set the workload's out_dtype to float32 "
                           f"(the matmul_hopper template rounds C to the inputs' type as it stores it).", ())


def new_schedule(workload: Workload, variant: str = "default") -> Schedule:
    return Schedule(tvm.IRModule({"main": workload.prim_func(variant)}))


def bind(sch: Schedule, loop, tag: str) -> None:
    """``sch.bind`` that refuses to re-bind a loop (TVM would silently replace the tag)."""
    existing = sch.get(loop).thread_binding
    if existing is not None:
        raise InvalidKnobs(
            f"Loop '{sch.get(loop).loop_var}' is already bound to {existing.thread_tag}; "
            f"binding it again to {tag} would silently drop the first binding."
        )
    sch.bind(loop, tag)


def loops_below(sch: Schedule, block, anchor) -> list:
    """The loops of ``block`` nested inside loop ``anchor`` (after a compute_at)."""
    anchor_stmt = sch.get(anchor)
    loops = sch.get_loops(block)
    for i, loop in enumerate(loops):
        if sch.get(loop).same_as(anchor_stmt):
            return loops[i + 1 :]
    raise InvalidKnobs("internal: a cache stage is not placed under the expected loop.")


def cooperative_fetch(sch: Schedule, block, anchor, threads: list[tuple[str, int]], vector: int = 1,
                      contiguous: bool = False) -> None:
    """Spread a shared-memory load over the block's threads: fuse the copy loops, split
    them by the thread extents (outermost tag first) and bind. ``vector`` > 1 makes each
    thread copy that many consecutive elements with one vector instruction.
    ``contiguous`` gives each thread one contiguous run of the copy instead (TE's
    ``split(nparts=threads)``, as d2l writes it): neighbouring threads then read addresses
    a run apart, so a warp's loads coalesce less well than the default interleaving."""
    loops = loops_below(sch, block, anchor)
    if not loops:
        return  # a single element: every thread stores the same value, which is harmless
    fused = sch.fuse(*loops) if len(loops) > 1 else loops[0]
    if vector > 1:
        fused, vec = sch.split(fused, factors=[None, vector])
        sch.vectorize(vec)
    extents = [n for _, n in threads if n > 1]
    tags = [t for t, n in threads if n > 1]
    if not extents:
        return
    if contiguous:
        thread_loops = sch.split(fused, factors=[*extents, None])[:-1]
    else:
        thread_loops = sch.split(fused, factors=[None, *extents])[1:]
    for loop, tag in zip(thread_loops, tags, strict=False):
        bind(sch, loop, tag)


# -- the pipeline knobs of the templates that copy through cp.async, declared once ----------


def stages_knob(default: int = 3):
    return knob(default, "Shared buffers per tile = depth of the software pipeline over the reduction: "
                "1 = load then compute, 2 = double buffering, 3+ = copies run further ahead.",
                choices=(1, 2, 3, 4, 5))


def async_copy_knob(default: bool = True):
    return knob(default, "Copy global → shared with cp.async (sm_80+), which needs no registers and "
                "does not block the thread; needs stages ≥ 2.")


def dynamic_shared_knob(default: bool = True):
    return knob(default, "Allocate the shared tiles dynamically ('shared.dyn'): a block may then "
                "opt in to more than 48 KB (227 KB on the H100).")


def unroll_max_step_knob(default: int = 512):
    return knob(default, "Unroll a thread's loops up to this trip count; 0 = leave them rolled.",
                choices=(0, 16, 64, 256, 512, 1024))


def check_pipeline(k: KnobSet) -> None:
    """A template with ``stages`` and ``async_copy`` knobs: cp.async needs a pipeline to overlap with."""
    if k.async_copy and k.stages < 2:
        raise InvalidKnobs("async_copy overlaps the copies with the multiply-adds of an earlier step, so it needs "
                           "a pipeline: stages ≥ 2.", ("async_copy", "stages"))


def pipeline(sch: Schedule, loop, stages: int, async_copy: bool, nested: bool = False) -> None:
    """Make ``loop``, whose body is [copy, copy, compute], a software pipeline: with ``stages`` > 1
    each copy gets that many buffers and runs stages - 1 iterations ahead of the compute; with
    ``async_copy`` the copies become cp.async (build.pass_config turns the pass on).
    ``nested``: the compute is a loop that :func:`prefetch_registers` pipelines. TVM expands
    that inner pipeline first, into [prologue, loop, epilogue], which all stay at the compute's
    stage, in order (meta_schedule's tensor-core rule moves the prologue a stage earlier, but then
    the wait for the copies moves before the whole inner loop and the outer pipeline loses a stage)."""
    if stages > 1:
        compute = [stages - 1] * (3 if nested else 1)
        sch.annotate(loop, "software_pipeline_stage", [0, 0, *compute])
        sch.annotate(loop, "software_pipeline_order", list(range(2 + len(compute))))
        if async_copy:
            sch.annotate(loop, "software_pipeline_async_stages", [0])


def prefetch_registers(sch: Schedule, loop) -> None:
    """Make ``loop``, whose body is [load A's registers, load B's registers, compute], a two-stage
    software pipeline: the loads of iteration i + 1 are issued before the compute of iteration i,
    into a second copy of each register tile (TVM doubles the buffers and indexes them by i % 2).
    The loop must be unrolled so that those indices are constants and the copies stay in registers.
    It is marked for nvcc to unroll (``#pragma unroll``), with the loops inside it: the same code
    unrolled in TVM's IR takes nvcc far longer to compile (for matmul_async's 8×8 thread tiles,
    5 s instead of 0.7 s; with block_k 32 and 4 stages, 43 s instead of 2 s)."""
    sch.annotate(loop, "software_pipeline_stage", [0, 0, 1])
    sch.annotate(loop, "software_pipeline_order", [0, 1, 2])
    sch.annotate(loop, "pragma_unroll_explicit", 0)
    sch.unroll(loop)


# -- split-K: slices of a reduction summed by their own blocks, then added -------------------

# Threads per block of the kernel that adds the partial sums.
REDUCE_THREADS = 128


def rfactor_slices(sch: Schedule, loop, slices: int):
    """Cut the reduction ``loop`` into ``slices`` and make the slice a spatial axis: TVM's ``rfactor``
    returns a new block ("<name>_rf") that writes one partial sum per slice (axis 0 of its buffer);
    the original block then adds the partials."""
    slice_, _ = sch.split(loop, factors=[slices, None])
    return sch.rfactor(slice_, factor_axis=0)


def sum_partials(sch: Schedule, block) -> None:
    """The second kernel of split-K: one thread per output of ``block`` adds its partial sums
    in a register, REDUCE_THREADS threads per block."""
    total = sch.cache_write(block, 0, "local")
    outer, thread = sch.split(sch.fuse(*sch.get_loops(total)), factors=[None, REDUCE_THREADS])
    bind(sch, outer, "blockIdx.x")
    bind(sch, thread, "threadIdx.x")
    sch.compute_at(block, thread)


def unroll(sch: Schedule, loop, max_step: int) -> None:
    """Unroll the loops under ``loop`` up to ``max_step`` iterations, in TVM's IR; 0 leaves them rolled."""
    if max_step:
        sch.annotate(loop, "pragma_auto_unroll_max_step", max_step)
        sch.annotate(loop, "pragma_unroll_explicit", 1)


_MESSAGE = re.compile(r"Error message:\s*(.*)", re.S)


@contextlib.contextmanager
def schedule_errors(knobs: KnobSet):
    """Turn a primitive's ScheduleError into InvalidKnobs naming the template's knobs."""
    try:
        yield
    except ScheduleError as error:
        text = str(error)
        found = _MESSAGE.search(text)
        detail = (found.group(1) if found else text).strip().splitlines()[0]
        raise InvalidKnobs(
            f"TVM cannot apply this schedule with these knob values: {detail}",
            tuple(knobs.to_dict()),
        ) from None
