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
        return {iv.var: value for iv, value in zip(self.block.iter_vars, self.realize.iter_values)}


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
        out.append(LoopRole(str(var.name), int(loop.extent), role, tag))
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
        for l, g in zip(group_loops, grids):
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


@functools.lru_cache(maxsize=64)
def _analyze(built, block: int, thread: tuple[int, int, int]) -> Tiling:
    try:
        return _tiling(built, block, thread)
    except Unsupported as why:
        raise ExplorerError(f"The tiling analysis cannot evaluate this schedule: {why}.") from None


def _tiling(built, block: int, thread: tuple[int, int, int]) -> Tiling:
    func = built.schedule_mod["main"]
    stage = compute_stage(func)
    blk = stage.block
    bindings = stage.bindings
    write = blk.writes[0]
    out_exprs = [r.min for r in write.region]
    spatial = set().union(*(free_vars(v) for iv, v in zip(blk.iter_vars, stage.realize.iter_values)
                            if int(iv.iter_type) != REDUCE))
    reduce = set().union(*(free_vars(v) for iv, v in zip(blk.iter_vars, stage.realize.iter_values)
                           if int(iv.iter_type) == REDUCE))
    roles = _roles(stage, spatial, reduce)
    loops = [Loop(l.loop_var, int(l.min), int(l.extent)) for l in stage.loops]
    by_role = {r: [loop for loop, role in zip(loops, roles) if role.role == r] for r in
               ("block", "vthread", "thread", "inner", "reduction", "fixed")}
    tags = {role.tag: loop for loop, role in zip(loops, roles) if role.tag}
    grid = {t: l.extent for t, l in tags.items() if t.startswith("blockIdx")}
    threads = {t: l.extent for t, l in tags.items() if t.startswith("threadIdx")}
    vthreads = {t: l.extent for t, l in tags.items() if t.startswith("vthread")}
    block_dims = [threads.get(f"threadIdx.{a}", 1) for a in AXES]
    grid_dims = [grid.get(f"blockIdx.{a}", 1) for a in AXES]
    if not 0 <= block < math.prod(grid_dims):
        raise ExplorerError(f"The launch has blocks 0–{math.prod(grid_dims) - 1}, not {block}.")
    if any(not 0 <= t < d for t, d in zip(thread, block_dims)):
        raise ExplorerError(f"Threads per block are {tuple(block_dims)} (x, y, z); thread {thread} is outside.")

    block_coords = np.unravel_index(block, grid_dims[::-1])[::-1]  # x fastest
    block_env = {tags[f"blockIdx.{a}"].var: int(c) for a, c in zip(AXES, block_coords) if f"blockIdx.{a}" in tags}
    thread_env = {tags[f"threadIdx.{a}"].var: int(t) for a, t in zip(AXES, thread) if f"threadIdx.{a}" in tags}
    notes = []
    if any(l.var in block_env for l in by_role["fixed"] + by_role["inner"]):
        notes.append("A block index also drives a serial loop.")

    shape = tuple(int(d) for d in write.source.shape)
    workload = built.spec.workload
    # The compute stage often writes a register copy of the output; name the output itself.
    output = workload.output_name if shape == tuple(workload.output_shape()) else str(write.source.name)
    ownership = _ownership(output, stage, loops, roles, out_exprs, bindings, tags, grid_dims, block_dims)
    work = by_role["vthread"] + by_role["inner"] + by_role["reduction"] + by_role["fixed"]
    env = {**block_env, **thread_env}
    pred = None if _always(stage.realize.predicate) else stage.realize.predicate
    outputs_thread, _, _ = distinct_elements(out_exprs, work, env, bindings, pred)
    outputs_block, _, _ = distinct_elements(out_exprs, work + by_role["thread"], block_env, bindings, pred)
    iterations_block = _valid_iterations(work + by_role["thread"], block_env, bindings, pred)
    thread_vars = [l.var for l in by_role["thread"]]
    footprints = []
    for region in blk.reads:
        exprs = [r.min for r in region.region]
        if any(not (isinstance(r.extent, tirx.IntImm) and int(r.extent) == 1) for r in region.region):
            notes.append(f"{region.source.name}: reads of more than one element per iteration are counted by their first element.")
        t_count, t_box, t_cells = distinct_elements(exprs, work, env, bindings, pred)
        b_count, b_box, b_cells = distinct_elements(exprs, work + by_role["thread"], block_env, bindings, pred)
        # Σ over threads of their footprints = distinct (thread, element) pairs.
        per_thread_sum, _, _ = distinct_elements(thread_vars + exprs, work + by_role["thread"], block_env, bindings, pred)
        footprints.append(Footprint(
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
        ))
    return Tiling(
        stage=str(blk.name_hint),
        output=output,
        output_shape=shape,
        grid=grid, threads=threads, vthreads=vthreads,
        loops=tuple(roles),
        chosen_block=block, chosen_thread=thread,
        outputs_per_thread=outputs_thread, outputs_per_block=outputs_block,
        ownership=ownership, footprints=tuple(footprints), notes=tuple(notes),
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
    for l, g in zip(used, np.unravel_index(np.arange(size), [l.extent for l in used]) if used else ()):
        local[l.var] = g + l.min
    holds = np.broadcast_to(np.asarray(compile_expr(predicate, bindings)(local)).astype(bool), (size,))
    return int(holds.sum()) * (total // size)


def _ownership(output: str, stage, loops, roles, out_exprs, bindings, tags, grid_dims, block_dims) -> Ownership:
    if len(out_exprs) < 2:
        out_exprs = [tirx.const(0, "int32")] * (2 - len(out_exprs)) + list(out_exprs)
    plane_exprs, leading = out_exprs[-2:], out_exprs[:-2]
    plane_vars = set().union(*(free_vars(e, bindings) for e in plane_exprs))
    zero = {l.var: l.min for l in loops}
    plane_leading = [int(np.asarray(compile_expr(e, bindings)(zero))) for e in leading]
    enumerated = [(l, r) for l, r in zip(loops, roles) if l.var in plane_vars and r.role != "reduction"]
    per_block = math.prod(l.extent for l, r in enumerated if r.role != "block")
    block_loops = [l for l, r in enumerated if r.role == "block"]
    limits = _block_window([l.extent for l in block_loops], max(1, MAX_PLANE_ROWS // max(per_block, 1)))
    cropped = any(lim < l.extent for lim, l in zip(limits, block_loops))
    extents = [lim if r.role == "block" else l.extent
               for (l, r), lim in zip(enumerated, _spread(limits, [r.role for _, r in enumerated]))]
    size = math.prod(extents)
    env = dict(zero)
    grids = np.unravel_index(np.arange(size), extents) if extents else ()
    for (l, _), g in zip(enumerated, grids):
        env[l.var] = g + l.min
    keep = np.ones(size, dtype=bool)
    if not _always(stage.realize.predicate):
        keep &= np.broadcast_to(np.asarray(compile_expr(stage.realize.predicate, bindings)(env)).astype(bool), (size,))
    for e, want in zip(leading, plane_leading):
        keep &= np.broadcast_to(np.asarray(compile_expr(e, bindings)(env)), (size,)) == want
    rows, cols = (np.broadcast_to(np.asarray(compile_expr(e, bindings)(env)).astype(np.int64), (size,))[keep]
                  for e in plane_exprs)

    def tag_value(tag):
        loop = tags.get(tag)
        value = env.get(loop.var, 0) if loop is not None else 0
        return np.broadcast_to(np.asarray(value), (size,))[keep]

    bx, by, bz = (tag_value(f"blockIdx.{a}") for a in AXES)
    tx, ty, tz = (tag_value(f"threadIdx.{a}") for a in AXES)
    vthread_extents = [tags[f"vthread.{a}"].extent if f"vthread.{a}" in tags else 1 for a in AXES]
    vx, vy, vz = (tag_value(f"vthread.{a}") for a in AXES)
    inner = [(l, r) for l, r in enumerated if r.role in ("inner", "fixed")]
    iteration = np.zeros(int(keep.sum()), dtype=np.int64)
    for l, _ in inner:
        iteration = iteration * l.extent + (np.broadcast_to(np.asarray(env[l.var]), (size,))[keep] - l.min)

    origin = (int(rows.min()), int(cols.min())) if rows.size else (0, 0)
    shape = (int(rows.max()) - origin[0] + 1, int(cols.max()) - origin[1] + 1) if rows.size else (0, 0)
    r, c = rows - origin[0], cols - origin[1]

    def grid_of(values):
        out = np.full(shape, -1, dtype=np.int64)
        out[r, c] = values
        return out

    owners = np.zeros(shape, dtype=np.int64)
    np.add.at(owners, (r, c), 1)
    plane = f"{output}[{', '.join(str(v) for v in plane_leading + [':', ':'])}]"
    return Ownership(
        plane=plane, origin=origin,
        block=grid_of(bx + grid_dims[0] * (by + grid_dims[1] * bz)),
        vthread=grid_of(vx + vthread_extents[0] * (vy + vthread_extents[1] * vz)),
        thread=grid_of(tx + block_dims[0] * (ty + block_dims[1] * tz)),
        thread_x=grid_of(tx), thread_y=grid_of(ty), thread_z=grid_of(tz),
        iteration=grid_of(iteration), owners=owners, cropped=cropped,
    )


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
