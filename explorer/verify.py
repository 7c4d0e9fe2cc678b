"""Checks that TVM does not make, run before anything is compiled or launched.

TVM lets through schedules that compile to kernels which never launch (too many
threads, too much shared memory), compute wrong results (a thread tag bound on two
nested loops) or crash the process (a stage left outside the thread loops runs as host
code touching device memory). Each is rejected here with InvalidKnobs naming the knobs.
"""
from __future__ import annotations

import math

import tvm
from tvm import tirx
from tvm.s_tir import SBlockRealize
from tvm.tirx.analysis import undefined_vars

from .errors import InvalidKnobs
from .schedules.common import Template
from .targets import is_cuda
from .tir_walk import allocations, thread_tag, walk

# CUDA's per-dimension block limits; the total is the target's max_threads_per_block.
THREAD_DIM_LIMITS = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}
GRID_DIM_LIMITS = {"blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}


def verify_scheduled(template: Template, mod: tvm.IRModule, target: tvm.target.Target) -> None:
    """Structural checks on the scheduled TensorIR."""
    root = mod["main"].body
    kernels = children_of_root(root)
    for kernel in kernels:
        extents: dict[str, int] = {}
        for realize, loops in walk(kernel):
            if not isinstance(realize, SBlockRealize):
                continue
            stmt = realize.block
            tags = [thread_tag(loop) for loop in loops if thread_tag(loop)]
            for tag in set(tags):
                if tags.count(tag) > 1 and not _is_cooperative_fetch(realize, [l for l in loops if thread_tag(l) == tag]):
                    raise InvalidKnobs(
                        f"Stage '{stmt.name_hint}' is inside two loops bound to {tag}: both would use the same "
                        f"thread index, so most outputs would never be computed (wrong results).",
                        template.knobs_for_tags([tag]),
                    )
            if is_cuda(target) and not any(t.startswith(("blockIdx", "threadIdx")) for t in tags):
                raise InvalidKnobs(
                    f"Stage '{stmt.name_hint}' is not placed under the GPU's block/thread loops: it would run on "
                    f"the host and touch GPU memory, which crashes the process.",
                    template.knobs_for_tags(template.tag_knobs),
                )
            for loop in loops:
                tag = thread_tag(loop)
                if tag and isinstance(loop.extent, tirx.IntImm):
                    extents[tag] = max(extents.get(tag, 1), int(loop.extent))
        if is_cuda(target):
            _check_launch(template, extents, target)


def _is_cooperative_fetch(realize: SBlockRealize, same_tag_loops: list) -> bool:
    """A stage under nested loops with one thread tag is correct only when it reads the
    innermost loop's index alone, over the same extent (a shared-memory load split over
    the block's threads inside the compute's thread loops): TVM merges the loops into one
    thread index, and the outer loops merely repeat the same work."""
    if len({int(loop.extent) for loop in same_tag_loops}) > 1:
        return False
    used = [v for expr in (*realize.iter_values, realize.predicate) for v in undefined_vars(expr)]
    return not any(v.same_as(loop.loop_var) for loop in same_tag_loops[:-1] for v in used)


def children_of_root(root) -> list:
    """The top-level statements under the root block: one loop nest per kernel."""
    body = root.block.body if hasattr(root, "block") else root
    return list(body.seq) if hasattr(body, "seq") else [body]


def _check_launch(template: Template, extents: dict[str, int], target) -> None:
    for tag, limit in {**THREAD_DIM_LIMITS, **GRID_DIM_LIMITS}.items():
        if extents.get(tag, 1) > limit:
            raise InvalidKnobs(
                f"{tag} has extent {extents[tag]}, above CUDA's limit of {limit} for that dimension.",
                template.knobs_for_tags([tag]),
            )
    thread_tags = [t for t in extents if t.startswith("threadIdx")]
    threads = math.prod(extents[t] for t in thread_tags)
    limit = int(target.attrs.get("max_threads_per_block", 1024))
    if threads > limit:
        shape = " × ".join(f"{extents[t]} ({t})" for t in sorted(thread_tags))
        raise InvalidKnobs(
            f"A block would have {threads} threads ({shape}), more than the {limit} a CUDA block may have: "
            f"the kernel would compile but never launch.",
            template.knobs_for_tags(sorted(thread_tags)),
        )


def shared_bytes(func: tirx.PrimFunc) -> int:
    """Static shared memory allocated by one lowered device function, in bytes."""
    return sum(a.bytes for a in allocations(func) if a.scope in ("shared", "shared.dyn"))


def verify_device(template: Template, device_mod: tvm.IRModule, target: tvm.target.Target) -> None:
    """Checks on the lowered device TIR, before code generation."""
    limit = int(target.attrs.get("max_shared_memory_per_block", 49152))
    for gv, func in device_mod.functions.items():
        used = shared_bytes(func)
        if used > limit:
            raise InvalidKnobs(
                f"Kernel '{gv.name_hint}' needs {used:,} bytes of shared memory per block, more than the "
                f"{limit:,} bytes a block may use statically on {target.arch}: make the tile smaller or "
                f"stage less in shared memory.",
                template.shared_knobs,
            )
    limits = {
        "max_shared_memory_per_block": limit,
        "max_threads_per_block": int(target.attrs.get("max_threads_per_block", 1024)),
        "max_thread_x": THREAD_DIM_LIMITS["threadIdx.x"],
        "max_thread_y": THREAD_DIM_LIMITS["threadIdx.y"],
        "max_thread_z": THREAD_DIM_LIMITS["threadIdx.z"],
    }
    try:
        tvm.get_global_func("s_tir.transform.VerifyGPUCode")(limits)(device_mod)
    except Exception as error:  # TVM raises a plain RuntimeError/TVMError here
        first = str(error).strip().splitlines()[-1]
        raise InvalidKnobs(
            f"The CUDA verifier rejects this schedule: {first}", template.knobs_for_tags(template.tag_knobs)
        ) from None

