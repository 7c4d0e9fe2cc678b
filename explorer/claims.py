"""What a preset's claims can say, one registry each: the relations of a timing claim
(``compare``) and the facts of a structural claim (``static``).

explorer.presets reads preset files against these names; explorer.lessons words and
judges the claims with them. A new relation or fact is one entry here (and, for a
relation, its ratio in explorer.lessons).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tvm import tirx

from .analysis.banks import analyze_banks
from .analysis.diagnosis.calibration import SAME_SPEED  # noqa: F401 (the lessons and questions read it here)
from .analysis.tiling import analyze_tiling
from .build import Build
from .errors import ExplorerError
from .tir_walk import walk

# The relations a timing claim states, and the words the lesson's sentences use for each:
# faster/slower/same_speed/no_slower compare times (no_slower: faster or within the noise
# band, for a step whose gain is smaller than the noise); more_gflops/fewer_gflops compare
# FLOP rates (for claims across workloads).
RELATIONS = {
    "faster": "faster than",
    "slower": "slower than",
    "same_speed": "as fast as",
    "no_slower": "no slower than",
    "more_gflops": "a higher FLOP rate than",
    "fewer_gflops": "a lower FLOP rate than",
}
# The relations whose bar is the lessons' noise band rather than a ratio a claim states.
NOISE_BAND_RELATIONS = ("same_speed", "no_slower")
# The noise band, SAME_SPEED (two times within ±5% count as the same speed), is the calibration's
# (explorer.analysis.diagnosis.calibration): the diagnosis suggests no move estimated faster by less.


def first_input(built: Build):
    """The footprint of the first buffer the compute stage reads (the input or its tile)."""
    return analyze_tiling(built).footprints[0]


def bank_conflict_degree(built: Build) -> int:
    """The worst n-way bank conflict among the first kernel's shared-memory loads (0 when
    it loads nothing from shared memory)."""
    if not built.kernels:
        return 0
    kernel = analyze_banks(built).kernels[0]
    loads = [a for a in kernel.accesses if a.op == "load" and a.duplicate_of is None]
    unknown = [a for a in loads if a.not_modelled]
    if unknown:
        raise ExplorerError(f"The bank model cannot evaluate {unknown[0].text}: {unknown[0].not_modelled}.")
    return max((a.max_degree for a in loads), default=0)


def global_writes(built: Build) -> tuple[tuple[str, ...], ...]:
    """For each kernel, in launch order, the global buffers it stores to."""
    out = []
    for kernel in built.kernels:
        func = built.device_mod[kernel.name]
        names = {s.buffer.name for s, _ in walk(func.body)
                 if isinstance(s, tirx.BufferStore) and s.buffer.scope() == "global"}
        out.append(tuple(sorted(names)))
    return tuple(out)


@dataclass(frozen=True)
class Fact:
    """A fact about a build that a structural claim can state."""

    label: str  # for the lesson's table
    of: Callable[[Build], object]  # its value on a build (raises ExplorerError when no analysis gives it)


# In the order a preset's checks are listed.
FACTS = {
    "kernels": Fact("kernels launched", lambda b: len(b.kernels)),
    "blocks": Fact("blocks", lambda b: b.kernels[0].blocks),  # of the first kernel
    "threads_per_block": Fact("threads per block", lambda b: b.kernels[0].threads_per_block),
    # blocks launched together as one thread-block cluster (1: no cluster)
    "blocks_per_cluster": Fact("blocks per cluster", lambda b: b.kernels[0].blocks_per_cluster),
    # static shared memory per block of the first kernel
    "shared_bytes": Fact("shared memory per block (bytes)", lambda b: b.kernels[0].shared_bytes),
    # outputs one thread computes, vthreads included
    "outputs_per_thread": Fact("outputs per thread", lambda b: analyze_tiling(b).outputs_per_thread),
    "input_tile_per_thread": Fact("input tile per thread (rows × columns)",
                                  lambda b: tuple(first_input(b).thread_box[-2:])),
    # input elements loaded per output when each thread loads its tile once
    "loads_per_output": Fact("input loads per output", lambda b: first_input(b).loads_per_output),
    "bank_conflict_degree": Fact("worst bank conflict (n-way)", bank_conflict_degree),
    "global_writes": Fact("global buffers written, per kernel", global_writes),
}
