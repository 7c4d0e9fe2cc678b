"""The tiling of a kernel written out (templates on TVM's TIRx pipeline: reduce_tree, the attention
kernels, matmul_hopper), the picture a teacher draws on the board, read from the kernel itself.

A written kernel has no compute stage for :mod:`.tiling` to read: its work is in its loads and
stores. So the lowered TIR's global accesses are evaluated as the bank model evaluates shared ones
(every thread of a block, every iteration of the loops around the access, the guards): the stores
of the output say which block, warp and thread writes each element of it (the query rows a block,
a warp and a thread of an attention kernel own; the tile of C a block of a matmul computes), and
for the sum the loads of the input say which elements each block and thread adds. Attention's key
and value tiles come from the kernel's own loop: the written attention kernels take the extent of
their loop over key tiles from :func:`~explorer.schedules.attention_fused.key_tiles` (FlashAttention's
figure: a block of query rows walks the key tiles, up to the diagonal with the causal mask).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import ExplorerError
from ..schedules.attention_fused import key_tiles
from ..targets import WARP_SIZE
from ..units import count
from .accesses import AXES, KernelAccesses, SharedAccess, global_accesses
from .texpr import Unsupported, compile_guarded

# (blocks × loop iterations × threads) evaluated per access: beyond it, the plane shows the first blocks only.
BUDGET = 1 << 20
PLANE_BLOCKS = 64  # blocks evaluated for the picture of the whole output (the chosen block always whole)
FAMILIES = {"attention": "attention", "matmul": "matmul", "sum": "sum"}  # workload kind -> what is drawn


@dataclass(frozen=True, eq=False)
class Touched:
    """Who reads or writes which elements of one buffer: one entry per (block, iteration, thread, element)."""

    block: np.ndarray
    thread: np.ndarray
    step: np.ndarray  # the index of the iteration of the access's loops (0 where there is no loop)
    element: np.ndarray  # flattened element index
    blocks_evaluated: int


@dataclass(frozen=True, eq=False)
class WrittenTiling:
    """What each block and thread of a written kernel owns, for the chosen block."""

    template: str
    family: str  # attention | matmul | sum
    buffer: str  # the buffer drawn: the output, or the sum's input
    plane: str  # e.g. O[0, 0, :, :]
    shape: tuple[int, int]  # the plane's rows and columns
    chosen_block: int
    blocks: int  # in the launch (of the kernel drawn)
    threads_per_block: int
    # The chosen block's elements of the plane (rows, columns) and who touches each (thread, iteration).
    rows: np.ndarray
    cols: np.ndarray
    thread: np.ndarray
    step: np.ndarray
    sentences: tuple[str, ...]
    outputs_per_thread: int
    outputs_per_block: int
    # Elements of the inputs the blocks load per output they write, each block loading its tiles once, and
    # how that is counted (a sentence).
    loads_per_output: float | None = None
    loads_rule: str = ""
    # Attention: per query tile (rows of block_q) the block that owns it (-1: not among the blocks evaluated)
    # and, per query tile and key tile, the step of the block's loop that computes it (-1: never).
    tile_owner: np.ndarray | None = None
    walk: np.ndarray | None = None
    block_q: int = 0
    block_kv: int = 0
    # Matmul: the block of each block-sized cell of C (-1: not evaluated), and the cell's size.
    cell_owner: np.ndarray | None = None
    cell: tuple[int, int] = (1, 1)
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def warp(self) -> np.ndarray:
        return self.thread // WARP_SIZE

    def to_dict(self) -> dict:
        return {
            "template": self.template, "family": self.family, "buffer": self.buffer, "plane": self.plane,
            "shape": list(self.shape), "chosen_block": self.chosen_block, "blocks": self.blocks,
            "threads_per_block": self.threads_per_block, "sentences": list(self.sentences),
            "outputs_per_thread": self.outputs_per_thread, "outputs_per_block": self.outputs_per_block,
            "loads_per_output": self.loads_per_output, "loads_rule": self.loads_rule, "block_q": self.block_q,
            "block_kv": self.block_kv,
            "tile_owner": None if self.tile_owner is None else self.tile_owner.tolist(),
            "walk": None if self.walk is None else self.walk.tolist(),
            "cell_owner": None if self.cell_owner is None else self.cell_owner.tolist(), "cell": list(self.cell),
            "notes": list(self.notes),
        }


def is_written(template) -> bool:
    """Whether a template's kernels are written out (lowered by the TIRx pipeline) rather than scheduled."""
    return template.pipeline == "tirx"


# -- evaluating an access for chosen blocks ---------------------------------------------------


def touched(kernel: KernelAccesses, access: SharedAccess, blocks: np.ndarray) -> Touched:
    """Every element ``access`` touches in the given blocks (linear ids, blockIdx.x fastest): each thread,
    each iteration of the loops its index or guards use, the lanes its guards switch off left out, and every
    element of a vector access."""
    launch = kernel.launch
    index, guards, used = compile_guarded(access.index, access.guards, kernel.bindings)
    loops = [loop for loop in access.loops if loop.var in used]
    known = set(launch.thread_vars.values()) | set(launch.block_vars.values()) | {loop.var for loop in loops}
    unknown = sorted(str(v.name) for v in used if v not in known)
    if unknown:
        raise Unsupported(f"{access.text} uses {', '.join(unknown)}, which cannot be enumerated")
    steps = math.prod(loop.extent for loop in loops)
    threads = launch.threads_per_block
    blocks = np.asarray(blocks)[: max(1, BUDGET // max(1, steps * threads))]
    env: dict = {}
    b = blocks[:, None, None]
    for i, axis in enumerate(AXES):
        if axis in launch.block_vars:
            env[launch.block_vars[axis]] = b // math.prod(launch.grid[:i]) % launch.grid[i]
    step = np.arange(steps)[None, :, None]
    for loop, values in zip(loops, np.unravel_index(step, [l.extent for l in loops]) if loops else (), strict=False):
        env[loop.var] = values + loop.min
    tid = np.arange(threads)[None, None, :]
    bx, by, _ = launch.block
    for axis, value in zip(AXES, (tid % bx, tid // bx % by, tid // (bx * by)), strict=True):
        if axis in launch.thread_vars:
            env[launch.thread_vars[axis]] = value
    shape = (len(blocks), steps, threads)
    active = np.ones(shape, dtype=bool)
    for guard, want in guards:
        holds = np.broadcast_to(np.asarray(guard(env)).astype(bool), shape)
        active &= holds if want else ~holds
    element = np.broadcast_to(np.asarray(index(env)).astype(np.int64), shape)
    grid = np.broadcast_arrays(b, step, tid)
    picked = [np.repeat(g[active], access.lanes) for g in grid]
    elements = (element[active][:, None] + np.arange(access.lanes)[None, :]).reshape(-1)
    return Touched(picked[0], picked[2], picked[1], elements, len(blocks))


def _concat(parts: list[Touched]) -> Touched:
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return Touched(empty, empty, empty, empty, 0)
    # Each access's iterations are numbered on their own: offset them so that accesses stay apart.
    offsets = np.cumsum([0] + [int(p.step.max()) + 1 if p.step.size else 1 for p in parts[:-1]])
    return Touched(*(np.concatenate([getattr(p, name) for p in parts]) for name in ("block", "thread")),
                   np.concatenate([p.step + o for p, o in zip(parts, offsets, strict=True)]),
                   np.concatenate([p.element for p in parts]), min(p.blocks_evaluated for p in parts))


def touched_buffer(kernel: KernelAccesses, buffer: str, op: str, blocks: np.ndarray, first: bool = False) -> Touched:
    """:func:`touched` for every ``op`` ("load" or "store") of ``buffer`` in ``kernel`` (``first``: the first
    alone, enough to place each block's tile, since every store of the written kernels spans its rows)."""
    accesses = [a for a in kernel.accesses if a.buffer == buffer and a.op == op]
    if not accesses:
        raise ExplorerError(f"Kernel {kernel.launch.kernel} makes no {op} of {buffer} the analysis can read.")
    return _concat([touched(kernel, a, blocks) for a in accesses[:1 if first else None]])


# -- the analysis ---------------------------------------------------------------------------


def analyze_written(built, block: int = 0) -> WrittenTiling:
    """What each block and thread of a written kernel owns (cached per build and block)."""
    return _analyze(built, int(block))


@functools.lru_cache(maxsize=32)
def _analyze(built, block: int) -> WrittenTiling:
    spec = built.spec
    if built.device_mod is None:
        raise ExplorerError("A CPU build has no thread blocks.")
    kind = spec.workload.kind
    if kind not in FAMILIES:
        raise ExplorerError(f"The tiling of a written {kind} kernel is not drawn here.")
    kernels = global_accesses(built)
    try:
        if kind == "sum":
            return _sum(built, kernels, block)
        return _output(built, kernels[0], block)
    except Unsupported as why:
        raise ExplorerError(f"The tiling analysis cannot evaluate this kernel: {why}.") from None


def _chosen(kernel: KernelAccesses, block: int) -> int:
    blocks = kernel.launch.blocks
    if not 0 <= block < blocks:
        raise ExplorerError(f"The launch has blocks 0–{blocks - 1}, not {block}.")
    return block


def _plane_of(shape: tuple[int, ...], element: np.ndarray):
    """(leading index flattened, row, column) of flattened elements of a buffer of ``shape``."""
    rows, cols = (shape[-2], shape[-1]) if len(shape) >= 2 else (1, shape[-1])
    return element // (rows * cols), element // cols % rows, element % cols


def _output(built, kernel: KernelAccesses, block: int) -> WrittenTiling:
    spec, workload = built.spec, built.spec.workload
    block = _chosen(kernel, block)
    name = workload.output_name
    shape = tuple(workload.output_shape())
    mine = touched_buffer(kernel, name, "store", np.array([block]))
    lead, rows, cols = _plane_of(shape, mine.element)
    plane = f"{name}[{', '.join(['0'] * (len(shape) - 2) + [':', ':'])}]" if len(shape) > 2 else f"{name}[:, :]"
    launch = kernel.launch
    first = np.arange(min(launch.blocks, PLANE_BLOCKS))
    every = touched_buffer(kernel, name, "store", first, first=True)
    e_lead, e_rows, e_cols = _plane_of(shape, every.element)
    common = dict(template=spec.template, buffer=name, plane=plane, shape=shape[-2:], chosen_block=block,
                  blocks=launch.blocks, threads_per_block=launch.threads_per_block, rows=rows, cols=cols,
                  thread=mine.thread, step=mine.step,
                  outputs_per_thread=int(np.bincount(mine.thread).max()) if mine.thread.size else 0,
                  outputs_per_block=int(mine.element.size))
    leading = int(lead.min()) if lead.size else 0
    if workload.kind == "attention":
        return _attention(spec, common, leading, (e_lead, e_rows, every))
    return _matmul(spec, common, (e_lead, e_rows, e_cols, every), launch.blocks)


def _attention(spec, common: dict, leading: int, evaluated) -> WrittenTiling:
    w, knobs = spec.workload, spec.knobs
    block_q = getattr(knobs, "block_q", None) or 64 * knobs.consumers  # attention_hopper: 64 rows per consumer
    block_kv = knobs.block_kv
    q_tiles, kv_tiles = w.seq // block_q, w.seq // block_kv
    e_lead, e_rows, every = evaluated
    owner = np.full(q_tiles, -1, dtype=np.int64)
    in_plane = e_lead == 0
    owner[e_rows[in_plane] // block_q] = every.block[in_plane]
    walk = np.full((q_tiles, kv_tiles), -1, dtype=np.int64)
    for qt in range(q_tiles):
        walked = key_tiles(qt, block_q, block_kv, w.seq, w.causal)
        walk[qt, :walked] = np.arange(walked)
    rows, cols, thread = common["rows"], common["cols"], common["thread"]
    qt = int(rows.min()) // block_q
    head = "" if leading == 0 else f" (head {leading} of the batch: plane {leading} of O)"
    walked = key_tiles(qt, block_q, block_kv, w.seq, w.causal)
    warp_rows = {int(wp): np.unique(rows[thread // WARP_SIZE == wp]) for wp in np.unique(thread // WARP_SIZE)}
    t0 = int(thread.min())
    sentences = [
        f"Block {common['chosen_block']} owns query rows {int(rows.min()):,}–{int(rows.max()):,}{head}: "
        f"{count(int(np.unique(rows).size), 'row')} × {w.head_dim} outputs of O, query tile {qt} of {q_tiles}.",
        f"It walks {count(walked, 'key and value tile', 'key and value tiles')} of {block_kv} keys, "
        f"0 … {walked - 1}" + (f" (up to the diagonal: the causal mask hides the other "
                              f"{kv_tiles - walked})" if walked < kv_tiles else "")
        + ": for each, the scores of its rows against those keys, the online softmax and P·V.",
        f"The {count(len(warp_rows), 'warp')} that write O (of {common['threads_per_block'] // WARP_SIZE}): "
        + "; ".join(
            f"warp {wp} rows {_listed(r)}" for wp, r in list(warp_rows.items())[:4])
        + ("; …" if len(warp_rows) > 4 else "") + ".",
        f"Thread {t0} writes rows {_listed(np.unique(rows[thread == t0]))} × columns "
        f"{_listed(np.unique(cols[thread == t0]))}: {count(int((thread == t0).sum()), 'output')}.",
    ]
    kv_tiles_loaded = sum(key_tiles(t, block_q, block_kv, w.seq, w.causal) for t in range(q_tiles))
    loads = (q_tiles * block_q + 2 * kv_tiles_loaded * block_kv) / (q_tiles * block_q)
    rule = ("Loads per output: each block loads its query tile once and each key and value tile it walks once "
            f"(from global memory, or L2): {loads:,.1f} elements of Q, K and V per output of O.")
    return WrittenTiling(family="attention", sentences=tuple(sentences), loads_per_output=loads, loads_rule=rule,
                         tile_owner=owner, walk=walk, block_q=block_q, block_kv=block_kv, **common)


def _matmul(spec, common: dict, evaluated, blocks: int) -> WrittenTiling:
    knobs, w = spec.knobs, spec.workload
    e_lead, e_rows, e_cols, every = evaluated
    cell = (knobs.block_m, knobs.block_n)
    cells = np.full((w.m // cell[0], w.n // cell[1]), -1, dtype=np.int64)
    cells[e_rows // cell[0], e_cols // cell[1]] = every.block
    rows, cols, thread = common["rows"], common["cols"], common["thread"]
    warpgroups = {int(g): np.unique(rows[thread // 128 == g]) for g in np.unique(thread // 128)}
    t0 = int(thread.min())
    persistent = int((cells == common["chosen_block"]).sum()) > 1 or getattr(knobs, "persistent", False)
    tiles = sorted({(int(r) // cell[0], int(c) // cell[1]) for r, c in zip(rows, cols, strict=True)})
    sentences = [
        f"Block {common['chosen_block']} computes {count(len(tiles), 'tile')} of {cell[0]} × {cell[1]} outputs of C"
        + (f": tile (row, column) {', '.join(map(str, tiles[:4]))}{' …' if len(tiles) > 4 else ''}"
           + (" one after the other (persistent)" if persistent else "")) + ".",
        "Its consumer warpgroups (128 threads each): " + "; ".join(
            f"threads {128 * g}–{128 * g + 127} rows {_listed(r)}" for g, r in warpgroups.items()) + ".",
        f"Thread {t0} writes rows {_listed(np.unique(rows[thread == t0]))} × columns "
        f"{_listed(np.unique(cols[thread == t0]))}: {count(int((thread == t0).sum()), 'output')}.",
    ]
    notes = []
    if len(tiles) > 1:  # a persistent block: its first tile drawn, its threads own the same places in each
        first = (rows // cell[0] == tiles[0][0]) & (cols // cell[1] == tiles[0][1])
        common = {**common, **{name: common[name][first] for name in ("rows", "cols", "thread", "step")}}
        notes.append(f"The picture of block {common['chosen_block']} shows its first tile.")
    if every.blocks_evaluated < blocks:
        notes.append(f"The picture of C shows the tiles of the first {every.blocks_evaluated} of {blocks:,} blocks.")
    loads = (cell[0] * w.k + w.k * cell[1]) / (cell[0] * cell[1])
    rule = (f"Loads per output: each block loads its {cell[0]} rows of A and {cell[1]} columns of B once per tile: "
            f"{loads:,.1f} elements per output of C.")
    return WrittenTiling(family="matmul", sentences=tuple(sentences), loads_per_output=loads, loads_rule=rule,
                         cell_owner=cells, cell=cell, notes=tuple(notes), **common)


def _sum(built, kernels: tuple[KernelAccesses, ...], block: int) -> WrittenTiling:
    spec, workload = built.spec, built.spec.workload
    first = kernels[0]
    block = _chosen(first, block)
    name = workload.input_names[0]
    mine = touched_buffer(first, name, "load", np.array([block]))
    threads = first.launch.threads_per_block
    # One row per run of consecutive elements (a grid-stride step's pair of loads), counted from its first.
    order = np.argsort(mine.element, kind="stable")
    element, thread, step = mine.element[order], mine.thread[order], mine.step[order]
    rows = np.concatenate([[0], np.cumsum(np.diff(element) > 1)]) if element.size else element
    starts = element[np.concatenate([[True], np.diff(rows) > 0])] if element.size else element
    cols = element - starts[rows]
    t0 = thread == 0
    summed = element[t0]
    spacing = _spacing(np.diff(summed))
    sentences = [
        f"Block {block} of {first.launch.blocks:,} sums {count(int(element.size), 'element')} of {name} "
        f"({workload.n:,} in all): {count(threads, 'thread')}, each adding "
        f"{count(int(summed.size), 'element')} in a register before the tree.",
        "Thread 0 adds " + ", ".join(f"{name}[{e:,}]" for e in summed[:4]) + (", …" if summed.size > 4 else "")
        + (f": {spacing}" if spacing else "") + "; thread t the elements t further on.",
    ]
    if len(kernels) > 1:
        second = kernels[1]
        partial = [a for a in second.accesses if a.op == "load"]
        if partial:
            loads = _concat([touched(second, a, np.array([0])) for a in partial])
            sentences.append(f"Then one block of {count(second.launch.threads_per_block, 'thread')} adds the "
                             f"{count(first.launch.blocks, 'partial sum')} of the first kernel: thread 0 adds "
                             f"{partial[0].buffer}[" + ", ".join(f"{e:,}" for e in np.sort(loads.element[
                                 loads.thread == 0])[:4]) + (", …" if (loads.thread == 0).sum() > 4 else "") + "].")
    return WrittenTiling(template=spec.template, family="sum", buffer=name, plane=f"{name}, block {block}'s elements",
                         shape=(int(rows.max()) + 1 if rows.size else 0, int(cols.max()) + 1 if cols.size else 0),
                         chosen_block=block,
                         blocks=first.launch.blocks, threads_per_block=threads, rows=rows, cols=cols, thread=thread,
                         step=step, sentences=tuple(sentences), outputs_per_thread=0, outputs_per_block=0,
                         loads_per_output=float(workload.n),
                         loads_rule=f"Loads per output: the sum reads each of its {workload.n:,} elements once for its "
                                    "one output.",
                         notes=("Each row is a run of consecutive elements the block reads (a step of its threads' "
                                "loop), counted from the run's first.",))


def _spacing(gaps: np.ndarray) -> str:
    """How far apart a thread's elements are: "256 apart", or for pairs "pairs 256 apart, one every 262,144"."""
    if not gaps.size:
        return ""
    if len(set(gaps.tolist())) == 1:
        return f"{int(gaps[0]):,} apart"
    if gaps.size >= 2 and len(set(gaps[0::2].tolist())) == 1 and len(set(gaps[1::2].tolist())) == 1:
        return f"in pairs {int(gaps[0]):,} apart, a pair every {int(gaps[0] + gaps[1]):,}"
    return ""


def _listed(values: np.ndarray) -> str:
    """Integers as a reader takes them in: "0–15", "0, 16, 32 … 112 (every 16)", "3, 7, 9"."""
    values = [int(v) for v in values]
    if not values:
        return "none"
    if len(values) == 1:
        return f"{values[0]:,}"
    steps = {b - a for a, b in zip(values, values[1:], strict=False)}
    if steps == {1}:
        return f"{values[0]:,}–{values[-1]:,}"
    if len(steps) == 1:
        step = steps.pop()
        shown = ", ".join(f"{v:,}" for v in values[:3])
        return f"{shown} … {values[-1]:,} (every {step:,})" if len(values) > 3 else f"{shown} (every {step:,})"
    runs, start = [], values[0]
    for a, b in zip(values, values[1:] + [None], strict=False):
        if b != a + 1:
            runs.append(f"{start:,}–{a:,}" if a != start else f"{a:,}")
            start = b
    return ", ".join(runs[:4]) + (", …" if len(runs) > 4 else "")


# -- text ------------------------------------------------------------------------------------


def format_written(t: WrittenTiling) -> str:
    lines = [f"{t.template}: {t.plane}, {t.shape[0]:,} × {t.shape[1]:,}"]
    lines += [f"  {s}" for s in t.sentences]
    if t.walk is not None:
        lines.append(f"  key tiles walked per query tile of {t.block_q} rows: "
                     + " ".join(str(int((row >= 0).sum())) for row in t.walk[:16]) + (" …" if len(t.walk) > 16 else ""))
    lines += [f"  note: {n}" for n in (*t.notes, t.loads_rule) if n]
    return "\n".join(lines)
