"""Shared-memory races of a lowered kernel: a location one thread writes and another thread reads
or writes with nothing between them that orders the two.

Barriers cut a thread's run into *phases*: a thread's phase at an access is the number of block
barriers (``__syncthreads()``) it has passed. Two accesses of one block in different phases are
ordered by the barrier between them; in the same phase they are not, whatever their order in the
program (a thread may run ahead of another up to the next barrier). Lanes of one warp are ordered
also by a ``__syncwarp()`` between them, counted the same way (the *warp phase*); since Volta the
lanes of a warp do not run in lockstep, so nothing else orders them: not ``volatile``, not a shuffle.

The check evaluates, as the bank model does (:mod:`.banks`, :mod:`.texpr`), the address and the
guards of every shared store and of every access in a phase a store may share, for every thread of
the block and every iteration of the loops its address, guards or phase depend on. A loop whose body
has a barrier moves the phase on every iteration, so only neighbouring iterations can meet: such a
loop is evaluated in windows of neighbouring iterations (its first and last ones and some in the
middle). A location is racy when, in one block and one phase, some thread writes it and another
thread of another warp (or of its own warp, in one warp phase) touches it.

:func:`find_races` is the check of one kernel's accesses; :func:`analyze_races` checks every kernel of
a build and names each access's CUDA line (:func:`cuda_lines`).
"""
from __future__ import annotations

import functools
import math
import re
from dataclasses import asdict, dataclass, field

import numpy as np

from ..targets import WARP_SIZE
from .accesses import AXES, KernelAccesses, SharedAccess, kernel_accesses, shared_accesses
from .banks import thread_ids
from .texpr import Unsupported, compile_guarded

ROW_BUDGET = 1 << 20  # (iteration, thread) rows evaluated per access before its iterations are sampled
SAMPLE_SEED = 0
EDGE_ITERATIONS = 3  # of a loop with a barrier, evaluated at its start and at its end
MIDDLE_WINDOWS = 2  # and this many pairs of neighbouring iterations in between
BLOCKS_CHECKED = 3  # the first, the last and the middle block, where an address or a guard reads blockIdx
EXAMPLES = 256  # racy locations looked at for the pairs of accesses they name

ASSUMPTIONS = (
    "A thread's phase is the number of __syncthreads() it has passed; accesses of two threads in the same "
    "phase are unordered. Lanes of one warp are also ordered by a __syncwarp() between them, and by "
    "nothing else: since Volta a warp's lanes need not run in lockstep.",
    "Every thread reaches every barrier (CUDA requires it); a kernel with a __syncthreads() under a "
    "condition, or with mbarriers, is not checked.",
    "A cp.async copy writes its destination when it is issued; a read that comes after a barrier but "
    "before the copy's wait is not seen as a race.",
    "A loop whose body has a barrier is evaluated at its first and last iterations and at pairs of "
    "neighbouring iterations in between; blocks are checked at the first, middle and last blockIdx when "
    "an address or a guard reads it.",
)


@dataclass(frozen=True)
class RaceAccess:
    """One side of a race: the access (the bank model's number; a cp.async copy its own), its CUDA line,
    and the thread and iteration of the example."""

    number: int
    op: str  # "load" | "store" | "copy"
    buffer: str  # the buffer it names (a view of the allocation, for dynamic shared memory)
    text: str
    line: int | None  # line of Build.cuda, from 1; None where it could not be matched
    thread: tuple[int, int, int]  # (threadIdx.x, y, z)
    iteration: dict  # loop name -> value

    @property
    def verb(self) -> str:
        return {"load": "reads", "store": "writes", "copy": "copies into"}[self.op]

    @property
    def label(self) -> str:
        """``#7, CUDA line 123`` (``cp.async #2`` for a copy)."""
        name = f"cp.async #{self.number}" if self.op == "copy" else f"#{self.number}"
        return name + (f", CUDA line {self.line}" if self.line else "")


@dataclass(frozen=True)
class Race:
    """A pair of accesses that race, with one location where they do."""

    kernel: str
    storage: str  # the shared allocation
    write: RaceAccess
    other: RaceAccess
    within_warp: bool  # the two threads are lanes of one warp with no __syncwarp() between them
    element: int  # the element of the write's buffer both touch, in the example
    block: tuple[int, int, int]  # blockIdx of the example
    locations: int  # racy (block, phase, element) found for this pair (estimated where they were many)
    volatile: bool  # the allocation is volatile

    @property
    def lines(self) -> tuple[int, ...]:
        return tuple(sorted({a.line for a in (self.write, self.other) if a.line}))

    def sentence(self) -> str:
        w, o = self.write, self.other
        it = "it" if o.op == "load" else "the same element"
        head = (f"thread {w.thread} {w.verb} {w.buffer}[{self.element}] ({w.label}) and thread {o.thread} {o.verb} "
                f"{it} ({o.label})")
        if self.within_warp:
            why = ("lanes of one warp with no __syncwarp() (nor __syncthreads()) between them: since Volta a warp's "
                   "lanes need not run in lockstep")
            if not self.volatile and "copy" not in (w.op, o.op):
                why += ", and without volatile the compiler may keep the value in a register"
        else:
            why = "no __syncthreads() between them"
        more = f" ({self.locations:,} such locations)" if self.locations > 1 else ""
        return f"{head}: {why}{more}."


@dataclass(frozen=True)
class KernelRaces:
    kernel: str
    races: tuple[Race, ...]
    checked: int  # shared accesses (and copies) checked
    notes: tuple[str, ...] = ()  # what the check could not look at


@dataclass(frozen=True)
class RaceReport:
    kernels: tuple[KernelRaces, ...]
    assumptions: tuple[str, ...] = ASSUMPTIONS
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def races(self) -> tuple[Race, ...]:
        return tuple(r for k in self.kernels for r in k.races)

    @property
    def unchecked(self) -> tuple[str, ...]:
        """What the check could not look at, every kernel's."""
        return tuple(n for k in self.kernels for n in k.notes) + self.notes

    def to_dict(self) -> dict:
        data = asdict(self)
        for kernel, races in zip(data["kernels"], (k.races for k in self.kernels), strict=True):
            for race, original in zip(kernel["races"], races, strict=True):
                race["sentence"] = original.sentence()
        return data


# -- which iterations and blocks ----------------------------------------------------------


def window(extent: int, edge: int = EDGE_ITERATIONS, middle: int = MIDDLE_WINDOWS) -> np.ndarray:
    """Iterations (from 0) of a loop with a barrier in its body that the check evaluates: the first and
    last ``edge``, and ``middle`` pairs of neighbours spread in between (all of them for a short loop).
    Its iterations i and j meet in a phase only when |i - j| <= 1."""
    if extent <= 2 * edge + 2 * middle:
        return np.arange(extent)
    starts = np.linspace(edge, extent - edge - 2, middle + 2)[1:-1].astype(int)
    picked = {*range(edge), *range(extent - edge, extent), *starts, *(starts + 1)}
    return np.array(sorted(picked))


def checked_blocks(grid: tuple[int, int, int], count: int = BLOCKS_CHECKED) -> np.ndarray:
    """Linear block ids (blockIdx.x fastest) checked where an address reads blockIdx: the first, the
    middle and the last."""
    blocks = math.prod(grid)
    return np.unique(np.linspace(0, blocks - 1, min(count, blocks)).astype(int))


# -- one access, every thread ---------------------------------------------------------------


@dataclass
class Rows:
    """The (iteration, thread, element unit) an access touches: one row each."""

    block: np.ndarray
    phase: np.ndarray
    unit: np.ndarray
    thread: np.ndarray  # linear thread id in the block
    warp_phase: np.ndarray
    context: np.ndarray  # index into the access's enumerated iterations
    sampled: bool = False

    def __len__(self) -> int:
        return len(self.unit)


def access_rows(access: SharedAccess, kernel: KernelAccesses, unit_bytes: int, blocks: np.ndarray,
                budget: int = ROW_BUDGET) -> tuple[Rows, list]:
    """Every (iteration, thread) of ``access`` that takes part, as rows of the units (``unit_bytes``
    each) it touches, at the linear block ids ``blocks``; and the enumerated loops (their values) for
    naming an example. Raises Unsupported where an address or a guard cannot be evaluated."""
    launch = kernel.launch
    index, guards, used = compile_guarded(access.index, access.guards, kernel.bindings)
    thread_vars = set(launch.thread_vars.values())
    block_vars = {v: axis for axis, v in launch.block_vars.items()}
    known = thread_vars | set(block_vars) | {loop.var for loop in access.loops}
    unknown = sorted(str(v.name) for v in used if v not in known)
    if unknown:
        raise Unsupported(f"its address uses {', '.join(unknown)}, which the check cannot enumerate")
    enumerated, values = [], []
    for loop in access.loops:
        strides = kernel.phase_strides.get(loop.var, (0, 0))
        if strides[0]:
            enumerated.append(loop)
            values.append(loop.min + window(loop.extent))
        elif loop.var in used or strides[1]:
            enumerated.append(loop)
            values.append(loop.min + np.arange(loop.extent))
    contexts = math.prod(len(v) for v in values)
    threads = launch.warps_per_block * WARP_SIZE
    context_ids = np.arange(contexts)
    sampled = contexts * threads > budget
    if sampled:
        count = max(1, budget // threads)
        context_ids = np.sort(np.random.default_rng(SAMPLE_SEED).choice(contexts, size=count, replace=False))
    picks = np.unravel_index(context_ids, [len(v) for v in values]) if values else ()
    env: dict = {}
    phase = np.full(len(context_ids), access.phase)
    warp_phase = np.full(len(context_ids), access.warp_phase)
    for loop, vals, pick in zip(enumerated, values, picks, strict=True):
        value = vals[pick]
        env[loop.var] = value[:, None]
        block_stride, warp_stride = kernel.phase_strides.get(loop.var, (0, 0))
        phase = phase + block_stride * (value - loop.min)
        warp_phase = warp_phase + warp_stride * (value - loop.min)
    ids = thread_ids(launch, np.arange(launch.warps_per_block))
    for axis, var in launch.thread_vars.items():
        env[var] = ids[axis].reshape(1, -1)
    by_block = [b for b in blocks] if any(v in used for v in block_vars) else [None]
    parts = []
    for block in by_block:
        if block is not None:
            coords = np.unravel_index(block, launch.grid[::-1])[::-1]  # blockIdx.x fastest
            for var, axis in block_vars.items():
                env[var] = np.asarray(coords[AXES.index(axis)])
        shape = (len(context_ids), threads)
        active = np.broadcast_to(ids["valid"].reshape(1, -1), shape)
        for guard, want in guards:
            holds = np.broadcast_to(np.asarray(guard(env)).astype(bool), shape)
            active = active & (holds if want else ~holds)
        element = np.broadcast_to(np.asarray(index(env)).astype(np.int64), shape)
        c, t = np.nonzero(active)
        first = element[c, t] * access.element_bytes // unit_bytes
        span = max(1, access.access_bytes // unit_bytes)
        parts.append((np.full(len(c) * span, -1 if block is None else block), np.repeat(c, span), np.repeat(t, span),
                      (first[:, None] + np.arange(span)).ravel()))
    block_col, c, t, unit = (np.concatenate(cols) for cols in zip(*parts, strict=True))
    rows = Rows(block_col, phase[c], unit, t, warp_phase[c], context_ids[c], sampled)
    return rows, list(zip(enumerated, values, strict=True))


def _phase_set(access: SharedAccess, kernel: KernelAccesses) -> set[int]:
    """The phases ``access`` is made in, over the iterations the check evaluates."""
    phases = np.array([access.phase])
    for loop in access.loops:
        stride = kernel.phase_strides.get(loop.var, (0, 0))[0]
        if stride:
            phases = (phases[:, None] + stride * window(loop.extent)[None, :]).ravel()
    return set(np.unique(phases).tolist())


# -- the racy locations ---------------------------------------------------------------------


def _combined(columns) -> np.ndarray | None:
    """Columns of integers → one int64 per row that sorts as the columns do, first column first (None
    where their ranges do not fit in 62 bits)."""
    key, span = np.zeros(len(columns[0]), dtype=np.int64), 1
    for column in columns:
        low, size = int(column.min()), int(column.max() - column.min()) + 1
        span *= size
        if span >= 1 << 62:
            return None
        key = key * size + (column - low)
    return key


def racing(block, phase, unit, thread, warp_phase, store) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of accesses (one per thread and unit touched) → (order, starts, racy): ``order`` sorts the
    rows by location (block, phase, unit), then warp phase; ``starts`` are the sorted rows where each
    location begins; ``racy[k]`` says whether location k is racy: some thread writes it and another
    touches it, the two in different warps or, in one warp, in one warp phase."""
    n = len(unit)
    if not n:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool)
    columns = [np.asarray(c, dtype=np.int64) for c in (block, phase, unit, warp_phase)]
    location, full = _combined(columns[:3]), _combined(columns)
    if full is not None:
        order = np.argsort(full, kind="stable")
        location, full = location[order], full[order]
        new, new_w = np.ones(n, dtype=bool), np.ones(n, dtype=bool)
        new[1:], new_w[1:] = location[1:] != location[:-1], full[1:] != full[:-1]
    else:  # ranges too wide for one key
        b, p, u, w = columns
        order = np.lexsort((w, u, p, b))
        b, p, u, w = (c[order] for c in (b, p, u, w))
        new = np.ones(n, dtype=bool)
        new[1:] = (b[1:] != b[:-1]) | (p[1:] != p[:-1]) | (u[1:] != u[:-1])
        new_w = new.copy()
        new_w[1:] |= w[1:] != w[:-1]
    t, s = np.asarray(thread)[order], np.asarray(store)[order]
    warp = t // WARP_SIZE
    starts = np.flatnonzero(new)
    written = np.logical_or.reduceat(s, starts)
    racy = written & (np.minimum.reduceat(warp, starts) != np.maximum.reduceat(warp, starts))
    # Lanes of one warp: a write and another thread's access in one warp phase.
    starts_w = np.flatnonzero(new_w)
    threads_differ = np.minimum.reduceat(t, starts_w) != np.maximum.reduceat(t, starts_w)
    in_phase = np.logical_or.reduceat(s, starts_w) & threads_differ
    location_of = np.cumsum(new) - 1
    racy[location_of[starts_w[in_phase]]] = True
    return order, starts, racy


def race_pair(rows: np.ndarray, thread: np.ndarray, warp_phase: np.ndarray, store: np.ndarray):
    """Among ``rows`` (one location's), a write and another thread's access that race: (write row, other
    row, whether the two are lanes of one warp), preferring threads of different warps; None if none."""
    warp = thread // WARP_SIZE
    for i in rows[store[rows]]:
        others = rows[(thread[rows] != thread[i]) & ((warp[rows] != warp[i]) | (warp_phase[rows] == warp_phase[i]))]
        if len(others):
            cross = others[warp[others] != warp[i]]
            j = cross[0] if len(cross) else others[0]
            return int(i), int(j), bool(warp[j] == warp[i])
    return None


def find_races(kernel: KernelAccesses, lines: dict | None = None, budget: int = ROW_BUDGET) -> KernelRaces:
    """The races of one kernel's shared accesses and copies; ``lines`` maps an access's ``order`` to its
    CUDA line (:func:`cuda_lines`)."""
    lines = lines or {}
    name = kernel.launch.kernel
    everything = kernel.accesses + kernel.copies
    if kernel.unordered:
        return KernelRaces(name, (), 0, tuple(f"Races not checked: this kernel has {why}." for why in kernel.unordered))
    notes = [f"Races not checked in a loop whose range is not constant ({why})." for why in kernel.unsupported
             if "non-constant range" in why][:1]
    if any(a.storage < 0 for a in everything):
        notes.append("Races not checked for accesses of shared memory the kernel does not allocate.")
    notes += [f"Races not checked for {why}." for why in kernel.unsupported if why.startswith("a strided vector")]
    for storage_id, calls in sorted(kernel.handed.items()):
        notes.append(f"{kernel.storages[storage_id].name}: its address is handed to {', '.join(sorted(calls))}, "
                     "whose reads and writes of it are not checked.")
    blocks = checked_blocks(kernel.launch.grid)
    races: list[Race] = []
    unchecked = 0
    for storage_id, storage in enumerate(kernel.storages):
        mine = [a for a in everything if a.storage == storage_id]
        writes = [a for a in mine if a.op != "load"]
        if not writes:
            continue
        written = set().union(*(_phase_set(a, kernel) for a in writes))
        mine = [a for a in mine if a.op != "load" or _phase_set(a, kernel) & written]
        unit_bytes = functools.reduce(math.gcd, (a.element_bytes for a in mine))
        evaluated, skipped = [], {}
        for a in mine:
            try:
                evaluated.append((a, *access_rows(a, kernel, unit_bytes, blocks, budget)))
            except Unsupported as why:
                skipped.setdefault(str(why), []).append(f"cp.async #{a.number}" if a.op == "copy" else f"#{a.number}")
        unchecked += sum(len(numbers) for numbers in skipped.values())
        for why, numbers in skipped.items():
            notes.append(f"{storage.name}: {len(numbers)} access(es) not checked ({', '.join(numbers[:6])}"
                         f"{', …' if len(numbers) > 6 else ''}): {why}.")
        if any(rows.sampled for _, rows, _ in evaluated):
            notes.append(f"{storage.name}: some accesses have too many iterations to evaluate every one; a sample "
                         f"of them was checked (seed {SAMPLE_SEED}).")
        races += _races_of(name, storage, evaluated, kernel, unit_bytes, blocks, lines)
    checked = len([a for a in everything if a.storage >= 0]) - unchecked
    return KernelRaces(name, tuple(races), checked, tuple(notes))


def _races_of(kernel_name, storage, evaluated, kernel, unit_bytes, blocks, lines) -> list[Race]:
    """The races among one storage's evaluated accesses, one per pair of accesses, with an example."""
    if not evaluated:
        return []
    parts = []  # (access index, its row numbers, block)
    blockwise = any((r.block >= 0).any() for _, r, _ in evaluated)
    for i, (_, rows, _) in enumerate(evaluated):
        row = np.arange(len(rows))
        if blockwise and len(rows) and (rows.block < 0).all():  # the same in every block checked
            parts += [(i, row, np.full(len(rows), b)) for b in blocks]
        else:
            parts.append((i, row, rows.block))
    which = np.concatenate([np.full(len(row), i) for i, row, _ in parts])
    row_of = np.concatenate([row for _, row, _ in parts])
    block = np.concatenate([b for _, _, b in parts])
    col = {k: np.concatenate([getattr(evaluated[i][1], k)[row] for i, row, _ in parts])
           for k in ("phase", "unit", "thread", "warp_phase")}
    store = np.array([a.op != "load" for a, _, _ in evaluated])[which]
    order, starts, racy = racing(block, col["phase"], col["unit"], col["thread"], col["warp_phase"], store)
    if not racy.any():
        return []
    ends = np.append(starts[1:], len(order))
    t, w, s = col["thread"][order], col["warp_phase"][order], store[order]
    racy_locations = np.flatnonzero(racy)
    picks = racy_locations if len(racy_locations) <= EXAMPLES else \
        racy_locations[np.linspace(0, len(racy_locations) - 1, EXAMPLES).astype(int)]
    found: dict = {}  # (write access, other access) -> [(write row, other row), within a warp, locations seen]
    for k in picks.tolist():
        pair = race_pair(np.arange(starts[k], ends[k]), t, w, s)
        if pair is None:
            continue
        i, j, within = (int(order[pair[0]]), int(order[pair[1]]), pair[2])
        key = (int(which[i]), int(which[j]))
        if key in found:
            found[key][2] += 1
        else:
            found[key] = [(i, j), within, 1]
    scale = len(racy_locations) / len(picks)
    ids = thread_ids(kernel.launch, np.arange(kernel.launch.warps_per_block))
    out = []
    for (wi, oi), ((i, j), within, seen) in found.items():
        write, other = evaluated[wi], evaluated[oi]
        coords = np.unravel_index(max(int(block[i]), 0), kernel.launch.grid[::-1])[::-1]
        out.append(Race(kernel_name, storage.name, _side(*write, int(row_of[i]), ids, lines),
                        _side(*other, int(row_of[j]), ids, lines), within,
                        int(col["unit"][i]) * unit_bytes // write[0].element_bytes, tuple(int(c) for c in coords),
                        max(1, round(seen * scale)), storage.volatile))
    return out


def _side(access: SharedAccess, rows: Rows, loops: list, row: int, ids: dict, lines: dict) -> RaceAccess:
    warp, lane = divmod(int(rows.thread[row]), WARP_SIZE)
    thread = tuple(int(ids[a][warp, lane]) for a in AXES)
    iteration = {}
    if loops:
        picks = np.unravel_index(int(rows.context[row]), [len(v) for _, v in loops])
        iteration = {loop.name: int(v[k]) for (loop, v), k in zip(loops, picks, strict=True)}
    return RaceAccess(access.number, access.op, access.buffer, access.text, lines.get(access.order), thread,
                      iteration)


# -- CUDA lines ------------------------------------------------------------------------------

_SHARED_DECLARATION = re.compile(r"__shared__[^;]*?\b(\w+)\s*\[[^\]]*\]\s*;")


def kernel_body(cuda: str, kernel: str) -> tuple[int, list[str]]:
    """(number of its first line, from 1; its lines) of ``kernel``'s definition in the CUDA source."""
    lines = cuda.splitlines()
    head = re.compile(rf'^extern "C" __global__ .*\b{re.escape(kernel)}\(.*\)\s*{{\s*$')
    for i, line in enumerate(lines):
        if head.match(line):
            for j in range(i + 1, len(lines)):
                if lines[j] == "}":
                    return i + 1, lines[i:j + 1]
    return 0, []


def cuda_lines(cuda: str, kernel: KernelAccesses) -> dict[int, int]:
    """An access's ``order`` → its line of ``cuda``. Each shared allocation is matched to its
    declaration (in program order, as TVM's code generation writes them), then its accesses to the
    lines that name it, in order: one name per access, or else one line per TIR statement (a vector
    expression's lanes name it several times); an allocation matched neither way gets no lines
    (nothing is guessed)."""
    start, body = kernel_body(cuda, kernel.launch.kernel)
    declared = [(i, m.group(1)) for i, line in enumerate(body) for m in [_SHARED_DECLARATION.search(line)] if m]
    if len(declared) != len(kernel.storages):
        return {}
    out = {}
    everything = sorted(kernel.accesses + kernel.copies, key=lambda a: a.order)
    for storage_id, (declared_at, name) in enumerate(declared):
        token = re.compile(rf"\b{re.escape(name)}\b")
        named = [start + i for i, line in enumerate(body) if i != declared_at for _ in token.finditer(line)]
        mine = [a for a in everything if a.storage == storage_id]
        statements = list(dict.fromkeys(a.statement for a in mine))
        lines = list(dict.fromkeys(named))
        if len(named) == len(mine):
            out.update({a.order: line for a, line in zip(mine, named, strict=True)})
        elif len(lines) == len(statements):
            line_of = dict(zip(statements, lines, strict=True))
            out.update({a.order: line_of[a.statement] for a in mine})
    return out


# -- a build ---------------------------------------------------------------------------------


def races_of(device_mod, cuda: str = "", budget: int = ROW_BUDGET, kernels=None) -> RaceReport:
    """The race report of a lowered device module (or of its ``kernels``' accesses, where they were
    collected already) and its CUDA (for the lines)."""
    kernels = kernel_accesses(device_mod) if kernels is None else kernels
    return RaceReport(tuple(find_races(k, cuda_lines(cuda, k) if cuda else {}, budget) for k in kernels))


@functools.lru_cache(maxsize=64)
def analyze_races(built) -> RaceReport:
    """The race report of a :class:`~explorer.build.Build` (cached per build)."""
    if built.device_mod is None:
        return RaceReport((), notes=("A CPU build has no shared memory.",))
    return races_of(built.device_mod, built.cuda, kernels=shared_accesses(built))


def format_races(report: RaceReport, races: bool = True, assumptions: bool = True) -> str:
    """The report as text: each kernel's races (or how many accesses were checked) and what was not
    checked, then the check's assumptions."""
    lines = []
    for k in report.kernels if races else ():
        if k.races:
            lines.append(f"kernel {k.kernel}: {len(k.races)} shared-memory race(s): the result is wrong")
            lines.extend(f"  - {r.sentence()}" for r in k.races)
        else:
            lines.append(f"kernel {k.kernel}: no shared-memory race among {k.checked} accesses checked")
        lines.extend(f"  {n}" for n in k.notes)
    lines.extend(report.notes if races else ())
    if assumptions:
        lines.append("Race check assumptions:")
        lines.extend(f"  - {a}" for a in report.assumptions)
    return "\n".join(lines)

