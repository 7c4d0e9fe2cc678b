"""Too few warps to hide latency: what an SM can hold (occupancy) or what the grid gives it (grid).
Both charge the same cost; at most one of them fires."""
from __future__ import annotations

from ....targets import WARP_SIZE
from ....units import count
from ...ranking import LATENCY_HIDING_WARPS
from ..counters import stall_evidence
from ..facts import Facts
from ..findings import Finding, Rule, finding


def _parallel_cost(f: Facts) -> float:
    """Latency hiding: the roofline's time stretched by too few warps per SM or idle SMs."""
    share = f.busy_sms * min(1.0, f.warps_per_sm * f.lanes_used * f.useful / LATENCY_HIDING_WARPS)
    return f.bound_us * (1 / share - 1) if share > 0 else 0.0


PARALLEL_COST = (f"the roofline's least time × ({LATENCY_HIDING_WARPS} warps ÷ resident warps per SM (counting only "
                 "the lanes that hold a thread with outputs to compute), × SMs ÷ busy SMs) − the roofline's time: "
                 f"fewer than {LATENCY_HIDING_WARPS} warps per SM are taken as too few to hide memory latency")


def _full(f: Facts) -> bool:
    return f.warps_per_sm * f.lanes_used * f.useful >= LATENCY_HIDING_WARPS


def _hides_with_its_ring(f: Facts) -> bool:
    """A wgmma tile loop hides latency with its ring of asynchronous copies and its warpgroups, not with
    warps in numbers (one block of 4 to 12 warps per SM is its design): the ring-depth, producer and
    softmax findings price what it leaves exposed."""
    return f.loop is not None and f.loop.instruction == "wgmma"


def occupancy_rule(f: Facts) -> Finding | None:
    """Too few warps per SM because of what one SM can hold (registers, shared memory, blocks)."""
    grid_blocks = -(-f.blocks // f.device.sms)
    if _full(f) or f.blocks_per_sm >= grid_blocks or _hides_with_its_ring(f):
        return None
    evidence = [f"{count(f.blocks_per_sm, 'block')} of {f.threads_per_block} threads "
                f"{'fits' if f.blocks_per_sm == 1 else 'fit'} on an SM, limited by "
                f"{f.limiter}: {f.warps_per_sm} warps per SM (of {LATENCY_HIDING_WARPS} taken as enough)."]
    if f.registers is not None:
        evidence.append(f"{f.registers} registers per thread; {f.shared_bytes:,} B of shared memory per block.")
    if f.loop is not None and f.loop.fragments:
        evidence.append(f"The tile loop's accumulators and fragments take {f.loop.fragments} registers per thread: "
                        "fewer rows per warp or a smaller key tile take fewer, and more blocks fit.")
    if "achieved_occupancy" in f.counters:
        evidence.append(f"Nsight Compute: achieved occupancy {f.counters['achieved_occupancy']:.0f}%.")
    evidence += stall_evidence(f, "long_scoreboard")
    return finding("occupancy", f"Occupancy is limited by {f.limiter}: {f.warps_per_sm} warps per SM.", evidence,
                   _parallel_cost(f), PARALLEL_COST)


def grid_rule(f: Facts) -> Finding | None:
    """The grid is too small to fill the GPU: too few blocks (or too few warps in them)."""
    grid_blocks = -(-f.blocks // f.device.sms)
    if _full(f) and f.busy_sms >= 1 or f.blocks_per_sm < grid_blocks or _hides_with_its_ring(f) and f.busy_sms >= 1:
        return None
    evidence = [f"{f.blocks:,} blocks of {f.threads_per_block} threads for {f.device.sms} SMs: "
                + (f"{f.device.sms - f.blocks} SMs get none." if f.blocks < f.device.sms else
                   f"{count(grid_blocks, 'block')}, {count(f.warps_per_sm, 'warp')} per SM (the SM could hold "
                   f"{f.blocks_per_sm}).")]
    if f.lanes_used < 1:
        idle = f.warps_per_block * WARP_SIZE - f.threads_per_block
        evidence.append(f"A block of {f.threads_per_block} threads leaves {idle} of its warps' lanes idle.")
    if f.useful < 1:
        evidence.append(f"{1 - f.useful:.0%} of the threads' tiles fall outside the output: the tile is larger "
                        "than the output.")
    if f.outputs_per_thread is not None:
        evidence.append(f"Each thread computes {count(f.outputs_per_thread, 'output')}.")
    return finding("grid", f"Too little parallelism for the GPU: {f.blocks:,} blocks of {f.threads_per_block} "
                   f"threads, {f.warps_per_sm} warps per SM.", evidence, _parallel_cost(f), PARALLEL_COST)


OCCUPANCY = Rule("occupancy", "too few warps per SM because of what an SM can hold", PARALLEL_COST, occupancy_rule)
GRID = Rule("grid", "too few blocks, or too few threads with outputs in them, to fill the GPU", PARALLEL_COST,
            grid_rule)
