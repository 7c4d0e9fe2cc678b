"""The shared-memory tree of the written sum (template ``reduce_tree``), step by step: at each
step size s, which threads add, how many warps sit idle or diverge, the bank conflicts of the
step's shared-memory accesses and the barrier that ends it (Harris's kernels 1–7).

Derived from the addressing formulas the template writes, not from the build: thread tid of a
block adds ``sdata[tid + s]`` into ``sdata[tid]`` where ``tid % 2s == 0`` (interleaved_divergent),
``sdata[2·s·tid + s]`` into ``sdata[2·s·tid]`` where ``2·s·tid < threads`` (interleaved_strided), or
``sdata[tid + s]`` into ``sdata[tid]`` where ``tid < s`` (sequential). Bank ways use the bank model's
own count (:func:`explorer.analysis.banks.bank_degrees`); ``tests/test_analysis_tree.py`` checks
them against that model's reading of the built kernel. Both kernels of the sum run this tree in
blocks of the same size, so one table serves both.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from ..schedules.reduce_tree import ReduceTreeKnobs, check_knobs, tree_steps
from ..targets import WARP_SIZE
from ..workloads import DTYPE
from .banks import BANK_BYTES, bank_degrees

TEMPLATE = "reduce_tree"
NOT_APPLICABLE = (f"The step-by-step tree describes the shared-memory tree that the {TEMPLATE} template writes "
                  "out; this template writes none.")

# The stages of a step: the block-wide loop, and the two ways the first warp ends it (last_warp).
LOOP, UNROLLED, SHUFFLE = "tree", "last warp, unrolled", "last warp, shuffle"
BARRIERS = {LOOP: "__syncthreads()", UNROLLED: "__syncwarp()", SHUFFLE: "none"}
WORD_ELEMENTS = BANK_BYTES // np.dtype(DTYPE).itemsize  # sdata's elements per 4-byte bank word


@dataclass(frozen=True)
class TreeStep:
    s: int  # the step size: a thread adds the value s elements (or lanes) away
    stage: str  # LOOP, UNROLLED or SHUFFLE
    barrier: str  # what the threads wait at after the step
    active_threads: int  # threads that execute the add
    needed_threads: int  # of those, the threads whose sum a later step reads (the rest add values no one reads)
    idle_threads: int
    idle_warps: int  # warps with no active lane
    divergent_warps: int  # warps with some lanes active and some not
    bank_ways: int | None  # the most distinct words one bank serves in any warp's access; None: no shared memory

    @property
    def warps(self) -> int:
        return (self.active_threads + self.idle_threads) // WARP_SIZE


@dataclass(frozen=True)
class TreeReport:
    threads: int
    addressing: str
    last_warp: str
    steps: tuple[TreeStep, ...]

    @property
    def warps(self) -> int:
        return self.threads // WARP_SIZE

    @property
    def worst_bank_ways(self) -> int:
        return max((s.bank_ways for s in self.steps if s.bank_ways is not None), default=0)

    def to_dict(self) -> dict:
        return asdict(self)


# -- the formulas ------------------------------------------------------------------------


def loop_step(addressing: str, threads: int, s: int) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """One step of the block-wide loop: which threads add (bool per tid) and the sdata index of
    each of the step's accesses per tid (read, read, write)."""
    tid = np.arange(threads)
    if addressing == "interleaved_divergent":
        return tid % (2 * s) == 0, (tid, tid + s, tid)
    if addressing == "interleaved_strided":
        index = 2 * s * tid
        return index < threads, (index, index + s, index)
    return tid < s, (tid, tid + s, tid)


def last_warp_steps(last_warp: str, threads: int) -> list[tuple[int, str, np.ndarray, tuple[np.ndarray, ...]]]:
    """The first warp's steps once 64 sums remain: (s, stage, active, accesses), as the template
    writes them. Every lane of the warp adds at each step (no ``if tid < s``)."""
    if last_warp == "tree":
        return []
    tid = np.arange(threads)
    first_warp = tid < WARP_SIZE
    sizes = [WARP_SIZE >> j for j in range(6)]  # 32, 16, … 1
    if last_warp == "unrolled":  # a register keeps the running sum: read sdata[tid] once, then tid + s, write tid
        return [(s, UNROLLED, first_warp, ((tid, tid + s, tid) if s == WARP_SIZE else (tid + s, tid)))
                for s in sizes]
    # shuffle: one step of two shared loads into a register, then five shuffles in registers
    return [(WARP_SIZE, SHUFFLE, first_warp, (tid, tid + WARP_SIZE))] + [(s, SHUFFLE, first_warp, ())
                                                                         for s in sizes[1:]]


def warp_states(active: np.ndarray) -> tuple[int, int]:
    """(idle warps, divergent warps) of one bool per thread, warps of 32 consecutive threads."""
    lanes = active.reshape(-1, WARP_SIZE)
    some = lanes.any(axis=1)
    return int((~some).sum()), int((some & ~lanes.all(axis=1)).sum())


def bank_ways(indices: tuple[np.ndarray, ...], active: np.ndarray) -> int | None:
    """The worst n-way of the accesses (sdata indices per thread) over the warps that make them;
    None for no access. One request per warp: 4-byte words are served by 32 lanes at once."""
    if not indices:
        return None
    lanes = active.reshape(-1, WARP_SIZE)
    return max(int(bank_degrees((index // WORD_ELEMENTS).reshape(-1, WARP_SIZE), lanes).max())
               for index in indices)


def tree_of(knobs: ReduceTreeKnobs) -> TreeReport:
    """Every step of a block's tree for these knobs."""
    threads = knobs.threads
    steps = [(s, LOOP, *loop_step(knobs.addressing, threads, s))
             for s in tree_steps(threads, knobs.addressing, knobs.last_warp)]
    steps += last_warp_steps(knobs.last_warp, threads)
    rows = []
    for s, stage, active, indices in steps:
        idle_warps, divergent = warp_states(active)
        count = int(active.sum())
        rows.append(TreeStep(s=s, stage=stage, barrier=BARRIERS[stage], active_threads=count,
                             needed_threads=count if stage == LOOP else s, idle_threads=threads - count,
                             idle_warps=idle_warps, divergent_warps=divergent, bank_ways=bank_ways(indices, active)))
    return TreeReport(threads, knobs.addressing, knobs.last_warp, tuple(rows))


def tree_not_applicable(template) -> str | None:
    """Why the tree does not describe ``template`` (an ``explorer.schedules.common.Template``), or None."""
    return None if template.name == TEMPLATE else NOT_APPLICABLE


def analyze_tree(spec) -> TreeReport | None:
    """The tree of a ``reduce_tree`` setting (InvalidKnobs, as the build, for one the template cannot
    write); None for any other template (:data:`NOT_APPLICABLE`)."""
    if not isinstance(spec.knobs, ReduceTreeKnobs):
        return None
    check_knobs(spec.workload, spec.knobs)
    return tree_of(spec.knobs)


# -- text --------------------------------------------------------------------------------


def format_tree(report: TreeReport | None) -> str:
    if report is None:
        return NOT_APPLICABLE
    lines = [f"Tree of a block of {report.threads} threads ({report.warps} warps), "
             f"{report.addressing} addressing, last warp: {report.last_warp} (both kernels)",
             f"{'s':>5}  {'stage':<19} {'active':>6} {'needed':>6} {'idle':>5} {'idle warps':>10} "
             f"{'divergent':>9} {'banks':>7}  barrier"]
    for t in report.steps:
        ways = "—" if t.bank_ways is None else f"{t.bank_ways}-way"
        lines.append(f"{t.s:>5}  {t.stage:<19} {t.active_threads:>6} {t.needed_threads:>6} {t.idle_threads:>5} "
                     f"{t.idle_warps:>10} {t.divergent_warps:>9} {ways:>7}  {t.barrier}")
    lines.append("banks: the worst n-way of the step's shared-memory accesses in any warp (— : registers only).")
    return "\n".join(lines)
