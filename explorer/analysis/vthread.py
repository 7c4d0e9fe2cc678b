"""A setting with virtual threads beside the same setting without them.

"Without vthreads" keeps the CUDA block's output tile and its threads: the work the
virtual threads did becomes plain serial iterations of each thread (the vthread extent is
folded into the per-thread tile), so both sides compute the same outputs with the same
launch. What changes is *which* outputs a thread owns, and with it the addresses a warp
sends to shared memory at once.

TVM's ``vthread`` is a loop in the scheduled TensorIR; lowering (InjectVirtualThread)
removes it and writes its body once per virtual thread inside the real thread, each copy
with its own offset. So a thread with vthread.x = 4 owns 4 column tiles ``block / 4``
apart, and threads next to each other in a warp own columns next to each other.

:func:`compare_vthreads` builds both sides and reads them with the existing analyses:
the loop nests (scheduled and lowered), the tiling ownership, and the bank model's lane
map of one warp's shared-memory load.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
from tvm import tirx

from ..build import Build, Spec, build
from ..errors import ExplorerError
from ..tir_walk import walk
from .banks import BANK_BYTES, AccessConflicts, LaneMap, analyze_banks, lane_map
from .tiling import Tiling, analyze_tiling

WHAT_VTHREADS_DO = (
    "A vthread loop sits between the block and the real threads: every real thread does the work of each virtual "
    "thread in turn, and lowering writes that work out once per virtual thread, each copy with its own offset. The "
    "split puts the virtual-thread index outside the thread index, so a thread's tiles lie (block tile ÷ vthreads) "
    "outputs apart, and neighbouring threads start one thread tile apart instead of vthreads times that: threads "
    "side by side in a warp get outputs, and so addresses, closer together."
)
LINE_WIDTH = 200  # characters of a statement (after its indentation) shown in a lowered loop nest
SPLIT_TILES = ("tile_f", "tile_y", "tile_x")  # conv2d_autotvm: (blocks, vthreads, threads, inner)


# -- the same setting without vthreads, per template ------------------------------------


def _depthwise_blog(knobs) -> dict:
    # Each thread takes ceil(block / (vthreads × threads)) rows or columns, so vthreads 1
    # folds them into the thread's own tile.
    return {name: 1 for name in ("num_vthread_y", "num_vthread_x") if getattr(knobs, name) > 1}


def _matmul(knobs) -> dict:
    changes = {}
    for vthreads, per_thread in (("vthread_y", "thread_m"), ("vthread_x", "thread_n")):
        v = getattr(knobs, vthreads)
        if v > 1:
            changes[vthreads], changes[per_thread] = 1, v * getattr(knobs, per_thread)
    allowed = knobs.field("thread_m").choices
    too_big = [name for name in ("thread_m", "thread_n") if changes.get(name, 1) not in allowed]
    if too_big:
        name = too_big[0]
        raise ExplorerError(
            f"Without vthreads each thread would compute {changes[name]} consecutive "
            f"{'rows' if name == 'thread_m' else 'columns'}, but {name} goes up to {max(allowed)}: "
            f"the matmul template cannot express this setting without vthreads.")
    return changes


def _conv2d_autotvm(knobs) -> dict:
    changes = {}
    for name in SPLIT_TILES:
        blocks, vthreads, threads, inner = getattr(knobs, name)
        if vthreads > 1:
            changes[name] = (blocks, 1, threads, vthreads * inner)
    return changes


WITHOUT_VTHREADS = {"depthwise_blog": _depthwise_blog, "matmul": _matmul, "conv2d_autotvm": _conv2d_autotvm}


def not_applicable(template) -> str | None:
    """Why the comparison does not describe ``template`` (an ``explorer.schedules.common.Template``), or None."""
    if template.name in WITHOUT_VTHREADS:
        return None
    return (f"The template '{template.name}' has no vthread knobs; the templates with vthreads are "
            f"{', '.join(WITHOUT_VTHREADS)}.")


def without_vthreads(spec: Spec) -> Spec | None:
    """The same block tile and threads with every vthread extent folded into the
    per-thread tile; None when the setting has no vthread above 1."""
    if reason := not_applicable(spec.template_def):
        raise ExplorerError(reason)
    fold = WITHOUT_VTHREADS[spec.template]
    changes = fold(spec.knobs)
    return dataclasses.replace(spec, knobs=spec.knobs.replace(**changes)) if changes else None


# -- loop nests ----------------------------------------------------------------------------


def scheduled_nest(tiling: Tiling) -> tuple[str, ...]:
    """The compute stage's loops in the scheduled TensorIR, one per line, with what each
    is bound to (the vthread loops are still there)."""
    lines = []
    for depth, loop in enumerate(tiling.loops):
        what = loop.tag or loop.role
        lines.append(f"{'  ' * depth}for {loop.name} in range({loop.extent}):  # {what}")
    return tuple(lines)


def lowered_nest(built: Build) -> tuple[str, ...]:
    """The first kernel of the lowered TIR as an outline: thread launches, loops, guards
    and stores (each shortened to one line). Lowering has removed the vthread loops."""
    func = next(iter(built.device_mod.functions.values()))
    lines: list[str] = []
    _outline(func.body, 0, lines)
    return tuple(lines)


def _outline(stmt, depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    if isinstance(stmt, tirx.SeqStmt):
        for child in stmt.seq:
            _outline(child, depth, lines)
        return
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent":
        lines.append(f"{pad}{stmt.node.thread_tag} in range({int(stmt.value)}):  # launch")
        depth += 1
    elif isinstance(stmt, tirx.For):
        lines.append(f"{pad}for {stmt.loop_var.name} in range({stmt.extent}):")
        depth += 1
    elif isinstance(stmt, tirx.IfThenElse):
        lines.append(pad + _shorten(f"if {stmt.condition}:"))
        _outline(stmt.then_case, depth + 1, lines)
        if stmt.else_case is not None:
            lines.append(f"{pad}else:")
            _outline(stmt.else_case, depth + 1, lines)
        return
    elif isinstance(stmt, tirx.BufferStore):
        indices = ", ".join(str(i) for i in stmt.indices)
        lines.append(pad + _shorten(f"{stmt.buffer.name}[{indices}] = {stmt.value}"))
        return
    body = getattr(stmt, "body", None)
    if body is not None:
        _outline(body, depth, lines)


def _shorten(line: str) -> str:
    return line if len(line) <= LINE_WIDTH else line[: LINE_WIDTH - 1] + "…"


# -- one side ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class SharedLoad:
    """One warp's request of the shared load shown, and its buffer's loads over the launch."""

    buffer: str
    access: AccessConflicts  # the access whose lanes are shown
    lanes: LaneMap  # warp 0, the first iteration it takes part in
    max_degree: int  # over all loads of the buffer
    conflicts: int  # all loads of the buffer, whole launch (Nsight Compute's unit)


@dataclass(frozen=True, eq=False)
class Side:
    label: str  # "with vthreads" | "without vthreads"
    spec: Spec
    built: Build
    tiling: Tiling
    scheduled: tuple[str, ...]
    lowered: tuple[str, ...]
    thread_outputs: np.ndarray  # (n, 2) output (row, column) of thread (0, 0, 0) in block 0
    neighbour_outputs: np.ndarray  # the same for threadIdx.x = 1 (empty when there is none)
    shared_load: SharedLoad | None
    stores: int  # store statements in the lowered kernels (vthreads copy them)

    @property
    def vthreads(self) -> dict:
        return {tag: extent for tag, extent in self.tiling.vthreads.items() if extent > 1}

    def to_dict(self) -> dict:
        load = self.shared_load
        return {
            "label": self.label,
            "knobs": self.spec.knobs.to_strings(),
            "vthreads": self.vthreads,
            "threads": self.tiling.threads,
            "outputs_per_thread": self.tiling.outputs_per_thread,
            "outputs_per_block": self.tiling.outputs_per_block,
            "lowered_stores": self.stores,
            "scheduled_loop_nest": list(self.scheduled),
            "lowered_loop_nest": list(self.lowered),
            "thread_outputs": self.thread_outputs.tolist(),
            "neighbour_outputs": self.neighbour_outputs.tolist(),
            "shared_load": None if load is None else {
                "buffer": load.buffer, "access": load.access.number, "text": load.access.text,
                "warp": load.lanes.warp, "iteration": load.lanes.iteration,
                "address": list(load.lanes.address), "bank": list(load.lanes.bank), "active": list(load.lanes.active),
                "degree": load.lanes.degree, "buffer_max_degree": load.max_degree,
                "buffer_conflicts": load.conflicts,
            },
        }


def _owned(tiling: Tiling, thread: int) -> np.ndarray:
    """(row, column) of the outputs block 0's linear thread ``thread`` computes."""
    own = tiling.ownership
    cells = np.argwhere((own.block == 0) & (own.thread == thread))
    return cells + np.asarray(own.origin) if cells.size else cells.reshape(0, 2)


def _side(label: str, built: Build, buffer: str | None) -> Side:
    tiling = analyze_tiling(built)
    neighbour = 1 if tiling.threads.get("threadIdx.x", 1) > 1 else None
    return Side(
        label=label, spec=built.spec, built=built, tiling=tiling,
        scheduled=scheduled_nest(tiling), lowered=lowered_nest(built),
        thread_outputs=_owned(tiling, 0),
        neighbour_outputs=_owned(tiling, neighbour) if neighbour is not None else np.zeros((0, 2), dtype=np.int64),
        shared_load=_shared_load(built, buffer),
        stores=sum(isinstance(stmt, tirx.BufferStore) for func in built.device_mod.functions.values()
                   for stmt, _ in walk(func.body)),
    )


def _shared_loads(built: Build) -> list[tuple[str, AccessConflicts]]:
    """(kernel, access) of every modelled shared load that makes requests."""
    return [(k.kernel, a) for k in analyze_banks(built).kernels for a in k.accesses
            if a.op == "load" and not a.not_modelled and a.requests]


def _shown_buffer(with_v: Build, without_v: Build) -> str | None:
    """The shared buffer whose loads differ most between the sides (most conflicts first)."""
    worst: dict[str, int] = {}
    for built in (with_v, without_v):
        for _, a in _shared_loads(built):
            worst[a.buffer] = max(worst.get(a.buffer, 0), a.max_degree)
    return max(worst, key=lambda b: worst[b]) if worst else None


def _shared_load(built: Build, buffer: str | None) -> SharedLoad | None:
    loads = [(kernel, a) for kernel, a in _shared_loads(built) if a.buffer == buffer]
    if not loads:
        return None
    kernel, first = loads[0]
    return SharedLoad(buffer=buffer, access=first, lanes=lane_map(built, kernel, first.number, warp=0),
                      max_degree=max(a.max_degree for _, a in loads), conflicts=sum(a.conflicts for _, a in loads))


# -- the comparison ------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class VthreadComparison:
    sides: tuple[Side, ...]  # (with vthreads, without vthreads); empty when there is nothing to compare
    explanation: tuple[str, ...]
    missing: str = ""  # why there is no comparison (no vthread in this setting, or not expressible)
    notes: tuple[str, ...] = field(default_factory=tuple)

    def changed_knobs(self, index: int) -> dict[str, str]:
        """The knobs of side ``index`` that differ from the other side, as text."""
        mine, other = self.sides[index].spec.knobs, self.sides[1 - index].spec.knobs
        return {name: mine.to_strings()[name] for name in mine.changed_from(other)}

    def to_dict(self) -> dict:
        return {"sides": [s.to_dict() for s in self.sides], "explanation": list(self.explanation),
                "missing": self.missing, "notes": list(self.notes)}


def compare_vthreads(spec: Spec, target=None) -> VthreadComparison:
    """Both sides of ``spec``'s vthreads, built for ``target``, with an explanation read
    from their data; ``missing`` says why there is none."""
    try:
        plain = without_vthreads(spec)
    except ExplorerError as why:
        return VthreadComparison((), (), missing=str(why))
    if plain is None:
        return VthreadComparison((), (), missing="This setting has no vthread above 1: there is nothing to compare. "
                                                 "Set a vthread knob to 2 or more to see what it changes.")
    with_v, without_v = build(spec, target), build(plain, target)
    if with_v.device_mod is None:
        return VthreadComparison((), (), missing="A CPU build has no threads: choose a GPU target.")
    buffer = _shown_buffer(with_v, without_v)
    sides = (_side("with vthreads", with_v, buffer), _side("without vthreads", without_v, buffer))
    return VthreadComparison(sides, explain(*sides))


def format_comparison(c: VthreadComparison) -> str:
    if c.missing:
        return c.missing
    lines = [WHAT_VTHREADS_DO, ""]
    for index, side in enumerate(c.sides):
        changed = ", ".join(f"{name}={value}" for name, value in c.changed_knobs(index).items())
        lines.append(f"== {side.label}: {changed}")
        lines.append("scheduled TensorIR, compute stage:")
        lines.extend(f"  {line}" for line in side.scheduled)
        lines.append("lowered TIR:")
        lines.extend(f"  {line}" for line in side.lowered)
        lines.append(f"thread (0, 0, 0) of block 0 computes {_cells(side.thread_outputs)}")
        load = side.shared_load
        if load is not None:
            lanes = load.lanes
            lines.append(f"warp 0, {load.access.text}: {lanes.degree}-way")
            lines.append(f"  byte addresses {list(lanes.address)}")
            lines.append(f"  banks          {list(lanes.bank)}")
    lines.append("")
    lines.extend(c.explanation)
    return "\n".join(lines)


def _cells(cells: np.ndarray) -> str:
    return ", ".join(f"({r}, {c})" for r, c in cells.tolist())


# -- the explanation, read from the data ---------------------------------------------------

AXIS_NOUNS = ("rows", "columns")


def explain(with_v: Side, without_v: Side) -> tuple[str, ...]:
    """Sentences a student can check against the figures: each states numbers of the data."""
    sentences = [_loop_sentence(with_v, without_v), _work_sentence(with_v, without_v)]
    sentences += _ownership_sentences(with_v, without_v)
    sentences.append(_bank_sentence(with_v, without_v))
    return tuple(s for s in sentences if s)


def _vthread_text(side: Side) -> str:
    return " and ".join(f"{tag} = {extent}" for tag, extent in side.vthreads.items())


def _loop_sentence(with_v: Side, without_v: Side) -> str:
    loops = [f"{loop.name} (extent {loop.extent})" for loop in with_v.tiling.loops
             if loop.role == "vthread" and loop.extent > 1]
    left = [line for line in with_v.lowered if "vthread" in line]
    removed = ("lowering removes it" if len(loops) == 1 else "lowering removes them") if not left else \
        "it is still in the lowered TIR"
    return (f"With {_vthread_text(with_v)} the scheduled loop nest has a vthread loop {', '.join(loops)} outside the "
            f"real threads; {removed} and writes its body once per virtual thread inside each thread (the lowered "
            f"kernel has {with_v.stores} stores, against {without_v.stores} without vthreads).")


def _work_sentence(with_v: Side, without_v: Side) -> str:
    a, b = with_v.tiling, without_v.tiling
    threads = "×".join(str(v) for v in a.threads.values())
    if (a.threads, a.outputs_per_thread, a.outputs_per_block) == (b.threads, b.outputs_per_thread, b.outputs_per_block):
        return (f"Both sides launch the same {threads} threads per block, each computing {a.outputs_per_thread} "
                f"outputs ({a.outputs_per_block} per block): without vthreads that work is the thread's own loop.")
    return (f"The sides differ in work: thread (0, 0) computes {a.outputs_per_thread} vs {b.outputs_per_thread} "
            f"outputs (a bounds check cuts some iterations), "
            f"{a.outputs_per_block} vs {b.outputs_per_block} per block.")


def _values(cells: np.ndarray, axis: int) -> list[int]:
    return sorted(set(cells[:, axis].tolist())) if len(cells) else []


def _spacing(values: list[int]) -> str:
    """How a thread's rows or columns lie: adjacent, evenly apart, or groups of adjacent ones."""
    if len(values) < 2:
        return "one"
    runs = np.split(np.asarray(values), np.flatnonzero(np.diff(values) != 1) + 1)
    starts = sorted(set(np.diff([run[0] for run in runs]).tolist()))
    if len(runs) == 1:
        return "adjacent"
    if {len(run) for run in runs} == {1} and len(starts) == 1:
        return f"{starts[0]} apart"
    if len({len(run) for run in runs}) == 1 and len(starts) == 1:
        return f"{len(runs)} groups of {len(runs[0])} adjacent, {starts[0]} apart"
    return "gaps of " + ", ".join(map(str, sorted(set(np.diff(values).tolist()))))


def _ownership_sentences(with_v: Side, without_v: Side) -> list[str]:
    out = []
    for axis, noun in enumerate(AXIS_NOUNS):
        mine, plain = _values(with_v.thread_outputs, axis), _values(without_v.thread_outputs, axis)
        if mine == plain:
            continue
        out.append(f"Thread (0, 0) of block 0 computes {noun} {_listed(mine)} ({_spacing(mine)}) with vthreads, "
                   f"{noun} {_listed(plain)} ({_spacing(plain)}) without.")
    if not out:
        out.append(f"Thread (0, 0) of block 0 computes the same outputs of the plane {with_v.tiling.ownership.plane} "
                   f"on both sides: these vthreads split another output dimension.")
    step = [_neighbour_step(side) for side in (with_v, without_v)]
    if None not in step and step[0] != step[1]:
        out.append(f"Its neighbour threadIdx.x = 1, the next lane of the warp, starts {_columns(step[0])} further "
                   f"with vthreads and {_columns(step[1])} without: this is the distance between the addresses "
                   f"neighbouring lanes read.")
    return out


def _columns(count: int) -> str:
    return f"{count} column" if abs(count) == 1 else f"{count} columns"


def _listed(values: list[int]) -> str:
    return ", ".join(map(str, values)) if len(values) <= 8 else f"{values[0]}–{values[-1]}"


def _neighbour_step(side: Side) -> int | None:
    if not len(side.neighbour_outputs) or not len(side.thread_outputs):
        return None
    return int(side.neighbour_outputs[:, 1].min() - side.thread_outputs[:, 1].min())


def _bank_sentence(with_v: Side, without_v: Side) -> str:
    a, b = with_v.shared_load, without_v.shared_load
    if a is None or b is None:
        return ("Neither side reads its operands from shared memory in the compute loop, so the different access "
                "pattern shows in global-memory coalescing, not in bank conflicts." if a is None and b is None else
                "Only one side reads this buffer from shared memory, so their banks cannot be compared.")
    return (f"Warp 0's first load of {a.buffer}: lanes 0 and 1 read {_word_step(a.lanes)} and the "
            f"request is {a.lanes.degree}-way with vthreads; without, {_word_step(b.lanes)} and "
            f"{b.lanes.degree}-way. All loads of {a.buffer} over the launch: {a.conflicts:,} bank conflicts with "
            f"vthreads, {b.conflicts:,} without (at most {a.max_degree}-way vs {b.max_degree}-way).")


def _word_step(lanes: LaneMap) -> str:
    if not (lanes.active[0] and lanes.active[1]):
        return "(one of them is switched off by a guard)"
    words = (lanes.address[1] - lanes.address[0]) // BANK_BYTES
    return "the same word" if words == 0 else f"words {words} apart"
