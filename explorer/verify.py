"""Checks that TVM does not make, run before anything is compiled or launched.

TVM lets through schedules that compile to kernels which never launch (too many
threads, too much shared memory), compute wrong results (a thread tag bound on two
nested loops) or crash the process (a stage left outside the thread loops runs as host
code touching device memory). Each is rejected here with InvalidKnobs naming the knobs.
"""
from __future__ import annotations

import math
import re

import tvm
from tvm import tirx
from tvm.s_tir import SBlockRealize
from tvm.tirx.analysis import undefined_vars

from .errors import InvalidKnobs, summary_line
from .gpus import STATIC_SHARED_PER_BLOCK, architecture_of
from .schedules.common import Template
from .targets import is_cuda
from .tir_walk import allocations, thread_tag, walk

# CUDA's per-dimension block limits; the total is the target's max_threads_per_block.
THREAD_DIM_LIMITS = {"threadIdx.x": 1024, "threadIdx.y": 1024, "threadIdx.z": 64}
GRID_DIM_LIMITS = {"blockIdx.x": 2**31 - 1, "blockIdx.y": 65535, "blockIdx.z": 65535}


def verify_scheduled(template: Template, mod: tvm.IRModule, target: tvm.target.Target) -> None:
    """Structural checks on the scheduled TensorIR."""
    if is_cuda(target):
        _check_async_copy_arch(template, mod, target)
        if template.archs and str(target.arch) not in template.archs:
            raise InvalidKnobs(f"This template's instructions exist only on {', '.join(template.archs)} "
                               f"(Hopper GPUs such as the H100), not on {target.arch}: choose such a target.")
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
                if tags.count(tag) > 1 and not _is_cooperative_fetch(realize,
                                                                     [l for l in loops if thread_tag(l) == tag]):
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


def has_async_copies(mod: tvm.IRModule) -> bool:
    """Whether a loop of the scheduled module asks for asynchronous (cp.async) pipeline stages."""
    return any(isinstance(stmt, tirx.For) and "software_pipeline_async_stages" in stmt.annotations
               for func in mod.functions.values() if isinstance(func, tirx.PrimFunc) for stmt, _ in walk(func.body))


# cp.async (global → shared without registers) exists from the Ampere generation on.
ASYNC_COPY_MIN_ARCH = 80


def _check_async_copy_arch(template: Template, mod: tvm.IRModule, target: tvm.target.Target) -> None:
    """TVM emits cp.async for any CUDA target; before sm_80 the kernel would not compile."""
    found = re.fullmatch(r"sm_(\d+)a?", str(target.attrs.get("arch", "")))
    if found and int(found.group(1)) < ASYNC_COPY_MIN_ARCH and has_async_copies(mod):
        named = tuple(knob.name for knob in template.knobs.fields() if knob.name == "async_copy")
        raise InvalidKnobs(f"cp.async copies need a GPU of compute capability 8.0 or newer, and the target is "
                           f"{target.attrs['arch']}: turn async_copy off.", named)


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
    """Shared memory (static and dynamic) allocated by one lowered device function, in bytes."""
    return sum(a.bytes for a in allocations(func) if a.scope in ("shared", "shared.dyn"))


def pooled_shared_bytes(mod: tvm.IRModule) -> int:
    """Shared memory a TIRx kernel declares for its pool (``T.SMEMPool``): lowering turns the
    declaration into a launch parameter, so the lowered device function no longer shows it."""
    return max((int(stmt.value) for func in mod.functions.values() if isinstance(func, tirx.PrimFunc)
                for stmt, _ in walk(func.body)
                if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "tirx.dyn_smem_bytes"), default=0)


def dynamic_shared_bytes(func: tirx.PrimFunc) -> int:
    return sum(a.bytes for a in allocations(func) if a.scope == "shared.dyn")


def shared_limits(target: tvm.target.Target) -> tuple[int, int]:
    """(static limit, dynamic opt-in limit) of shared memory per block on ``target``."""
    static = int(target.attrs.get("max_shared_memory_per_block", STATIC_SHARED_PER_BLOCK))
    # The dynamic shared memory a block may opt in to (cudaFuncAttributeMaxDynamicSharedMemorySize):
    # TVM's CUDA runtime opts in by itself when a kernel asks for 48 KB or more.
    entry = architecture_of(str(target.attrs.get("arch", "")))
    return static, max(static, (entry.max_shared_per_block if entry else None) or static)


def verify_device(template: Template, device_mod: tvm.IRModule, target: tvm.target.Target) -> None:
    """Checks on the lowered device TIR, before code generation."""
    static_limit, dynamic_limit = shared_limits(target)
    limit = static_limit
    for gv, func in device_mod.functions.items():
        used, dynamic = shared_bytes(func), dynamic_shared_bytes(func)
        if dynamic and used > dynamic_limit:
            raise InvalidKnobs(
                f"Kernel '{gv.name_hint}' needs {used:,} bytes of shared memory per block, more than the "
                f"{dynamic_limit:,} bytes a block may opt in to dynamically on {target.arch}: use fewer stages "
                f"or smaller tiles.",
                template.shared_knobs,
            )
        if not dynamic and used > static_limit:
            remedy = "make the tile smaller or stage less in shared memory"
            if "dynamic_shared" in template.shared_knobs and dynamic_limit > static_limit:
                remedy = (f"make the tile smaller, stage less in shared memory, or allocate it dynamically "
                          f"(knob dynamic_shared: up to {dynamic_limit:,} bytes by opt-in)")
            raise InvalidKnobs(
                f"Kernel '{gv.name_hint}' needs {used:,} bytes of shared memory per block, more than the "
                f"{static_limit:,} bytes a block may use statically on {target.arch}: {remedy}.",
                template.shared_knobs,
            )
        if dynamic:
            limit = dynamic_limit
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
        raise InvalidKnobs(f"The CUDA verifier rejects this schedule: {summary_line(error)}",
                           template.knobs_for_tags(template.tag_knobs)) from None

