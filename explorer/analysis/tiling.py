"""Who computes which output, and which inputs each block and thread reads.

Evaluated on the build's scheduled TensorIR (``Build.schedule_mod``), the program the
lowered TIR is generated from: it still has the virtual-thread loops, which lowering
expands away, and each stage's iteration → element mapping (block bindings and read/write
regions). The *compute stage* is the stage with reduction axes (the convolution or
matmul itself).

- **Ownership**: each output element of one plane (the last two output dimensions, with
  the leading ones — batch, channel — at the value every loop at 0 gives) is labelled
  with its CUDA block, virtual thread, thread and inner iteration. Large planes show the
  first blocks only (``MAX_PLANE_ROWS`` elements).
- **Footprints**: for a chosen block and thread, the distinct elements of each buffer
  the compute stage reads (the input tile including its halo), and the loads per output
  when each thread loads its footprint once — the blog's count: 1 output per thread reads
  9 inputs (16 threads: 9×16 loads) against 2×2 outputs per thread reading 16 (4 threads:
  16×4 loads). Distinct elements are counted exactly by enumerating independent index
  dimensions separately.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np
from tvm import tirx
from tvm.s_tir import SBlockRealize

from ..errors import ExplorerError
from ..tir_walk import thread_tag, walk
from .accesses import AXES, Loop
from .texpr import Unsupported, compile_expr, free_vars

MAX_PLANE_ROWS = 1 << 14  # output elements labelled for the ownership figures (a 128 × 128 window)
MAX_GROUP_ROWS = 1 << 20  # combinations enumerated per independent index group
REDUCE = 2  # tirx.IterVar.CommReduce


@dataclass(frozen=True)
class LoopRole:
    name: str
    extent: int
    role: str  # block | vthread | thread | inner | reduction | fixed
    tag: str = ""
    reduces: bool = False  # a reduction loop (bound to threads: they share their outputs)


@dataclass(frozen=True, eq=False)
class Ownership:
    """Per output element of the plane (arrays rows × cols, -1 where nobody writes)."""

    plane: str  # e.g. DepthwiseConv2d[0, 0, :, :]
    origin: tuple[int, int]  # output coordinates of element [0, 0]
    block: np.ndarray
    vthread: np.ndarray
    thread: np.ndarray  # linear thread id (threadIdx.x fastest)
    thread_x: np.ndarray
    thread_y: np.ndarray
    thread_z: np.ndarray
    iteration: np.ndarray  # index of the inner loop iteration that computes it
    owners: np.ndarray  # how many (block, vthread, thread, iteration) write it
    cropped: bool  # only the first blocks of a large plane

    @property
    def shape(self) -> tuple[int, int]:
        return self.block.shape


@dataclass(frozen=True, eq=False)
class Footprint:
    """What the compute stage reads from one buffer, for the chosen block and thread."""

    buffer: str
    thread_elements: int  # distinct elements the chosen thread reads
    block_elements: int  # distinct elements the chosen block reads (tile + halo)
    loads_per_block: int  # Σ over the block's threads of their distinct elements
    reads_per_output: float  # executed reads per output (no reuse at all)
    loads_per_output: float  # loads_per_block / outputs per block (each thread loads its footprint once)
    thread_box: tuple[int, ...]  # extent of the thread's footprint per dimension
    block_box: tuple[int, ...]
    thread_cells: np.ndarray  # (n, 2) coordinates in the last two dimensions
    block_cells: np.ndarray


@dataclass(frozen=True, eq=False)
class Tiling:
    stage: str  # the compute stage's name
    output: str
    output_shape: tuple[int, ...]
    grid: dict  # blockIdx tag -> extent
    threads: dict  # threadIdx tag -> extent
    vthreads: dict
    loops: tuple[LoopRole, ...]
    chosen_block: int
    chosen_thread: tuple[int, int, int]
    outputs_per_thread: int
    outputs_per_block: int
    ownership: Ownership
    footprints: tuple[Footprint, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        own = self.ownership
        return {
            "stage": self.stage,
            "output": self.output,
            "output_shape": list(self.output_shape),
            "grid": self.grid,
            "threads": self.threads,
            "vthreads": self.vthreads,
            "loops": [vars(l) for l in self.loops],
            "chosen_block": self.chosen_block,
            "chosen_thread": list(self.chosen_thread),
            "outputs_per_thread": self.outputs_per_thread,
            "outputs_per_block": self.outputs_per_block,
            "ownership": {
                "plane": own.plane, "origin": list(own.origin), "shape": list(own.shape), "cropped": own.cropped,
                **{name: getattr(own, name).tolist() for name in
                   ("block", "vthread", "thread", "thread_x", "thread_y", "thread_z", "iteration", "owners")},
            },
            "footprints": [
                {
                    "buffer": f.buffer, "thread_elements": f.thread_elements, "block_elements": f.block_elements,
                    "loads_per_block": f.loads_per_block, "reads_per_output": f.reads_per_output,
                    "loads_per_output": f.loads_per_output, "thread_box": list(f.thread_box),
                    "block_box": list(f.block_box), "thread_cells": f.thread_cells.tolist(),
                    "block_cells": f.block_cells.tolist(),
                }
                for f in self.footprints
            ],
            "notes": list(self.notes),
        }


# -- finding the compute stage ---------------------------------------------------------


@dataclass
class _Stage:
    realize: SBlockRealize
    loops: list  # enclosing For statements, outermost first

    @property
    def block(self):
        return self.realize.block

    @property
    def bindings(self) -> dict:
        return {iv.var: value for iv, value in zip(self.block.iter_vars, self.realize.iter_values, strict=False)}


def compute_stage(func) -> _Stage:
    """The stage with reduction axes (else the last stage writing a buffer)."""
    stages = [_Stage(s, list(loops)) for s, loops in walk(func.body)
              if isinstance(s, SBlockRealize) and s.block.writes]
    if not stages:
        raise ExplorerError("This build has no compute stage to analyse.")
    for stage in stages:
        if any(int(iv.iter_type) == REDUCE for iv in stage.block.iter_vars):
            return stage
    return stages[-1]


def _roles(stage: _Stage, spatial_vars: set, reduce_vars: set) -> list[LoopRole]:
    out = []
    for loop in stage.loops:
        tag = thread_tag(loop) or ""
        var = loop.loop_var
        if tag.startswith("blockIdx"):
            role = "block"
        elif tag.startswith("vthread"):
            role = "vthread"
        elif tag.startswith("threadIdx"):
            role = "thread"
        elif var in spatial_vars:
            role = "inner"
        elif var in reduce_vars:
            role = "reduction"
        else:
            role = "fixed"
        out.append(LoopRole(str(var.name), int(loop.extent), role, tag, var in reduce_vars))
    return out


# -- distinct elements -----------------------------------------------------------------


def distinct_elements(exprs: list, loops: list[Loop], env: dict, bindings: dict, predicate=None):
    """Count the distinct tuples (e0, …, en) over all combinations of ``loops`` (other
    variables fixed by ``env``), keeping combinations where ``predicate`` holds.

    Expressions that share no loop variable vary independently, so they are enumerated
    in separate groups and the count is the product of the groups' counts (exact, and
    small even for long reductions). Returns (count, per-dimension extents (max − min + 1),
    the distinct (e[-2], e[-1]) pairs)."""
    loop_of = {l.var: l for l in loops}
    items = list(exprs) + ([predicate] if predicate is not None else [])
    uses = [{v for v in free_vars(e, bindings) if v in loop_of} for e in items]
    parent = list(range(len(items)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    owner_of: dict = {}
    for i, used in enumerate(uses):
        for v in used:
            if v in owner_of:
                parent[find(i)] = find(owner_of[v])
            else:
                owner_of[v] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(items)):
        groups.setdefault(find(i), []).append(i)

    count = 1
    box = [1] * len(exprs)
    values: dict[int, np.ndarray] = {}  # expr index -> its column (rows of its group)
    group_of: dict[int, int] = {}
    for gid, members in groups.items():
        group_loops = [loop_of[v] for v in loop_of if any(v in uses[i] for i in members)]
        size = math.prod(l.extent for l in group_loops)
        if size > MAX_GROUP_ROWS:
            raise ExplorerError(f"A footprint needs {size:,} combinations of {', '.join(l.name for l in group_loops)}; "
                                f"the analysis stops at {MAX_GROUP_ROWS:,}.")
        local = dict(env)
        grids = np.unravel_index(np.arange(size), [l.extent for l in group_loops]) if group_loops else ()
        for l, g in zip(group_loops, grids, strict=False):
            local[l.var] = g + l.min
        keep = np.ones(size, dtype=bool)
        if predicate is not None and len(items) - 1 in members:
            keep = np.broadcast_to(np.asarray(compile_expr(predicate, bindings)(local)).astype(bool), (size,))
        columns = []
        for i in members:
            if i >= len(exprs):
                continue
            col = np.broadcast_to(np.asarray(compile_expr(exprs[i], bindings)(local)).astype(np.int64), (size,))[keep]
            values[i], group_of[i] = col, gid
            columns.append(col)
            box[i] = int(col.max() - col.min() + 1) if col.size else 0
        if not keep.any():
            return 0, tuple(0 for _ in exprs), np.zeros((0, 2), dtype=np.int64)
        if columns:
            count *= len(_distinct(_linearize(columns)))
    pairs = _plane_pairs(values, group_of, len(exprs))
    return count, tuple(box), pairs


def _distinct(keys: np.ndarray) -> np.ndarray:
    """Sorted distinct values of non-negative keys (by marking when their range is small)."""
    if keys.size and keys.max() < max(4 * keys.size, 1 << 20):
        seen = np.zeros(int(keys.max()) + 1, dtype=bool)
        seen[keys] = True
        return np.flatnonzero(seen)
    return np.unique(keys)


def _linearize(columns: list[np.ndarray]) -> np.ndarray:
    key = np.zeros(len(columns[0]), dtype=np.int64)
    for col in columns:
        low = col.min()
        key = key * int(col.max() - low + 1) + (col - low)
    return key


def _plane_pairs(values: dict, group_of: dict, n: int) -> np.ndarray:
    if n == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if n == 1:  # a 1-D buffer: one row
        low = values[0].min() if values[0].size else 0
        cols = _distinct(values[0] - low) + low
        return np.stack([np.zeros_like(cols), cols], axis=1)
    a, b = n - 2, n - 1
    if group_of.get(a) == group_of.get(b):
        first, second = values[a], values[b]
        if not first.size:
            return np.zeros((0, 2), dtype=np.int64)
        width = int(second.max() - second.min() + 1)
        keys = _distinct((first - first.min()) * width + (second - second.min()))
        return np.stack([keys // width + first.min(), keys % width + second.min()], axis=1)
    rows = _distinct(values[a] - values[a].min()) + values[a].min() if values[a].size else values[a]
    cols = _distinct(values[b] - values[b].min()) + values[b].min() if values[b].size else values[b]
    return np.stack(np.meshgrid(rows, cols, indexing="ij"), axis=-1).reshape(-1, 2)


# -- the analysis ----------------------------------------------------------------------


def analyze_tiling(built, block: int = 0, thread: tuple[int, int, int] = (0, 0, 0)) -> Tiling:
    """Ownership and footprints of a build's compute stage (cached per build and choice)."""
    return _analyze(built, int(block), tuple(int(t) for t in thread))


def keep_tilings(count: int) -> None:
    """Keep at most ``count`` tilings in this process's cache (64 by default: the pages' tiling
    views). A tiling holds its build (the cache's key) and up to ~6 MiB of arrays for a matmul
    setting, and takes 3-35 ms to make: a process that only reads a few numbers from each
    (the diagnosing process) keeps few."""
    global _analyze
    _analyze = functools.lru_cache(maxsize=count)(_analyze.__wrapped__)


@functools.lru_cache(maxsize=64)
def _analyze(built, block: int, thread: tuple[int, int, int]) -> Tiling:
    try:
        return _tiling(built, block, thread)
    except Unsupported as why:
        raise ExplorerError(f"The tiling analysis cannot evaluate this schedule: {why}.") from None


ROLES = ("block", "vthread", "thread", "inner", "reduction", "fixed")


@dataclass(frozen=True)
class _Nest:
    """The compute stage's loops, what each is bound to, and the launch they make."""

    stage: _Stage
    loops: list  # Loop per enclosing For, outermost first
    roles: list  # LoopRole per loop
    by_role: dict  # role -> its loops
    tags: dict  # thread tag -> its loop
    grid: dict  # blockIdx tag -> extent
    threads: dict  # threadIdx tag -> extent
    vthreads: dict  # vthread tag -> extent

    @property
    def grid_dims(self) -> list[int]:
        return [self.grid.get(f"blockIdx.{a}", 1) for a in AXES]

    @property
    def block_dims(self) -> list[int]:
        return [self.threads.get(f"threadIdx.{a}", 1) for a in AXES]

    @property
    def vthread_dims(self) -> list[int]:
        return [self.vthreads.get(f"vthread.{a}", 1) for a in AXES]


def _iteration_vars(stage: _Stage, reduction: bool) -> set:
    """The loop variables the stage's spatial (or reduction) block iterators are bound to."""
    values = [v for iv, v in zip(stage.block.iter_vars, stage.realize.iter_values, strict=False)
              if (int(iv.iter_type) == REDUCE) == reduction]
    return set().union(*(free_vars(v) for v in values))


def _nest(stage: _Stage) -> _Nest:
    roles = _roles(stage, _iteration_vars(stage, reduction=False), _iteration_vars(stage, reduction=True))
    loops = [Loop(l.loop_var, int(l.min), int(l.extent)) for l in stage.loops]
    by_role = {r: [loop for loop, role in zip(loops, roles, strict=False) if role.role == r] for r in ROLES}
    tags = {role.tag: loop for loop, role in zip(loops, roles, strict=False) if role.tag}

    def extents(prefix: str) -> dict:
        return {t: l.extent for t, l in tags.items() if t.startswith(prefix)}

    return _Nest(stage, loops, roles, by_role, tags, extents("blockIdx"), extents("threadIdx"), extents("vthread"))


def _chosen_env(nest: _Nest, block: int, thread: tuple[int, int, int]) -> tuple[dict, dict]:
    """Loop variable values of the chosen block, and of the chosen thread in it."""
    grid_dims, block_dims = nest.grid_dims, nest.block_dims
    if not 0 <= block < math.prod(grid_dims):
        raise ExplorerError(f"The launch has blocks 0–{math.prod(grid_dims) - 1}, not {block}.")
    if any(not 0 <= t < d for t, d in zip(thread, block_dims, strict=False)):
        raise ExplorerError(f"Threads per block are {tuple(block_dims)} (x, y, z); thread {thread} is outside.")
    block_coords = np.unravel_index(block, grid_dims[::-1])[::-1]  # x fastest
    tags = nest.tags
    block_env = {tags[f"blockIdx.{a}"].var: int(c) for a, c in zip(AXES, block_coords, strict=False)
                 if f"blockIdx.{a}" in tags}
    thread_env = {tags[f"threadIdx.{a}"].var: int(t) for a, t in zip(AXES, thread, strict=False)
                  if f"threadIdx.{a}" in tags}
    return block_env, thread_env


def _output_name(built, write) -> str:
    """The output's name; the compute stage often writes a register copy of it."""
    workload = built.spec.workload
    shape = tuple(int(d) for d in write.source.shape)
    return workload.output_name if shape == tuple(workload.output_shape()) else str(write.source.name)


@dataclass(frozen=True)
class _Counting:
    """What distinct elements are counted over: one thread's work, or the whole block's."""

    work: list  # loops of one thread's work (vthreads, inner, reduction, fixed)
    block_loops: list  # the work and the thread loops
    thread_env: dict  # the chosen block and thread
    block_env: dict  # the chosen block
    bindings: dict
    predicate: object  # None when the stage always runs

    def in_thread(self, exprs: list):
        return distinct_elements(exprs, self.work, self.thread_env, self.bindings, self.predicate)

    def in_block(self, exprs: list):
        return distinct_elements(exprs, self.block_loops, self.block_env, self.bindings, self.predicate)

    def iterations_in_block(self) -> int:
        return _valid_iterations(self.block_loops, self.block_env, self.bindings, self.predicate)


def _counting(nest: _Nest, block_env: dict, thread_env: dict) -> _Counting:
    by_role = nest.by_role
    work = by_role["vthread"] + by_role["inner"] + by_role["reduction"] + by_role["fixed"]
    predicate = nest.stage.realize.predicate
    return _Counting(work, work + by_role["thread"], {**block_env, **thread_env}, block_env, nest.stage.bindings,
                     None if _always(predicate) else predicate)


def _notes(nest: _Nest, block_env: dict) -> list[str]:
    """What the counts below simplify: block indices in serial loops, multi-element reads."""
    notes = []
    if any(l.var in block_env for l in nest.by_role["fixed"] + nest.by_role["inner"]):
        notes.append("A block index also drives a serial loop.")
    for region in nest.stage.block.reads:
        if any(not (isinstance(r.extent, tirx.IntImm) and int(r.extent) == 1) for r in region.region):
            notes.append(f"{region.source.name}: reads of more than one element per iteration are counted by "
                         f"their first element.")
    return notes


def _footprint(region, count: _Counting, thread_vars: list, outputs_block: int, iterations_block: int) -> Footprint:
    exprs = [r.min for r in region.region]
    t_count, t_box, t_cells = count.in_thread(exprs)
    b_count, b_box, b_cells = count.in_block(exprs)
    # Σ over threads of their footprints = distinct (thread, element) pairs.
    per_thread_sum, _, _ = count.in_block(thread_vars + exprs)
    return Footprint(
        buffer=str(region.source.name),
        thread_elements=t_count,
        block_elements=b_count,
        loads_per_block=per_thread_sum,
        reads_per_output=iterations_block / outputs_block if outputs_block else 0.0,
        loads_per_output=per_thread_sum / outputs_block if outputs_block else 0.0,
        thread_box=t_box,
        block_box=b_box,
        thread_cells=t_cells,
        block_cells=b_cells,
    )


def _tiling(built, block: int, thread: tuple[int, int, int]) -> Tiling:
    stage = compute_stage(built.schedule_mod["main"])
    nest = _nest(stage)
    block_env, thread_env = _chosen_env(nest, block, thread)
    write = stage.block.writes[0]
    out_exprs = [r.min for r in write.region]
    output = _output_name(built, write)
    count = _counting(nest, block_env, thread_env)
    outputs_thread, _, _ = count.in_thread(out_exprs)
    outputs_block, _, _ = count.in_block(out_exprs)
    iterations_block = count.iterations_in_block()
    thread_vars = [l.var for l in nest.by_role["thread"]]
    footprints = tuple(_footprint(region, count, thread_vars, outputs_block, iterations_block)
                       for region in stage.block.reads)
    return Tiling(
        stage=str(stage.block.name_hint),
        output=output,
        output_shape=tuple(int(d) for d in write.source.shape),
        grid=nest.grid, threads=nest.threads, vthreads=nest.vthreads,
        loops=tuple(nest.roles),
        chosen_block=block, chosen_thread=thread,
        outputs_per_thread=outputs_thread, outputs_per_block=outputs_block,
        ownership=_ownership(output, nest, out_exprs), footprints=footprints, notes=tuple(_notes(nest, block_env)),
    )


def _always(predicate) -> bool:
    return isinstance(predicate, tirx.IntImm) and bool(predicate.value)


def _valid_iterations(loops: list[Loop], env: dict, bindings: dict, predicate) -> int:
    total = math.prod(l.extent for l in loops)
    if predicate is None:
        return total
    used = [l for l in loops if l.var in free_vars(predicate, bindings)]
    size = math.prod(l.extent for l in used)
    local = dict(env)
    for l, g in zip(used, np.unravel_index(np.arange(size), [l.extent for l in used]) if used else (), strict=False):
        local[l.var] = g + l.min
    holds = np.broadcast_to(np.asarray(compile_expr(predicate, bindings)(local)).astype(bool), (size,))
    return int(holds.sum()) * (total // size)


# -- ownership: every output of one plane, labelled with who computes it ----------------


def _ownership(output: str, nest: _Nest, out_exprs: list) -> Ownership:
    bindings = nest.stage.bindings
    plane_exprs, leading = _plane_and_leading(out_exprs)
    zero = {l.var: l.min for l in nest.loops}
    plane_leading = [int(np.asarray(compile_expr(e, bindings)(zero))) for e in leading]
    enumerated = _plane_loops(nest, plane_exprs)
    extents, cropped = _window(enumerated)
    env, size = _enumerate(enumerated, extents, zero)
    keep = _kept(nest.stage, env, size, leading, plane_leading)
    rows, cols = (_evaluated(e, bindings, env, size, np.int64)[keep] for e in plane_exprs)
    plane = f"{output}[{', '.join(str(v) for v in plane_leading + [':', ':'])}]"
    return _on_plane(plane, rows, cols, _owner_ids(nest, enumerated, env, size, keep), cropped)


def _plane_and_leading(out_exprs: list) -> tuple[list, list]:
    """The output's last two index expressions (the plane) and the ones before them."""
    if len(out_exprs) < 2:
        out_exprs = [tirx.const(0, "int32")] * (2 - len(out_exprs)) + list(out_exprs)
    return out_exprs[-2:], out_exprs[:-2]


def _plane_loops(nest: _Nest, plane_exprs: list) -> list[tuple[Loop, LoopRole]]:
    """The loops that move an output within the plane (reductions excluded)."""
    plane_vars = set().union(*(free_vars(e, nest.stage.bindings) for e in plane_exprs))
    return [(l, r) for l, r in zip(nest.loops, nest.roles, strict=False)
            if l.var in plane_vars and r.role != "reduction"]


def _window(enumerated: list) -> tuple[list[int], bool]:
    """How far to enumerate each plane loop: every block's own loops whole, the block
    loops only as far as MAX_PLANE_ROWS elements allow; and whether that crops the plane."""
    per_block = math.prod(l.extent for l, r in enumerated if r.role != "block")
    block_loops = [l for l, r in enumerated if r.role == "block"]
    limits = _block_window([l.extent for l in block_loops], max(1, MAX_PLANE_ROWS // max(per_block, 1)))
    cropped = any(lim < l.extent for lim, l in zip(limits, block_loops, strict=False))
    spread = _spread(limits, [r.role for _, r in enumerated])
    return [lim if r.role == "block" else l.extent for (l, r), lim in zip(enumerated, spread, strict=False)], cropped


def _enumerate(enumerated: list, extents: list[int], zero: dict) -> tuple[dict, int]:
    """Every combination of the plane loops (other loops at their start): values per variable."""
    size = math.prod(extents)
    env = dict(zero)
    grids = np.unravel_index(np.arange(size), extents) if extents else ()
    for (l, _), g in zip(enumerated, grids, strict=False):
        env[l.var] = g + l.min
    return env, size


def _evaluated(expr, bindings: dict, env: dict, size: int, dtype=None) -> np.ndarray:
    value = np.asarray(compile_expr(expr, bindings)(env))
    return np.broadcast_to(value.astype(dtype) if dtype is not None else value, (size,))


def _kept(stage: _Stage, env: dict, size: int, leading: list, plane_leading: list) -> np.ndarray:
    """Combinations the stage runs (its predicate holds) that write the chosen plane."""
    keep = np.ones(size, dtype=bool)
    if not _always(stage.realize.predicate):
        keep &= _evaluated(stage.realize.predicate, stage.bindings, env, size, bool)
    for e, want in zip(leading, plane_leading, strict=False):
        keep &= _evaluated(e, stage.bindings, env, size) == want
    return keep


def _owner_ids(nest: _Nest, enumerated: list, env: dict, size: int, keep: np.ndarray) -> dict:
    """Per kept combination: its block, vthread and thread (linear, x fastest), the thread's
    x, y, z, and the index of the inner iteration."""
    def tag_values(prefix: str) -> list[np.ndarray]:
        loops = [nest.tags.get(f"{prefix}.{a}") for a in AXES]
        return [np.broadcast_to(np.asarray(env.get(l.var, 0) if l is not None else 0), (size,))[keep] for l in loops]

    threads = tag_values("threadIdx")
    return {
        "block": _linear(tag_values("blockIdx"), nest.grid_dims),
        "vthread": _linear(tag_values("vthread"), nest.vthread_dims),
        "thread": _linear(threads, nest.block_dims),
        "thread_x": threads[0], "thread_y": threads[1], "thread_z": threads[2],
        "iteration": _iteration(enumerated, env, size, keep),
    }


def _linear(xyz: list[np.ndarray], dims: list[int]) -> np.ndarray:
    x, y, z = xyz
    return x + dims[0] * (y + dims[1] * z)


def _iteration(enumerated: list, env: dict, size: int, keep: np.ndarray) -> np.ndarray:
    """The index of the serial (inner and fixed) iteration that computes each output."""
    iteration = np.zeros(int(keep.sum()), dtype=np.int64)
    for l, r in enumerated:
        if r.role in ("inner", "fixed"):
            iteration = iteration * l.extent + (np.broadcast_to(np.asarray(env[l.var]), (size,))[keep] - l.min)
    return iteration


def _on_plane(plane: str, rows: np.ndarray, cols: np.ndarray, ids: dict, cropped: bool) -> Ownership:
    """Scatter the per-output ids onto the rows × cols window they cover (-1 elsewhere)."""
    origin = (int(rows.min()), int(cols.min())) if rows.size else (0, 0)
    shape = (int(rows.max()) - origin[0] + 1, int(cols.max()) - origin[1] + 1) if rows.size else (0, 0)
    r, c = rows - origin[0], cols - origin[1]

    def grid_of(values):
        out = np.full(shape, -1, dtype=np.int64)
        out[r, c] = values
        return out

    owners = np.zeros(shape, dtype=np.int64)
    np.add.at(owners, (r, c), 1)
    return Ownership(plane=plane, origin=origin, owners=owners, cropped=cropped,
                     **{name: grid_of(values) for name, values in ids.items()})


def _block_window(extents: list[int], allowed: int) -> list[int]:
    """How many blocks to take along each block loop so that their product ≤ allowed,
    as evenly as possible (a square window of a large plane)."""
    limits = [1] * len(extents)
    budget = allowed
    order = sorted(range(len(extents)), key=lambda i: extents[i])  # small axes first, the rest share what is left
    for position, i in enumerate(order):
        remaining = len(order) - position
        share = int(budget ** (1 / remaining) + 1e-9)
        limits[i] = max(1, min(extents[i], share))
        budget //= limits[i]
    return limits


def _spread(limits: list[int], roles: list[str]) -> list[int]:
    """Align block-loop limits with the enumerated loops (1 for non-block loops)."""
    it = iter(limits)
    return [next(it) if role == "block" else 1 for role in roles]


# -- text ------------------------------------------------------------------------------


def format_tiling(t: Tiling) -> str:
    own = t.ownership
    roles = ", ".join(f"{l.name}({l.extent}):{l.role}" for l in t.loops if l.extent > 1)
    lines = [
        f"compute stage {t.stage} → {t.output}{list(t.output_shape)}",
        f"  loops: {roles}",
        f"  grid {t.grid or '{}'}, threads {t.threads or '{}'}, vthreads {t.vthreads or '{}'}",
        f"  outputs: {t.outputs_per_thread} per thread, {t.outputs_per_block} per block",
        f"  ownership plane {own.plane}, {own.shape[0]}×{own.shape[1]} from {own.origin}"
        + (" (first blocks only)" if own.cropped else ""),
    ]
    if own.owners.size and own.owners.max() > 1:
        lines.append(f"  {int((own.owners > 1).sum())} outputs are computed more than once")
    lines.append(f"  block {t.chosen_block}, thread {t.chosen_thread}:")
    for f in t.footprints:
        lines.append(
            f"    {f.buffer}: thread reads {f.thread_elements} elements (box {'×'.join(map(str, f.thread_box))}), "
            f"block reads {f.block_elements} (box {'×'.join(map(str, f.block_box))}); "
            f"{f.loads_per_block} loads per block if each thread loads its footprint once = "
            f"{f.loads_per_output:.2f} per output (without reuse {f.reads_per_output:.2f})"
        )
    lines.extend(f"  note: {n}" for n in t.notes)
    return "\n".join(lines)
