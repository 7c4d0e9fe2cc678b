"""Global-memory coalescing of every global load and store of a lowered kernel.

A warp's global access is served in 32-byte *sectors*: the lanes' addresses are gathered and
each distinct sector they touch is fetched once (Nsight Compute's
``l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum`` over its requests). The ideal is the
distinct bytes the active lanes ask for, rounded up to sectors: 4 sectors for 32 lanes each
reading a different consecutive float, 1 when every lane reads the same float (broadcast),
16 for 32 float4s. A warp whose lanes read floats 32 apart touches 32 sectors for 4 sectors'
worth of data: 8 times the traffic through L1 and L2.

Addresses are evaluated as the bank model does (explorer.analysis.banks: lanes numbered
threadIdx.x fastest, loops and block indices enumerated, sampled beyond ``ROW_BUDGET`` rows),
on the lowered TIR's ``BufferLoad``/``BufferStore`` of global buffers; copies TVM turns into
``cp.async`` calls are not loads of the TIR and are not counted. Buffers are assumed to start
on a 32-byte boundary (CUDA allocations start on 256 bytes).
"""
from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import numpy as np

from .accesses import KernelAccesses, SharedAccess, global_accesses
from .banks import ROW_BUDGET, SAMPLE_SEED, _AccessModel
from .texpr import Unsupported

SECTOR_BYTES = 32
WORD_BYTES = 4


@dataclass(frozen=True)
class GlobalAccess:
    kernel: str
    buffer: str
    op: str  # "load" | "store"
    text: str
    access_bytes: int  # bytes per lane per instruction (16 for a float4)
    requests: int  # warp-level executions with an active lane, whole launch
    sectors: int  # 32-byte sectors those requests touch
    ideal_sectors: int  # the distinct bytes they ask for, in sectors
    ideal_bytes: int = 0  # the distinct bytes they ask for (4-byte words)
    not_modelled: str = ""

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.requests if self.requests else 0.0

    @property
    def excess(self) -> float:
        """Sectors touched per sector needed (1 = coalesced)."""
        return self.sectors / self.ideal_sectors if self.ideal_sectors else 1.0


@dataclass(frozen=True)
class CoalescingReport:
    accesses: tuple[GlobalAccess, ...]

    def of(self, op: str) -> tuple[GlobalAccess, ...]:
        return tuple(a for a in self.accesses if a.op == op and not a.not_modelled)

    def to_dict(self) -> dict:
        return {"accesses": [{**asdict(a), "sectors_per_request": a.sectors_per_request, "excess": a.excess}
                             for a in self.accesses]}


def request_sectors(words: np.ndarray, active: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Word addresses (…, 32 lanes, words per lane) and activity (…, 32) of requests →
    (sectors touched, ideal sectors, distinct bytes), each shaped like the leading axes. One sort
    of each request's active words serves both counts: a word's sector grows with the word."""
    lead = active.shape[:-1]
    per_lane = words.shape[-1]
    rows = math.prod(lead)
    flat_active = np.repeat(active.reshape(rows, -1), per_lane, axis=1)
    unused = np.iinfo(np.int64).max  # sorts after every address
    ordered = np.sort(np.where(flat_active, words.reshape(rows, -1).astype(np.int64), unused), axis=1)
    used = ordered != unused
    nbytes = _distinct(ordered, used) * WORD_BYTES
    sectors = _distinct(ordered // (SECTOR_BYTES // WORD_BYTES), used)
    return sectors.reshape(lead), (-(-nbytes // SECTOR_BYTES)).reshape(lead), nbytes.reshape(lead)


def _distinct(ordered: np.ndarray, used: np.ndarray) -> np.ndarray:
    """Rows of sorted keys (R × N) → how many distinct keys the ``used`` entries of each row hold."""
    first = used.copy()
    first[:, 1:] &= ordered[:, 1:] != ordered[:, :-1]
    return first.sum(axis=1)


def analyze_global_access(access: SharedAccess, kernel: KernelAccesses, row_budget: int = ROW_BUDGET) -> GlobalAccess:
    base = dict(kernel=access.kernel, buffer=access.buffer, op=access.op, text=access.text,
                access_bytes=access.access_bytes)
    try:
        model = _AccessModel(access, kernel)
    except Unsupported as why:
        return GlobalAccess(**base, requests=0, sectors=0, ideal_sectors=0, not_modelled=f"not modelled: {why}")
    warps = np.arange(kernel.launch.warps_per_block)
    if model.contexts * len(warps) <= row_budget:
        context_ids = np.arange(model.contexts)
    else:
        rng = np.random.default_rng(SAMPLE_SEED)
        context_ids = np.sort(rng.choice(model.contexts, size=max(1, row_budget // len(warps)), replace=False))
    words, active, _ = model.evaluate(context_ids, warps)
    sectors, ideal, nbytes = request_sectors(words, active)
    scale = model.repeats * model.contexts / len(context_ids)
    return GlobalAccess(**base, requests=int(round(active.any(axis=-1).sum() * scale)),
                        sectors=int(round(sectors.sum() * scale)), ideal_sectors=int(round(ideal.sum() * scale)),
                        ideal_bytes=int(round(nbytes.sum() * scale)))


@functools.lru_cache(maxsize=64)
def analyze_coalescing(built, row_budget: int = ROW_BUDGET) -> CoalescingReport:
    """Sectors per global load and store of every kernel of a build (cached per build)."""
    if built.device_mod is None:
        return CoalescingReport(())
    return CoalescingReport(tuple(
        analyze_global_access(access, kernel, row_budget)
        for kernel in global_accesses(built)
        for access in kernel.accesses if not access.duplicate_of
    ))
