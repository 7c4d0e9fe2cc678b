"""A static rank key for a build, for ranking settings where there is no GPU to time them:
a rough model that combines the tiling, bank-conflict and occupancy analyses (and says so)."""
from __future__ import annotations

from dataclasses import dataclass

import tvm

from ..build import Build
from ..gpus import DEFAULT
from ..targets import WARP_SIZE
from .banks import analyze_banks
from .resources import analyze_resources
from .tiling import analyze_tiling


@dataclass(frozen=True)
class StaticScore:
    """What a sweep ranks by without a GPU: ``cost`` (lower is better) and the figures it
    was computed from, shown as columns."""

    cost: float
    metrics: tuple[tuple[str, float], ...]
    explanation: str  # how cost is computed, in one sentence


# Without a GPU a sweep ranks by this rough model of the static analyses (and says so).
LATENCY_HIDING_WARPS = 16  # resident warps per SM taken as enough to hide memory latency
DEFAULT_SMS = DEFAULT.sms  # an H100's SMs, assumed when no GPU is present to ask
STATIC_MODEL = (
    "Static cost = loads per output (each thread loading its input footprint once, the blog's reuse count) "
    f"× shared-memory wavefronts per conflict-free wavefront ÷ the share of each warp's {WARP_SIZE} lanes in use "
    f"÷ min(1, resident warps per SM ÷ {LATENCY_HIDING_WARPS}); lower ranks first. "
    "A rough model of the analyses, not a time."
)


def static_score(built: Build) -> StaticScore:
    """Rank key from the analyses of one build (see STATIC_MODEL): tiling reuse, bank
    conflicts, and whether enough warps are resident to hide memory latency."""
    loads = sum(f.loads_per_output for f in analyze_tiling(built).footprints)
    banks = analyze_banks(built).kernels
    wavefronts = sum(k.loads.wavefronts + k.stores.wavefronts for k in banks)
    conflicts = sum(k.loads.conflicts + k.stores.conflicts for k in banks)
    conflict_factor = wavefronts / (wavefronts - conflicts) if wavefronts > conflicts else 1.0
    launch = built.kernels[0]  # the compute kernel
    occupancy = analyze_resources(built).kernels[0].occupancy
    device = tvm.cuda(0)
    sms = device.multi_processor_count if device.exist else DEFAULT_SMS
    resident_blocks = min(occupancy.blocks_per_sm, -(-launch.blocks // sms))
    lanes_used = launch.threads_per_block / (WARP_SIZE * launch.warps_per_block)
    warps = resident_blocks * launch.warps_per_block
    hiding = min(1.0, warps / LATENCY_HIDING_WARPS)
    metrics = (("loads_per_output", round(loads, 3)), ("conflict_factor", round(conflict_factor, 3)),
               ("lanes_used", round(lanes_used, 3)), ("warps_per_sm", warps),
               ("occupancy", round(occupancy.occupancy, 3)))
    return StaticScore(loads * conflict_factor / lanes_used / hiding, metrics, STATIC_MODEL)
