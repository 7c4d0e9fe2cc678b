"""Shared-memory bank conflicts of every shared load and store of a lowered kernel.

For each access the flattened index is evaluated for the 32 lanes of each warp (lane =
linear thread id mod 32, threadIdx.x fastest, then y, then z) over the enclosing loops
(and the block indices where the address or a guard uses them). Each warp-wide
instruction is one *request*; shared memory serves it in *wavefronts*: per phase of lanes
(all 32 lanes for accesses of up to 4 bytes, 16 lanes for 8-byte and 8 lanes for 16-byte
accesses), one wavefront per distinct 4-byte word in the busiest of the 32 banks; lanes
reading the same word share it (broadcast). Conflicts are wavefronts beyond the ideal
one per phase — the unit of Nsight Compute's
``l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{ld,st}.sum`` summed over all warps of
the launch.

When an access's iteration space × warps exceeds ``ROW_BUDGET`` rows, a uniform random
sample (fixed seed) of that many rows is evaluated and the counts are scaled up; the
result says so.

Shared tiles that no thread loads or stores (written by TMA, read by wgmma through descriptors:
:mod:`.tiles`) have no such accesses: for those the model evaluates their swizzle instead, on one
8 × 16-byte core matrix (the unit wgmma reads an operand in, PTX ISA "Matrix Descriptor Format"),
and says in :func:`headline` that their reads and writes are not counted.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import asdict, dataclass, field

import numpy as np
from tvm import tirx
from tvm_ffi import StructuralKey

from ..build import LaunchShape
from ..errors import ExplorerError
from ..targets import BANK_BYTES, BANKS, WARP_SIZE
from ..units import byte_size, count
from .accesses import AXES, KernelAccesses, Launch, SharedAccess, guard_key, shared_accesses
from .texpr import Unsupported, compile_guarded
from .tiles import CHUNK_BYTES, SharedTile, shared_tiles, swizzled

WAVEFRONT_BYTES = BANKS * BANK_BYTES  # 128 bytes served per wavefront
ROW_BUDGET = 4096  # (iteration, warp) rows evaluated per access before sampling
SAMPLE_SEED = 0
CORE_MATRIX_ROWS = 8  # a wgmma core matrix: 8 rows of 16 bytes

ASSUMPTIONS = (
    "32 banks of 4 bytes; per request, one wavefront per distinct 4-byte word in the busiest bank; "
    "lanes reading the same word are served together (broadcast).",
    "Lanes are numbered threadIdx.x fastest, then y, then z; warps are 32 consecutive lanes. "
    "Lanes switched off by a guard, and the missing lanes of a partial warp, make no request; a warp "
    "with no active lane makes none.",
    "Each load/store in the lowered TIR is one instruction per warp per execution. 8- and 16-byte "
    "accesses (TVM vector types) are served in 2 or 4 phases of 16 or 8 lanes, so their ideal is 2 or 4 "
    "wavefronts; conflicts = wavefronts − ideal wavefronts, Nsight Compute's unit.",
    "This counts the TIR's accesses. The CUDA compiler also unrolls loops, keeps a loaded value in a register "
    "across unrolled iterations, hoists loop-invariant loads and merges neighbouring accesses into 8/16-byte "
    "ones; here only identical loads in one loop body (no barrier or store between) are counted once. "
    "explorer.analysis.compiled models the instructions nvcc emits (bench/bank_conflicts_gpu.py).",
)


@dataclass(frozen=True)
class LaneMap:
    """Where the 32 lanes of one warp go in one execution of an access."""

    warp: int
    iteration: dict  # loop/block variable name -> value
    lane: tuple[int, ...]
    thread: tuple[tuple[int, int, int], ...]  # (threadIdx.x, y, z)
    active: tuple[bool, ...]
    element: tuple[int, ...]  # flattened element index (first element for a vector)
    address: tuple[int, ...]  # byte address in the shared buffer
    bank: tuple[int, ...]  # bank of the first word
    words: int  # 4-byte words per lane
    wavefronts: int
    degree: int  # n-way: the most distinct words any bank serves in one phase


@dataclass(frozen=True)
class AccessConflicts:
    number: int
    kernel: str
    buffer: str
    op: str  # "load" | "store"
    text: str
    access_bytes: int
    requests: int  # warp-level executions with at least one active lane, whole launch
    wavefronts: int
    ideal_wavefronts: int
    conflicts: int
    max_degree: int
    mean_degree: float
    rows_evaluated: int  # (iteration, warp) pairs evaluated
    rows_total: int  # (iteration, warp) pairs of one block's distinct patterns
    lane_map: LaneMap | None
    duplicate_of: int | None = None
    not_modelled: str = ""  # why the access could not be evaluated

    @property
    def sampled(self) -> bool:
        return self.rows_evaluated < self.rows_total

    @property
    def wavefronts_per_request(self) -> float:
        return self.wavefronts / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class BankTotals:
    requests: int = 0
    wavefronts: int = 0
    conflicts: int = 0


@dataclass(frozen=True)
class KernelBanks(LaunchShape):
    kernel: str
    block: tuple[int, int, int]
    grid: tuple[int, int, int]
    accesses: tuple[AccessConflicts, ...]
    loads: BankTotals
    stores: BankTotals
    notes: tuple[str, ...] = ()
    tiles: tuple[SharedTile, ...] = ()  # shared buffers of TMA, wgmma and mbarriers, which no access shows

    @property
    def not_modelled(self) -> tuple[AccessConflicts, ...]:
        return tuple(a for a in self.accesses if a.not_modelled)


@dataclass(frozen=True)
class BankReport:
    kernels: tuple[KernelBanks, ...]
    assumptions: tuple[str, ...] = ASSUMPTIONS
    notes: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return asdict(self)

    def access(self, kernel: str, number: int) -> AccessConflicts:
        for k in self.kernels:
            for a in k.accesses:
                if k.kernel == kernel and a.number == number:
                    return a
        raise ExplorerError(f"Kernel '{kernel}' has no shared access #{number}.")


# -- the model -------------------------------------------------------------------------


def bank_degrees(words: np.ndarray, active: np.ndarray) -> np.ndarray:
    """Rows of word addresses (R × N) → the most distinct active words in one bank, per row
    (0 for a row with no active lane). Equal words count once (broadcast)."""
    rows, n = words.shape
    sentinel = np.iinfo(np.int64).max
    keyed = np.sort(np.where(active, words.astype(np.int64), sentinel), axis=1)
    distinct = keyed != sentinel
    distinct[:, 1:] &= keyed[:, 1:] != keyed[:, :-1]
    slot = np.arange(rows)[:, None] * BANKS + np.mod(keyed, BANKS)
    counts = np.bincount(slot[distinct], minlength=rows * BANKS).reshape(rows, BANKS)
    return counts.max(axis=1)


def request_wavefronts(words: np.ndarray, active: np.ndarray, access_bytes: int):
    """Words (…, 32 lanes, words per lane) and lane activity (…, 32) of requests →
    (wavefronts, ideal wavefronts, n-way degree), each shaped like the leading axes."""
    lead = active.shape[:-1]
    per_lane = words.shape[-1]
    phases = max(1, access_bytes * WARP_SIZE // WAVEFRONT_BYTES) if access_bytes >= BANK_BYTES else 1
    lanes_per_phase = WARP_SIZE // phases
    rows = math.prod(lead) * phases
    phase_words = words.reshape(rows, lanes_per_phase * per_lane)
    phase_active = np.repeat(active.reshape(rows, lanes_per_phase), per_lane, axis=1)
    degree = bank_degrees(phase_words, phase_active).reshape(*lead, phases)
    return degree.sum(axis=-1), (degree > 0).sum(axis=-1), degree.max(axis=-1)


def thread_ids(launch: Launch, warps) -> dict:
    """threadIdx values of lanes: arrays shaped (len(warps), 32) per axis, plus 'valid'."""
    linear = np.asarray(warps)[:, None] * WARP_SIZE + np.arange(WARP_SIZE)[None, :]
    bx, by, _ = launch.block
    return {
        "x": linear % bx,
        "y": (linear // bx) % by,
        "z": linear // (bx * by),
        "valid": linear < launch.threads_per_block,
    }


class _AccessModel:
    """Evaluates one access: which variables it uses and their enumeration."""

    def __init__(self, access: SharedAccess, kernel: KernelAccesses):
        self.access = access
        self.launch = kernel.launch
        self.index, self.guards, used = compile_guarded(access.index, access.guards, kernel.bindings)
        thread_vars = set(self.launch.thread_vars.values())
        candidates = list(access.loops) + self.launch.block_loops()
        self.varying = [loop for loop in candidates if loop.var in used]
        known = thread_vars | {loop.var for loop in candidates}
        unknown = [v.name for v in used if v not in known]
        if unknown:
            raise Unsupported(f"its index uses {', '.join(sorted(unknown))}, which the model cannot enumerate")
        # Loops and block indices the access does not use only repeat the same requests.
        self.repeats = math.prod(loop.extent for loop in candidates if loop.var not in used)
        self.contexts = math.prod(loop.extent for loop in self.varying)

    def evaluate(self, context_ids: np.ndarray, warps) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Word addresses (C, W, 32, words), activity (C, W, 32) and element indices (C, W, 32)."""
        env = {}
        if self.varying:
            values = np.unravel_index(context_ids, [loop.extent for loop in self.varying])
            for loop, value in zip(self.varying, values, strict=False):
                env[loop.var] = (value + loop.min)[:, None, None]
        ids = thread_ids(self.launch, warps)
        for axis, var in self.launch.thread_vars.items():
            env[var] = ids[axis][None]
        shape = (len(context_ids), len(warps), WARP_SIZE)
        active = np.broadcast_to(ids["valid"][None], shape)
        for guard, want in self.guards:
            holds = np.asarray(guard(env)).astype(bool)
            active = active & (holds if want else ~holds)
        element = np.broadcast_to(np.asarray(self.index(env)).astype(np.int64), shape)
        byte = element * self.access.element_bytes
        words_per_lane = max(1, self.access.access_bytes // BANK_BYTES)
        words = byte[..., None] // BANK_BYTES + np.arange(words_per_lane)
        return words, np.broadcast_to(active, shape), element

    def context_of(self, context_id: int) -> dict:
        if not self.varying:
            return {}
        values = np.unravel_index(context_id, [loop.extent for loop in self.varying])
        return {loop.name: int(v) + loop.min for loop, v in zip(self.varying, values, strict=False)}

    def context_id(self, iteration: dict) -> int:
        if not self.varying:
            return 0
        values = [int(iteration.get(loop.name, loop.min)) - loop.min for loop in self.varying]
        for loop, v in zip(self.varying, values, strict=False):
            if not 0 <= v < loop.extent:
                raise ExplorerError(f"Loop '{loop.name}' runs from {loop.min} to {loop.min + loop.extent - 1}, "
                                    f"not {v + loop.min}.")
        return int(np.ravel_multi_index(values, [loop.extent for loop in self.varying]))


def analyze_access(access: SharedAccess, kernel: KernelAccesses, row_budget: int = ROW_BUDGET,
                   warp: int = 0, iteration: dict | None = None) -> AccessConflicts:
    base = dict(number=access.number, kernel=access.kernel, buffer=access.buffer, op=access.op, text=access.text,
                access_bytes=access.access_bytes)
    try:
        model = _AccessModel(access, kernel)
    except Unsupported as why:
        return AccessConflicts(**base, requests=0, wavefronts=0, ideal_wavefronts=0, conflicts=0, max_degree=0,
                               mean_degree=0.0, rows_evaluated=0, rows_total=0, lane_map=None,
                               not_modelled=f"not modelled: {why}")
    warps = np.arange(kernel.launch.warps_per_block)
    rows_total = model.contexts * len(warps)
    if rows_total <= row_budget:
        context_ids = np.arange(model.contexts)
    else:
        rng = np.random.default_rng(SAMPLE_SEED)
        count = max(1, row_budget // len(warps))
        context_ids = np.sort(rng.choice(model.contexts, size=count, replace=False))
    words, active, element = model.evaluate(context_ids, warps)
    wavefronts, ideal, degree = request_wavefronts(words, active, access.access_bytes)
    requested = active.any(axis=-1)
    scale = model.repeats * model.contexts / len(context_ids)
    requests = int(round(requested.sum() * scale))
    total_wavefronts = int(round(wavefronts.sum() * scale))
    total_ideal = int(round(ideal.sum() * scale))
    lane_map = _lane_map(model, warp, iteration, context_ids, (words, active, element, wavefronts, degree))
    return AccessConflicts(
        **base,
        requests=requests,
        wavefronts=total_wavefronts,
        ideal_wavefronts=total_ideal,
        conflicts=total_wavefronts - total_ideal,
        max_degree=int(degree.max()) if degree.size else 0,
        mean_degree=float(degree[requested].mean()) if requested.any() else 0.0,
        rows_evaluated=len(context_ids) * len(warps),
        rows_total=rows_total,
        lane_map=lane_map,
    )


def _lane_map(model: _AccessModel, warp: int, iteration: dict | None, context_ids, evaluated) -> LaneMap:
    launch = model.launch
    if not 0 <= warp < launch.warps_per_block:
        raise ExplorerError(f"A block of {launch.threads_per_block} threads has warps "
                            f"0–{launch.warps_per_block - 1}, not {warp}.")
    words, active, element, wavefronts, degree = evaluated
    if iteration is None:  # the first evaluated iteration in which this warp takes part
        hits = np.flatnonzero(active[:, warp].any(axis=-1))
        row = int(hits[0]) if hits.size else 0
    else:
        context = model.context_id(iteration)
        found = np.flatnonzero(context_ids == context)
        if found.size:
            row = int(found[0])
        else:  # an iteration outside the sample: evaluate it alone
            context_ids = np.array([context])
            words, active, element = model.evaluate(context_ids, np.arange(launch.warps_per_block))
            wavefronts, _, degree = request_wavefronts(words, active, model.access.access_bytes)
            row = 0
    ids = thread_ids(launch, np.array([warp]))
    lane_element = element[row, warp]
    return LaneMap(
        warp=warp,
        iteration=model.context_of(int(context_ids[row])),
        lane=tuple(range(WARP_SIZE)),
        thread=tuple(zip(*(ids[a][0].tolist() for a in AXES), strict=False)),
        active=tuple(bool(v) for v in active[row, warp]),
        element=tuple(int(v) for v in lane_element),
        address=tuple(int(v) * model.access.element_bytes for v in lane_element),
        bank=tuple(int(w) % BANKS for w in words[row, warp, :, 0]),
        words=int(words.shape[-1]),
        wavefronts=int(wavefronts[row, warp]),
        degree=int(degree[row, warp]),
    )


def split_constant(index) -> tuple[object, int]:
    """``base + c`` → (base, c): the constant added last (TVM's canonical form puts it there)."""
    constant = 0
    while True:
        if isinstance(index, tirx.Add) and isinstance(index.b, tirx.IntImm):
            constant, index = constant + int(index.b.value), index.a
        elif isinstance(index, tirx.Sub) and isinstance(index.b, tirx.IntImm):
            constant, index = constant - int(index.b.value), index.a
        else:
            return index, constant


def analyze_kernel(kernel: KernelAccesses, row_budget: int = ROW_BUDGET, tiles: tuple[SharedTile, ...] = ()
                   ) -> KernelBanks:
    # Accesses whose addresses differ by a constant number of 4-byte words (same loops and
    # guards) see the banks rotated, so their counts are equal: evaluate one of them.
    results = []
    evaluated: dict = {}
    for access in kernel.accesses:
        base, constant = split_constant(access.index)
        key = (access.op, StructuralKey(base), access.lanes, access.element_bytes, tuple(l.var for l in access.loops),
               guard_key(access.guards))
        known = evaluated.get(key)
        if known is not None and (constant - known[1]) * access.element_bytes % BANK_BYTES == 0:
            results.append(_shifted(known[0], access, constant - known[1]))
            continue
        result = analyze_access(access, kernel, row_budget)
        evaluated.setdefault(key, (result, constant))
        results.append(_counted(result, access))
    results = tuple(results)
    totals = {}
    for op in ("load", "store"):
        mine = [r for r in results if r.op == op]
        totals[op] = BankTotals(sum(r.requests for r in mine), sum(r.wavefronts for r in mine),
                                sum(r.conflicts for r in mine))
    notes = tuple(f"not modelled: {why}" for why in kernel.unsupported)
    launch = kernel.launch
    return KernelBanks(launch.kernel, launch.block, launch.grid, results, totals["load"], totals["store"], notes,
                       tuple(_with_ways(t) for t in tiles))


def core_matrix_ways(row_bytes: int, swizzle: bool = True) -> int:
    """The worst n-way over the 16-byte columns of a tile whose rows are ``row_bytes`` apart (1024-byte
    aligned, as TMA and wgmma want), when the 8 rows × 16 bytes of one core matrix are read together: one
    request of 128 bytes, ideally one wavefront. ``swizzle``: the rows as TMA writes them (tiles.swizzled)."""
    rows = np.arange(CORE_MATRIX_ROWS)[:, None] * row_bytes
    worst = 0
    for chunk in range(row_bytes // CHUNK_BYTES):
        address = rows + chunk * CHUNK_BYTES
        if swizzle:
            address = swizzled(address, row_bytes)
        words = (address // BANK_BYTES + np.arange(CHUNK_BYTES // BANK_BYTES)).reshape(1, -1)
        worst = max(worst, int(bank_degrees(words, np.ones_like(words, dtype=bool))[0]))
    return worst


def _with_ways(tile: SharedTile) -> SharedTile:
    if tile.swizzle_bytes is None:
        return tile
    return dataclasses.replace(tile, core_matrix_ways=core_matrix_ways(tile.swizzle_bytes),
                               unswizzled_ways=core_matrix_ways(tile.swizzle_bytes, swizzle=False))


def _counted(result: AccessConflicts, access: SharedAccess) -> AccessConflicts:
    """A load the compiler takes from an identical earlier one makes no request."""
    if not access.duplicate_of:
        return result
    return dataclasses.replace(result, duplicate_of=access.duplicate_of, requests=0, wavefronts=0,
                               ideal_wavefronts=0, conflicts=0)


def _shifted(result: AccessConflicts, access: SharedAccess, delta: int) -> AccessConflicts:
    """``result`` for an access ``delta`` elements further on."""
    shift = delta * access.element_bytes
    lanes = result.lane_map
    if lanes is not None:
        lanes = dataclasses.replace(
            lanes,
            element=tuple(e + delta for e in lanes.element),
            address=tuple(a + shift for a in lanes.address),
            bank=tuple((b + shift // BANK_BYTES) % BANKS for b in lanes.bank),
        )
    moved = dataclasses.replace(result, number=access.number, buffer=access.buffer, text=access.text,
                                lane_map=lanes, duplicate_of=None)
    return _counted(moved, access)


@functools.lru_cache(maxsize=64)
def analyze_banks(built, row_budget: int = ROW_BUDGET) -> BankReport:
    """The bank-conflict report of a :class:`~explorer.build.Build` (cached per build)."""
    if built.device_mod is None:
        return BankReport((), notes=("A CPU build has no shared memory.",))
    tiles = shared_tiles(built.device_mod)
    kernels = tuple(analyze_kernel(k, row_budget, tiles.get(k.launch.kernel, ())) for k in shared_accesses(built))
    sampled = [f"{k.kernel} #{a.number}" for k in kernels for a in k.accesses if a.sampled]
    notes = ()
    if sampled:
        notes = (f"Sampled {row_budget} (iteration, warp) rows per access (seed {SAMPLE_SEED}) for "
                 f"{', '.join(sampled)}; their counts are scaled estimates.",)
    return BankReport(kernels, notes=notes)


def lane_map(built, kernel: str, number: int, warp: int = 0, iteration: dict | None = None) -> LaneMap:
    """The lane → bank map of one access for a chosen warp and iteration."""
    for k in shared_accesses(built):
        if k.launch.kernel == kernel:
            for access in k.accesses:
                if access.number == number:
                    result = analyze_access(access, k, warp=warp, iteration=iteration)
                    if result.lane_map is None:
                        raise ExplorerError(f"Access #{number} of {kernel} is {result.not_modelled}.")
                    return result.lane_map
    raise ExplorerError(f"Kernel '{kernel}' has no shared access #{number}.")


# -- text ------------------------------------------------------------------------------


def headline(k: KernelBanks) -> str:
    """What the model finds in one kernel's shared memory, in plain words: its conflicts over the accesses
    it evaluates, and what it does not count (accesses it cannot evaluate, tiles no thread loads or stores)."""
    modelled = [a for a in k.accesses if not a.not_modelled]
    skipped = len(k.accesses) - len(modelled)
    tiles = [t for t in k.tiles if t.role == "tile"]
    parts = []
    if modelled:
        parts.append(f"{k.loads.conflicts:,} load and {k.stores.conflicts:,} store conflicts over the "
                     + (f"{count(len(modelled), 'shared access', 'shared accesses')} the model evaluates"
                        if skipped else f"kernel's {count(len(modelled), 'shared access', 'shared accesses')}"))
    if skipped:
        parts.append(f"{count(skipped, 'access', 'accesses')} it cannot evaluate "
                     f"{'is' if skipped == 1 else 'are'} not counted (the note says why)")
    if tiles:
        names = ", ".join(t.buffer for t in tiles)
        size = byte_size(sum(t.bytes for t in tiles))
        who = "no thread loads or stores shared memory: " if not k.accesses else ""
        parts.append(f"{who}the TMA unit writes {names} ({size}) and wgmma reads {'it' if len(tiles) == 1 else 'them'} "
                     "through descriptors, which the model does not count")
        swizzles = sorted({(t.swizzle_bytes, t.core_matrix_ways, t.unswizzled_ways) for t in tiles if t.swizzle_bytes})
        for row_bytes, ways, unswizzled in swizzles:
            parts.append(f"under their {row_bytes}-byte swizzle an 8 × 16-byte core matrix is {ways}-way "
                         f"({unswizzled}-way without it)")
    if not parts:
        return f"{k.kernel}: no shared memory, so no bank conflicts."
    return f"{k.kernel}: " + "; ".join(parts) + "."


def format_report(report: BankReport) -> str:
    lines = []
    for k in report.kernels:
        lines.append(f"kernel {k.kernel}: grid {k.grid}, block {k.block}")
        lines.append(f"  {headline(k)}")
        for t in k.tiles:
            uses = ", ".join(part for part in (
                count(t.tma_copies, "TMA copy", "TMA copies") if t.tma_copies else "",
                count(t.descriptors, "wgmma descriptor") if t.descriptors else "",
                count(t.barrier_uses, "mbarrier instruction") if t.barrier_uses else "") if part)
            swizzle = (f"; {t.swizzle_bytes}-byte swizzle: a core matrix {t.core_matrix_ways}-way "
                       f"({t.unswizzled_ways}-way unswizzled)" if t.swizzle_bytes else "")
            what = f"tile {t.buffer} ({t.dtype}" if t.role == "tile" else \
                f"{count(t.bytes // 8, 'mbarrier')} {t.buffer} ({t.dtype}"
            lines.append(f"  {what}, {t.bytes:,} B): {uses} in the code{swizzle}")
        if not k.accesses:
            lines.append("  no shared-memory accesses")
        for a in k.accesses:
            head = f"  #{a.number:<3} {a.op:<5} {a.text}"
            if a.not_modelled:
                lines.append(f"{head}\n        {a.not_modelled}")
                continue
            sample = f", sampled {a.rows_evaluated}/{a.rows_total} rows" if a.sampled else ""
            reuse = f", counted 0: reuses the value of #{a.duplicate_of}" if a.duplicate_of else ""
            lines.append(
                f"{head}\n        {a.access_bytes} B/lane, {a.max_degree}-way max, {a.mean_degree:.2f} mean, "
                f"{a.wavefronts_per_request:.2f} wavefronts/request, {a.requests:,} requests, "
                f"{a.conflicts:,} conflicts{sample}{reuse}"
            )
        for name, t in (("loads", k.loads), ("stores", k.stores)):
            lines.append(f"  total {name}: {t.requests:,} requests, {t.wavefronts:,} wavefronts, "
                         f"{t.conflicts:,} conflicts")
        lines.extend(f"  {n}" for n in k.notes)
    lines.extend(report.notes)
    lines.append("Assumptions:")
    lines.extend(f"  - {a}" for a in report.assumptions)
    return "\n".join(lines)
