"""A diagnosis per setting: the few findings that most limit it, ranked, each with its
evidence, an estimated cost and the knob change that addresses it.

The analyses of one build are first reduced to :class:`Facts`, plain numbers (occupancy and
its limiter, registers and spills, bank conflicts per shared access, sectors per global
access, work per thread, the roofline's least time, the SASS mix, Nsight Compute's counters
when given). Each *rule* is a small pure function of Facts that returns a :class:`Finding`
or None, with the cost its model charges in µs (each rule's ``*_COST`` sentence says how).

**Ranking** (:data:`RANKING_RULE`): findings are ordered by estimated cost, largest first;
one below ``MIN_SHARE`` of the roofline's least time is dropped.

**Suggestions** (:data:`SUGGESTION_RULE`): every neighbouring setting, one knob moved to
its nearest allowed value that builds (:func:`neighbours`), is built and reduced to Facts. A finding's suggestion is
the neighbour that lowers that finding's own cost by at least ``MIN_RELIEF`` and has the
lowest estimated total (the roofline's least time plus every finding's cost), provided that
total is below the current setting's. The estimate is a static model, not a time: the app
and ``--try-on-gpu`` measure the suggestions where there is a GPU.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from .. import urlstate
from ..build import Build, Spec, build
from ..errors import ExplorerError, InvalidKnobs
from ..gpus import DEFAULT, base_arch, gpu_of
from ..targets import WARP_SIZE
from ..workloads import numpy_dtype
from . import ncu
from .accesses import kernel_accesses
from .banks import analyze_banks
from .coalescing import GLOBAL_SCOPES, analyze_coalescing
from .ranking import LATENCY_HIDING_WARPS
from .resources import analyze_resources, occupancy, sm_limits
from .roofline import Ceilings, bound_us, no_roofline_reason, published_ceilings
from .sass import analyze_sass, compile_binary
from .tiling import analyze_tiling

MIN_SHARE = 0.05  # findings costing less than this share of the roofline's least time are not shown
MIN_RELIEF = 0.1  # a suggestion lowers its finding's cost by at least this share
TOP = 4  # findings shown
LAUNCH_US = 1.2  # an empty kernel launched from a CUDA graph costs about this on an H100, per extra kernel
SHARED_WAVEFRONTS_PER_CYCLE = 1  # per SM: 32 banks × 4 bytes
LSU_ISSUE_PER_CYCLE = 4  # memory instructions an SM issues per cycle (one per sub-partition)
WIDEST_ACCESS_BYTES = 16  # float4
SECTOR_BYTES = 32
OUTPUT_BYTES = 4  # outputs are float32
# Cycles a load from global memory takes to arrive (an assumption of the model: microbenchmarks
# of recent GPUs put it at 500-600 cycles when it misses the L1).
MEMORY_LATENCY_CYCLES = 600


RANKING_RULE = (f"Findings are ranked by their estimated cost in µs, largest first; one costing less than "
                f"{MIN_SHARE:.0%} of the roofline's least time is not shown. Each cost is the extra time its "
                "rule's model charges (stated with the finding), a static estimate, not a measurement.")
SUGGESTION_RULE = ("Each neighbouring setting (one knob moved to its nearest allowed value that builds) is built "
                   f"and analysed; a finding's suggestion is the neighbour that lowers that finding's cost by at least "
                   f"{MIN_RELIEF:.0%} and has the lowest estimated total (the roofline's least time plus every "
                   "finding's cost), if that total is below this setting's; a setting suggested for a higher-ranked "
                   "finding is left to it.")
STATIC_NOTE = ("Static evidence only (the build's analyses and the published figures of the target): "
               "no GPU measured this setting.")


# -- facts --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """What the cost models need of the GPU."""

    name: str
    arch: int  # compute capability × 10, e.g. 90
    sms: int
    clock_ghz: float
    bandwidth_gbps: float  # the roof that applies to this workload (HBM, or L2 when it fits and is measured)
    roof: str  # "HBM" or "L2-resident"

    def cycles_us(self, cycles_per_sm: float) -> float:
        """µs for ``cycles_per_sm`` of work spread over every SM."""
        return cycles_per_sm / (self.sms * self.clock_ghz * 1e3)

    def bytes_us(self, nbytes: float) -> float:
        return nbytes / (self.bandwidth_gbps * 1e3)


@dataclass(frozen=True)
class SharedFact:
    text: str
    op: str
    max_degree: int  # n-way
    wavefronts: int
    conflicts: int


@dataclass(frozen=True)
class GlobalFact:
    text: str
    op: str
    access_bytes: int
    requests: int
    sectors: int
    ideal_sectors: int
    ideal_bytes: int = 0  # the distinct bytes the lanes ask for
    kernel: str = ""  # the kernel it is in
    buffer: str = ""


@dataclass(frozen=True)
class Facts:
    """Plain numbers from the analyses of one build: what the rules read. Launch and
    occupancy are the first kernel's (the compute kernel)."""

    device: Device
    bound_us: float  # the roofline's least time for the workload
    bound: str  # "memory" or "compute"
    kernels: int
    blocks: int
    threads_per_block: int
    shared_bytes: int
    blocks_per_sm: int  # occupancy: blocks an SM can hold
    limiter: str  # what limits blocks_per_sm
    registers: int | None = None
    spill_bytes: int | None = None
    outputs: int = 0  # output elements of the workload
    outputs_per_thread: int | None = None
    loads_per_output: float | None = None  # each thread loading its input footprint once
    shared: tuple[SharedFact, ...] = ()
    globals: tuple[GlobalFact, ...] = ()
    ffma_share: float | None = None  # FFMA among the kernel's SASS instructions
    staged_steps: int = 0  # iterations of the loop(s) with a barrier (tiles staged in shared memory), per block
    async_copies: bool = False  # the kernel copies global → shared with cp.async
    measured_us: float | None = None
    counters: dict = field(default_factory=dict)  # Nsight Compute: metric -> value
    tensor_cores: bool = False  # 16-bit inputs: mma on the tensor cores, and only the memory roof is known
    stage_outputs: int = 0  # outputs of the compute stage (partial sums included), 0 when unknown
    threads_per_output: int = 1  # threads that share each output (a reduction across threads)
    # Loads per output that no tiling avoids: the inputs' elements ÷ the compute stage's outputs (1 where each
    # input feeds many outputs, as in a matmul; the row length for a row-wise reduction).
    compulsory_loads_per_output: float = 1.0
    input_bytes: int = 0  # the workload's inputs, each read once
    input_reads: tuple[int, ...] = ()  # per kernel: bytes of the workload's inputs it reads (one pass each)
    loads_per_thread: float | None = None  # global elements each thread of the first kernel loads
    tree_steps: int = 0  # steps of the first kernel's tree over its threads' values (log2 threads), 0 if none

    @property
    def warps_per_block(self) -> int:
        return -(-self.threads_per_block // WARP_SIZE)

    @property
    def lanes_used(self) -> float:
        """Share of each warp's 32 lanes that hold a thread (a block of 8 threads uses 8)."""
        return self.threads_per_block / (self.warps_per_block * WARP_SIZE)

    @property
    def useful(self) -> float:
        """Share of the launched threads' tiles that hold an output (a tile larger than the
        output leaves threads with nothing to compute)."""
        if not self.stage_outputs or not self.outputs_per_thread:
            return 1.0
        per_block = self.threads_per_block * self.outputs_per_thread / self.threads_per_output
        return min(1.0, self.stage_outputs / (self.blocks * per_block))

    @property
    def resident_blocks(self) -> int:
        """Blocks an SM runs at once: what the SM can hold, or what the grid gives it."""
        return max(1, min(self.blocks_per_sm, -(-self.blocks // self.device.sms)))

    @property
    def warps_per_sm(self) -> int:
        return self.resident_blocks * self.warps_per_block

    @property
    def busy_sms(self) -> float:
        """Share of the SMs that get a block."""
        return min(1.0, self.blocks / self.device.sms)


def device_for(arch: str, ceilings: Ceilings, compulsory_bytes: int, sms: int | None = None) -> Device:
    """The clock is derived from the FP32 peak: peak = SMs × FP32 lanes × 2 × clock (explorer.gpus: a
    GPU the table has no SM count for is taken as the default one)."""
    entry, key = gpu_of(arch), base_arch(arch)
    gpu = entry if entry is not None and entry.sms else DEFAULT
    sms = sms or gpu.sms
    bandwidth, roof = ceilings.bandwidth_for(compulsory_bytes)
    number = int((key or DEFAULT.arch)[3:])
    return Device(ceilings.source, number, sms, ceilings.fp32_gflops / (sms * gpu.fp32_lanes * 2), bandwidth, roof)


# -- findings -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Suggestion:
    spec: Spec
    changes: tuple[tuple[str, str, str], ...]  # (knob, from, to)
    cost_us: float  # the finding's estimated cost after the change
    total_us: float  # the estimated total after the change

    def describe(self) -> str:
        return ", ".join(f"{name} {old} → {new}" for name, old, new in self.changes)


@dataclass(frozen=True)
class Finding:
    rule: str  # the rule's name
    title: str  # one sentence
    evidence: tuple[str, ...]
    cost_us: float
    cost_rule: str  # how the cost is estimated
    suggestion: Suggestion | None = None


def _finding(rule: str, title: str, evidence: Iterable[str], cost_us: float, cost_rule: str) -> Finding:
    return Finding(rule, title, tuple(evidence), max(0.0, cost_us), cost_rule)


def _parallel_cost(f: Facts) -> float:
    """Latency hiding: the roofline's time stretched by too few warps per SM or idle SMs."""
    share = f.busy_sms * min(1.0, f.warps_per_sm * f.lanes_used * f.useful / LATENCY_HIDING_WARPS)
    return f.bound_us * (1 / share - 1) if share > 0 else 0.0


PARALLEL_COST = (f"the roofline's least time × ({LATENCY_HIDING_WARPS} warps ÷ resident warps per SM (counting only "
                 "the lanes that hold a thread with outputs to compute), × SMs ÷ busy SMs) − the roofline's time: "
                 f"fewer than {LATENCY_HIDING_WARPS} warps per SM are taken as too few to hide memory latency")


def _full(f: Facts) -> bool:
    return f.warps_per_sm * f.lanes_used * f.useful >= LATENCY_HIDING_WARPS


def occupancy_rule(f: Facts) -> Finding | None:
    """Too few warps per SM because of what one SM can hold (registers, shared memory, blocks)."""
    grid_blocks = -(-f.blocks // f.device.sms)
    if _full(f) or f.blocks_per_sm >= grid_blocks:
        return None
    evidence = [f"{f.blocks_per_sm} block(s) of {f.threads_per_block} threads fit on an SM, limited by "
                f"{f.limiter}: {f.warps_per_sm} warps per SM (of {LATENCY_HIDING_WARPS} taken as enough)."]
    if f.registers is not None:
        evidence.append(f"{f.registers} registers per thread; {f.shared_bytes:,} B of shared memory per block.")
    if "achieved_occupancy" in f.counters:
        evidence.append(f"Nsight Compute: achieved occupancy {f.counters['achieved_occupancy']:.0f}%.")
    evidence += stall_evidence(f, "long_scoreboard")
    return _finding("occupancy", f"Occupancy is limited by {f.limiter}: {f.warps_per_sm} warps per SM.", evidence,
                    _parallel_cost(f), PARALLEL_COST)


def grid_rule(f: Facts) -> Finding | None:
    """The grid is too small to fill the GPU: too few blocks (or too few warps in them)."""
    grid_blocks = -(-f.blocks // f.device.sms)
    if _full(f) and f.busy_sms >= 1 or f.blocks_per_sm < grid_blocks:
        return None
    evidence = [f"{f.blocks:,} blocks of {f.threads_per_block} threads for {f.device.sms} SMs: "
                + (f"{f.device.sms - f.blocks} SMs get none." if f.blocks < f.device.sms else
                   f"{grid_blocks} block(s), {f.warps_per_sm} warps per SM (the SM could hold {f.blocks_per_sm}).")]
    if f.lanes_used < 1:
        idle = f.warps_per_block * WARP_SIZE - f.threads_per_block
        evidence.append(f"A block of {f.threads_per_block} threads leaves {idle} of its warps' lanes idle.")
    if f.useful < 1:
        evidence.append(f"{1 - f.useful:.0%} of the threads' tiles fall outside the output: the tile is larger "
                        "than the output.")
    if f.outputs_per_thread is not None:
        evidence.append(f"Each thread computes {f.outputs_per_thread} output(s).")
    return _finding("grid", f"Too little parallelism for the GPU: {f.blocks:,} blocks of {f.threads_per_block} "
                    f"threads, {f.warps_per_sm} warps per SM.", evidence, _parallel_cost(f), PARALLEL_COST)


BANK_COST = "one cycle per extra wavefront, each SM serving one shared-memory wavefront per cycle"


def bank_conflict_rule(f: Facts) -> Finding | None:
    conflicts = sum(a.conflicts for a in f.shared)
    if not conflicts:
        return None
    worst = max(f.shared, key=lambda a: (a.conflicts, a.max_degree))
    wavefronts = sum(a.wavefronts for a in f.shared)
    evidence = [f"Worst: {worst.op} {worst.text}, {worst.max_degree}-way, {worst.conflicts:,} extra wavefronts.",
                f"{conflicts:,} of {wavefronts:,} shared-memory wavefronts are conflicts "
                f"({conflicts / wavefronts:.0%})."]
    if "bank_conflicts" in f.counters:
        evidence.append(f"Nsight Compute: {f.counters['bank_conflicts']:,.0f} bank conflicts.")
    evidence += stall_evidence(f, "mio_throttle", "short_scoreboard")
    return _finding("bank-conflicts", f"Shared-memory bank conflicts: up to {worst.max_degree}-way.", evidence,
                    f.device.cycles_us(conflicts / SHARED_WAVEFRONTS_PER_CYCLE), BANK_COST)


COALESCING_COST = "the extra 32-byte sectors' bytes at the roof's bandwidth"


def coalescing_rule(f: Facts) -> Finding | None:
    extra = sum(a.sectors - a.ideal_sectors for a in f.globals)
    if extra <= 0:
        return None
    worst = max(f.globals, key=lambda a: a.sectors - a.ideal_sectors)
    per_request = worst.sectors / worst.requests if worst.requests else 0
    ideal = worst.ideal_sectors / worst.requests if worst.requests else 0
    evidence = [f"Worst: {worst.op} {worst.text}, {per_request:.1f} sectors per request where {ideal:.1f} hold "
                f"its data ({worst.access_bytes} B per lane).",
                f"{extra * SECTOR_BYTES / 1e6:,.2f} MB moved beyond what the warps ask for."]
    if "l2_hit_rate" in f.counters:
        evidence.append(f"Nsight Compute: L2 hit rate {f.counters['l2_hit_rate']:.0f}%.")
    evidence += stall_evidence(f, "long_scoreboard", "lg_throttle")
    return _finding("coalescing", f"Global accesses are not coalesced: {per_request:.1f} sectors per request.",
                    evidence, f.device.bytes_us(extra * SECTOR_BYTES), COALESCING_COST)


REUSE_COST = ("loads beyond one per output (or beyond the inputs' elements per output, where each input feeds "
              "one output only), as one warp-wide request per 32 loads at one per cycle per SM (the shared-memory "
              "or L1 rate)")


def reuse_rule(f: Facts) -> Finding | None:
    """Little work per thread: each output needs many loads that a larger thread tile shares.
    Not for tensor cores, whose warps load whole fragments (a thread's footprint says nothing),
    nor for loads no tile can share: a reduction over a row reads each element for one output only."""
    floor = max(1.0, f.compulsory_loads_per_output)
    if f.loads_per_output is None or f.loads_per_output <= floor or f.tensor_cores:
        return None
    extra = (f.loads_per_output - floor) * f.outputs / WARP_SIZE
    evidence = [f"Each thread computes {f.outputs_per_thread} output(s) and loads {f.loads_per_output:.2f} inputs "
                "per output (its input footprint once)."]
    if f.ffma_share is not None:
        evidence.append(f"SASS: FFMA is {f.ffma_share:.0%} of the kernel's instructions.")
    return _finding("reuse", f"Little work per thread: {f.loads_per_output:.1f} loads per output.", evidence,
                    f.device.cycles_us(extra), REUSE_COST)


SPILL_COST = "the spilled bytes of every thread at the roof's bandwidth (local memory lives in global memory)"


def spill_rule(f: Facts) -> Finding | None:
    if not f.spill_bytes:
        return None
    threads = f.blocks * f.threads_per_block
    evidence = [f"{f.spill_bytes} bytes of spill stores and loads per thread ({f.registers} registers).",
                *stall_evidence(f, "lg_throttle")]
    return _finding("spills", f"Registers spill to local memory: {f.spill_bytes} bytes per thread.", evidence,
                    f.device.bytes_us(f.spill_bytes * threads), SPILL_COST)


KERNELS_COST = f"{LAUNCH_US} µs per extra kernel launch (the data they pass on is the rewrites finding's)"


def kernels_rule(f: Facts) -> Finding | None:
    if f.kernels <= 1:
        return None
    evidence = [f"{f.kernels} kernels: each after the first reads what the one before wrote to global memory."]
    return _finding("kernels", f"{f.kernels} kernels instead of one.", evidence, (f.kernels - 1) * LAUNCH_US,
                    KERNELS_COST)


REWRITE_COST = ("every byte stored beyond the output's own, written and read back at the roof's bandwidth (the "
                "sectors a store wastes are the coalescing finding's)")


def rewrite_rule(f: Facts) -> Finding | None:
    """More bytes stored to global memory than the output holds: partial results accumulated
    in global memory, or intermediates passed between kernels."""
    stored = sum(a.ideal_bytes for a in f.globals if a.op == "store")
    output = f.outputs * OUTPUT_BYTES
    if stored <= output * 1.5:
        return None
    evidence = [f"{stored / 1e6:,.2f} MB stored to global memory for an output of {output / 1e6:,.2f} MB "
                f"({stored / output:.1f}×)."]
    return _finding("rewrites", f"The output is written {stored / output:.1f} times over: partial results go "
                    "through global memory.", evidence, f.device.bytes_us(2 * (stored - output)), REWRITE_COST)


VECTOR_COST = (f"the extra load instructions a {WIDEST_ACCESS_BYTES}-byte access would save, at "
               f"{LSU_ISSUE_PER_CYCLE} per cycle per SM")


def vector_rule(f: Facts) -> Finding | None:
    """Coalesced global loads of fewer than 16 bytes per lane: more instructions than needed. A
    warp's lanes read one contiguous run (32 × its bytes per lane, up to 4 sectors per request: a
    warp of one-element 16-bit loads asks for 64 bytes, 2 sectors)."""
    narrow = [a for a in f.globals if a.op == "load" and a.access_bytes < WIDEST_ACCESS_BYTES
              and a.requests and a.sectors <= a.ideal_sectors * 1.25
              and a.ideal_sectors >= a.requests * min(4, a.access_bytes)]
    if not narrow:
        return None
    saved = sum(a.requests * (1 - a.access_bytes / WIDEST_ACCESS_BYTES) for a in narrow)
    evidence = [f"{a.op} {a.text}: {a.access_bytes} B per lane, {a.requests:,} requests." for a in narrow[:2]]
    if any(a.access_bytes == 2 for a in narrow):
        evidence.append(f"A 2-byte load moves one 16-bit element; a {WIDEST_ACCESS_BYTES}-byte load moves "
                        f"{WIDEST_ACCESS_BYTES // 2} of them with one instruction.")
    return _finding("vector-width", f"Global loads of {min(a.access_bytes for a in narrow)} bytes per lane where "
                    f"{WIDEST_ACCESS_BYTES} would do.", evidence,
                    f.device.cycles_us(saved / LSU_ISSUE_PER_CYCLE), VECTOR_COST)


PIPELINE_COST = (f"one global-memory latency ({MEMORY_LATENCY_CYCLES} cycles, an assumption) per step of the "
                 "shared-memory loop per wave of blocks: the loads a pipeline would overlap")


def pipeline_rule(f: Facts) -> Finding | None:
    """A loop that stages tiles in shared memory with synchronous copies: every step waits for
    its loads (on sm_80+ cp.async and a multi-stage pipeline overlap them with the work)."""
    if not f.staged_steps or f.async_copies or f.device.arch < 80:
        return None
    waves = -(-f.blocks // (f.device.sms * f.resident_blocks))
    evidence = [f"A loop of {f.staged_steps} steps loads tiles into shared memory and waits at a barrier each "
                "step; no cp.async in the kernel.",
                f"{waves} wave(s) of {f.device.sms * f.resident_blocks} blocks.",
                *stall_evidence(f, "long_scoreboard", "barrier")]
    return _finding("pipeline", f"Each of {f.staged_steps} steps waits for its copy to shared memory.", evidence,
                    f.device.cycles_us(waves * f.device.sms * f.staged_steps * MEMORY_LATENCY_CYCLES),
                    PIPELINE_COST)


REREAD_COST = ("the input's bytes read beyond once, at the roof's bandwidth (a kernel reads a buffer at most once "
               "from memory; a later kernel reads it again)")


def reread_rule(f: Facts) -> Finding | None:
    """Several kernels each read the workload's input: passes that one kernel could make over data
    it has just read (softmax as max, sum and normalize kernels)."""
    readers = [(i, read) for i, read in enumerate(f.input_reads, start=1) if read]
    total = sum(read for _, read in readers)
    if len(readers) < 2 or not f.input_bytes or total <= 1.5 * f.input_bytes:
        return None
    times = total / f.input_bytes
    evidence = [f"{len(readers)} kernels read the input: {total / 1e6:,.1f} MB together, where reading it once is "
                f"{f.input_bytes / 1e6:,.1f} MB ({times:.1f}×).",
                "; ".join(f"kernel {i} reads {read / 1e6:,.1f} MB" for i, read in readers) + ".",
                "Each kernel after the first reads again what the one before already read: one kernel making "
                "every pass over a row it holds reads it from memory once."]
    if "l2_hit_rate" in f.counters:
        evidence.append(f"Nsight Compute: L2 hit rate {f.counters['l2_hit_rate']:.0f}%.")
    return _finding("re-reads", f"The input is read {times:.1f} times, once per kernel: passes that could be fused.",
                    evidence, f.device.bytes_us(total - f.input_bytes), REREAD_COST)


LITTLE_WORK = 2  # elements per thread before a tree: Harris's kernels 3 (one) and 4 (two) pay its cost per few loads
# Cycles one step of a tree over a block's values takes: a shared-memory load, an add, a store and the barrier
# that ends the step, each waiting for the one before (an assumption of the model, not a measurement).
TREE_STEP_CYCLES = 60
WORK_COST = (f"the tree's log2(threads) steps at {TREE_STEP_CYCLES} cycles each (an assumption: a shared-memory "
             "load, an add, a store and a barrier), once per wave of blocks: the time an SM's blocks spend adding "
             "instead of loading")


def work_per_thread_rule(f: Facts) -> Finding | None:
    """A reduction whose threads load one or two elements each before the block's tree: every
    block pays the tree's steps and barriers for a few loads (Brent's theorem: fewer threads,
    each summing more elements serially, pay it once per many elements)."""
    if not f.tree_steps or not f.loads_per_thread or f.loads_per_thread > LITTLE_WORK:
        return None
    waves = -(-f.blocks // (f.device.sms * f.resident_blocks))
    per_thread = f"{f.loads_per_thread:g} element{'s' if f.loads_per_thread != 1 else ''}"
    evidence = [f"Each thread loads {per_thread} from global memory, then the block adds its "
                f"{f.threads_per_block} values in a tree of {f.tree_steps} steps.",
                f"{f.blocks:,} blocks: {waves} wave(s) of {f.device.sms * f.resident_blocks} blocks, each wave paying "
                f"the {f.tree_steps} steps for {f.threads_per_block * f.loads_per_thread:g} elements per block.",
                "Summing more elements per thread in a register before the tree needs fewer blocks, and so "
                "fewer trees.",
                *stall_evidence(f, "barrier")]
    return _finding("work-per-thread", f"Too little work per thread: {per_thread} before a "
                    f"{f.tree_steps}-step tree.", evidence,
                    f.device.cycles_us(waves * f.device.sms * f.tree_steps * TREE_STEP_CYCLES), WORK_COST)


RULES: tuple[Callable[[Facts], Finding | None], ...] = (
    occupancy_rule, grid_rule, bank_conflict_rule, coalescing_rule, reuse_rule, spill_rule, kernels_rule, rewrite_rule,
    vector_rule, pipeline_rule, reread_rule, work_per_thread_rule,
)


# Each rule's name (a Finding's ``rule``), what it looks for and how its cost is estimated: the list the
# graded documentation (bench/diagnosis_agreement.py) prints.
RULE_TABLE: tuple[tuple[str, str, str], ...] = (
    ("occupancy", "too few warps per SM because of what an SM can hold", PARALLEL_COST),
    ("grid", "too few blocks, or too few threads with outputs in them, to fill the GPU", PARALLEL_COST),
    ("bank-conflicts", "shared-memory accesses whose lanes share a bank", BANK_COST),
    ("coalescing", "global accesses that touch more 32-byte sectors than their data fill", COALESCING_COST),
    ("reuse", "many loads per output that a larger thread tile would share", REUSE_COST),
    ("spills", "registers spilled to local memory", SPILL_COST),
    ("kernels", "more than one kernel launch", KERNELS_COST),
    ("rewrites", "more bytes stored to global memory than the output holds", REWRITE_COST),
    ("vector-width", "coalesced global loads narrower than 16 bytes per lane (one 16-bit element included)",
     VECTOR_COST),
    ("pipeline", "a loop that stages tiles in shared memory with synchronous copies", PIPELINE_COST),
    ("re-reads", "the workload's input read by several kernels: passes that could be fused", REREAD_COST),
    ("work-per-thread", f"a block's tree over its threads' values after {LITTLE_WORK} or fewer loads per thread",
     WORK_COST),
)


def findings_of(f: Facts) -> dict[str, Finding]:
    """Every rule's finding for ``f``, by rule name."""
    return {found.rule: found for found in (rule(f) for rule in RULES) if found is not None}


def estimated_total(f: Facts) -> float:
    """The roofline's least time plus every finding's cost: what suggestions are compared by."""
    return f.bound_us + sum(found.cost_us for found in findings_of(f).values())


def ranked(findings: Iterable[Finding], bound: float) -> list[Finding]:
    """The ranking rule (:data:`RANKING_RULE`)."""
    shown = [found for found in findings if found.cost_us >= MIN_SHARE * bound]
    return sorted(shown, key=lambda found: -found.cost_us)


# -- suggestions ----------------------------------------------------------------------------


Move = tuple[Spec, tuple[tuple[str, str, str], ...]]  # a setting and its knob changes (knob, from, to)
STEPS_TRIED = 3  # allowed values tried in one direction until one builds


def neighbours(spec: Spec) -> list[list[Move]]:
    """Every setting one knob away, as one list per knob and direction: the next allowed
    values in that direction, nearest first (a template may refuse the nearest, e.g. fewer
    rows per block than threads; :func:`diagnose` takes the first that builds). A switch's
    other value, each other option, the next smaller and larger choice, a range's ±1 and
    ×2 or ÷2, a split's smallest prime factor moved between neighbouring levels. Values the
    knob dataclass refuses are left out."""
    out = []
    for knob in spec.knobs.specs():
        value = getattr(spec.knobs, knob.name)
        for direction in _directions(knob, value):
            moves = []
            for new in direction[:STEPS_TRIED]:
                try:
                    moves.append((spec.with_knobs(**{knob.name: new}),
                                  ((knob.name, knob.format(value), knob.format(new)),)))
                except ExplorerError:
                    continue
            if moves:
                out.append(moves)
    return out


def _directions(knob, value) -> list[list]:
    if knob.kind is bool:
        return [[not value]]
    if knob.kind is str:
        return [[c] for c in knob.values() if c != value]
    if knob.kind is tuple:
        return [[moved] for moved in _split_moves(value)]
    if knob.choices is not None:
        ordered = sorted(knob.choices)
        i = ordered.index(value)
        return [list(reversed(ordered[:i])), ordered[i + 1:]]
    near = {value - 1, value + 1, value * 2, value // 2}
    return [[v] for v in sorted(near) if v != value and knob.low <= v <= knob.high]


def _split_moves(value: tuple) -> list[tuple]:
    """A split with its smallest prime factor moved from one level to the next or back."""
    moves = []
    for i in range(len(value) - 1):
        for src, dst in ((i, i + 1), (i + 1, i)):
            if value[src] > 1:
                factor = next(p for p in range(2, value[src] + 1) if value[src] % p == 0)
                moved = list(value)
                moved[src] //= factor
                moved[dst] *= factor
                moves.append(tuple(moved))
    return moves


def suggest(rule: str, current: Facts, candidates: Iterable[tuple[Spec, tuple, Facts]],
            taken: Iterable[Spec] = ()) -> Suggestion | None:
    """The suggestion rule (:data:`SUGGESTION_RULE`) for the finding of ``rule``; settings in
    ``taken`` (suggested for a higher-ranked finding) are left to that finding."""
    taken = set(taken)
    now = findings_of(current).get(rule)
    if now is None:
        return None
    total_now = estimated_total(current)
    best = None
    for spec, changes, facts in candidates:
        found = findings_of(facts).get(rule)
        cost = found.cost_us if found is not None else 0.0
        total = estimated_total(facts)
        if cost > now.cost_us * (1 - MIN_RELIEF) or total >= total_now or spec in taken:
            continue
        if best is None or (total, cost) < (best.total_us, best.cost_us):
            best = Suggestion(spec, changes, cost, total)
    return best


# -- Nsight Compute's counters ------------------------------------------------------------

L2_HIT_RATE = "lts__t_sector_hit_rate.pct"
# Warp stall reasons (share of the active warps' cycles stalled on each), and what they wait for.
STALLS = {
    "long_scoreboard": "global or local memory", "lg_throttle": "the global/local load queue",
    "barrier": "a barrier", "mio_throttle": "the shared-memory pipe", "short_scoreboard": "shared memory",
}
STALL_METRIC = "smsp__warp_issue_stalled_{}_per_warp_active.pct"


def ncu_metrics() -> tuple[str, ...]:
    """The counters the diagnosis reads (``explorer.analysis.ncu.profile(spec, metrics=...)``)."""

    return (*ncu.PANEL_METRICS, L2_HIT_RATE, *(STALL_METRIC.format(reason) for reason in STALLS))


def counters_of(launch) -> dict:
    """An ``explorer.analysis.ncu.KernelCounters`` launch → the counters the rules quote."""

    metrics = launch.metrics
    conflicts = [launch.get(op, "conflicts") for op in ("load", "store")]
    out = {"achieved_occupancy": metrics.get(ncu.OCCUPANCY), "l2_hit_rate": metrics.get(L2_HIT_RATE),
           "bank_conflicts": sum(conflicts) if None not in conflicts else None,
           "duration_us": metrics[ncu.DURATION] / 1e3 if metrics.get(ncu.DURATION) is not None else None,
           **{f"stall_{reason}": metrics.get(STALL_METRIC.format(reason)) for reason in STALLS}}
    return {name: value for name, value in out.items() if value is not None}


def stall_evidence(f: Facts, *reasons: str) -> list[str]:
    """Nsight Compute's stall reasons that bear on a finding, as evidence lines."""
    return [f"Nsight Compute: warps stalled on {STALLS[r]} ({r}) {f.counters[f'stall_{r}']:.0f}% of the time."
            for r in reasons if f"stall_{r}" in f.counters]


# -- facts of a build -----------------------------------------------------------------------


def facts_of(built: Build, *, binary=None, ceilings: Ceilings | None = None, measured_us: float | None = None,
             counters: dict | None = None, like: Facts | None = None, sms: int | None = None) -> Facts:
    """The Facts of ``built``. ``binary`` (``compile_binary``) gives registers, spills and the
    SASS mix; without it and with ``like`` (the Facts of a compiled neighbour) registers and
    spills are estimated from the change in outputs per thread (one accumulator each)."""

    if not built.kernels:
        raise ExplorerError("A CPU build has no CUDA kernel to diagnose.")
    arch = str(built.target.attrs.get("arch", ""))
    workload = built.spec.workload
    ceilings = ceilings or published_ceilings(arch)
    device = device_for(arch, ceilings, workload.compulsory_bytes, sms)
    memory_us = device.bytes_us(workload.compulsory_bytes)
    # 16-bit inputs run on the tensor cores: their roof where the ceilings have its peak, else bytes alone.
    no_compute_roof = no_roofline_reason(workload, ceilings) is not None
    least = memory_us if no_compute_roof else bound_us(ceilings, workload.flops, workload.compulsory_bytes,
                                                       workload.input_dtypes())
    bound = "memory" if memory_us >= least else "compute"
    kernel = analyze_resources(built, binary).kernels[0]
    tiling = _tiling(built)
    registers = kernel.registers if isinstance(kernel.registers, int) else None
    spills = kernel.spill_bytes if isinstance(kernel.spill_bytes, int) else None
    occ = kernel.occupancy
    if registers is None and like is not None and like.registers is not None:
        registers, spills = _estimated_registers(like, tiling.outputs_per_thread)
        occ = occupancy(sm_limits(arch)[0], kernel.threads_per_block, kernel.shared_bytes, registers)
    shared = tuple(SharedFact(a.text, a.op, a.max_degree, a.wavefronts, a.conflicts)
                   for k in analyze_banks(built).kernels for a in k.accesses if not a.not_modelled)
    accesses = [a for a in analyze_coalescing(built).accesses if not a.not_modelled]
    globals_ = tuple(GlobalFact(a.text, a.op, a.access_bytes, a.requests, a.sectors, a.ideal_sectors, a.ideal_bytes,
                                a.kernel, a.buffer) for a in accesses)
    first = built.kernels[0]
    threads = first.blocks * kernel.threads_per_block
    input_elements = sum(math.prod(shape) for shape in workload.input_shapes())
    element_bytes = numpy_dtype(workload.input_dtypes()[0]).itemsize
    first_loads = sum(a.ideal_bytes for a in globals_ if a.op == "load" and a.kernel == first.name)
    return Facts(device, least, bound, len(built.kernels),
                 first.blocks, kernel.threads_per_block, kernel.shared_bytes, occ.blocks_per_sm,
                 occ.limiter, registers, spills, math.prod(workload.output_shape()), tiling.outputs_per_thread,
                 tiling.loads, shared, globals_, _ffma_share(built, binary), _staged_steps(built),
                 "cp.async" in built.cuda, measured_us, dict(counters or {}), no_compute_roof, tiling.stage_outputs,
                 tiling.threads_per_output, tiling.compulsory_loads(input_elements), _input_bytes(workload),
                 _input_reads(built, globals_), first_loads / element_bytes / threads if threads else None,
                 _tree_steps(built, globals_))


def _staged_steps(built: Build) -> int:
    """Iterations of the loops whose body has a barrier and a global load (tiles staged in shared
    memory), in the first kernel (one block's). A tree that only adds shared values between its
    barriers stages nothing."""

    kernel = kernel_accesses(built.device_mod)[0]
    globals_ = kernel_accesses(built.device_mod, GLOBAL_SCOPES)[0]
    loading = {loop.var for access in globals_.accesses if access.op == "load" for loop in access.loops}
    loops = {loop.var: loop.extent for access in kernel.accesses for loop in access.loops
             if loop.var in kernel.barrier_loops and loop.var in loading}
    return math.prod(loops.values()) if loops else 0


@dataclass(frozen=True)
class _StageTiling:
    """What the rules read of the tiling of the compute stage (None where it has none)."""

    outputs_per_thread: int | None = None
    loads: float | None = None  # loads per output, each thread loading its footprint once
    stage_outputs: int = 0
    threads_per_output: int = 1
    reads: float = 0.0  # executed reads per output (no reuse at all)

    def compulsory_loads(self, input_elements: int) -> float:
        """Loads per output no tile avoids: the reads per output where no input element is read
        for two outputs (a reduction over rows); 1 where inputs feed many outputs."""
        if self.stage_outputs and self.reads and self.reads * self.stage_outputs <= input_elements:
            return self.reads
        return 1.0


def _tiling(built: Build) -> _StageTiling:
    try:
        tiling = analyze_tiling(built)
    except ExplorerError:
        return _StageTiling()
    sharing = math.prod(loop.extent for loop in tiling.loops if loop.role == "thread" and loop.reduces)
    return _StageTiling(tiling.outputs_per_thread, sum(f.loads_per_output for f in tiling.footprints) or None,
                        math.prod(tiling.output_shape), sharing, sum(f.reads_per_output for f in tiling.footprints))


def _input_bytes(workload) -> int:
    typed = zip(workload.input_shapes(), workload.input_dtypes(), strict=True)
    return sum(math.prod(shape) * numpy_dtype(dtype).itemsize for shape, dtype in typed)


def _input_reads(built: Build, globals_: tuple[GlobalFact, ...]) -> tuple[int, ...]:
    """Per kernel, the bytes of the workload's inputs it reads, each input counted once at most (a
    kernel that reads an element again finds it in a cache, the model's assumption): one kernel per
    pass reads the input once per pass."""
    workload = built.spec.workload
    sizes = {name: math.prod(shape) * numpy_dtype(dtype).itemsize for name, shape, dtype in
             zip(workload.input_names, workload.input_shapes(), workload.input_dtypes(), strict=True)}
    out = []
    for k in built.kernels:
        read = 0
        for name, size in sizes.items():
            read += min(size, sum(a.ideal_bytes for a in globals_
                                  if a.op == "load" and a.kernel == k.name and a.buffer == name))
        out.append(read)
    return tuple(out)


def _tree_steps(built: Build, globals_: tuple[GlobalFact, ...]) -> int:
    """log2(threads per block) when the first kernel adds its threads' values in a tree: it waits at
    a barrier and stores at most one element per warp to global memory (a tile of outputs stores
    about one per thread; stores the analysis cannot model say nothing)."""
    first = built.kernels[0]
    kernel = kernel_accesses(built.device_mod)[0]
    if not kernel.barrier_loops and not any(a.epoch for a in kernel.accesses):
        return 0
    stored = sum(a.ideal_bytes for a in globals_ if a.op == "store" and a.kernel == first.name)
    element_bytes = numpy_dtype(built.spec.workload.output_dtype()).itemsize
    threads = first.threads_per_block
    if threads < 2 or not stored or stored / element_bytes * WARP_SIZE > first.blocks * threads:
        return 0
    return threads.bit_length() - 1


def _estimated_registers(like: Facts, outputs_per_thread: int | None) -> tuple[int, int | None]:
    if outputs_per_thread is None or like.outputs_per_thread is None:
        return like.registers, like.spill_bytes
    registers = min(255, max(16, like.registers + outputs_per_thread - like.outputs_per_thread))
    spills = like.spill_bytes
    if spills and outputs_per_thread < like.outputs_per_thread:
        spills = int(spills * outputs_per_thread / like.outputs_per_thread)
    return registers, spills


def _ffma_share(built: Build, binary) -> float | None:
    if binary is None or binary.tool != "nvrtc":
        return None

    mix = analyze_sass(built).kernels[0].mix
    return mix.ffma / mix.instructions if mix.instructions else None


REGISTER_NOTE = ("Registers of a neighbouring setting are not compiled: they are estimated as this setting's, "
                 "plus one per extra output per thread; spills shrink in proportion to a smaller thread tile.")


# -- the diagnosis --------------------------------------------------------------------------


@dataclass(frozen=True)
class Diagnosis:
    spec: Spec
    findings: tuple[Finding, ...]  # ranked
    bound_us: float = 0.0
    bound: str = ""
    estimate_us: float = 0.0  # the roofline's least time plus every finding's cost
    measured_us: float | None = None
    tried: int = 0  # neighbouring settings built and analysed
    refused: str | None = None  # the setting cannot be built: this sentence is the whole diagnosis
    notes: tuple[str, ...] = ()

    @property
    def static(self) -> bool:
        return self.measured_us is None

    def suggestions(self, n: int = 2) -> list[Suggestion]:
        """The first ``n`` distinct suggestions, in the findings' order."""
        out: list[Suggestion] = []
        for found in self.findings:
            if found.suggestion is not None and all(s.spec != found.suggestion.spec for s in out):
                out.append(found.suggestion)
        return out[:n]

    def to_dict(self) -> dict:

        def finding(rank: int, found: Finding) -> dict:
            s = found.suggestion
            return {"rank": rank, "rule": found.rule, "title": found.title, "evidence": list(found.evidence),
                    "cost_us": round(found.cost_us, 3),
                    "cost_percent_of_roofline": _percent(found.cost_us, self.bound_us),
                    "cost_rule": found.cost_rule,
                    "suggestion": None if s is None else {
                        "changes": [{"knob": k, "from": a, "to": b} for k, a, b in s.changes],
                        "set": [f"{k}={b}" for k, _, b in s.changes], "query": urlstate.to_query(s.spec),
                        "cost_us": round(s.cost_us, 3), "estimate_us": round(s.total_us, 3)}}

        return {
            "knobs": self.spec.knobs.to_strings(), "evidence": "static" if self.static else "measured",
            "refused": self.refused,
            "roofline": {"least_us": round(self.bound_us, 3), "bound": self.bound, "measured_us": self.measured_us,
                         "percent_of_roofline": _percent(self.bound_us, self.measured_us)},
            "estimate_us": round(self.estimate_us, 3), "neighbours_tried": self.tried,
            "findings": [finding(rank, found) for rank, found in enumerate(self.findings, start=1)],
            "ranking_rule": RANKING_RULE, "suggestion_rule": SUGGESTION_RULE, "notes": list(self.notes),
        }


def _percent(part: float, whole: float | None) -> float | None:
    return round(100 * part / whole, 1) if whole else None


def refusal(spec: Spec, error: ExplorerError) -> Diagnosis:
    """A setting the library refuses: its one sentence, nothing else."""
    return Diagnosis(spec, (), refused=str(error))


def diagnose(built: Build, *, binary=None, ceilings: Ceilings | None = None, measured_us: float | None = None,
             counters: dict | None = None, build_fn: Callable[[Spec], Build] | None = None,
             workers: int = 1) -> Diagnosis:
    """The diagnosis of ``built``: its findings ranked, each with the neighbour that addresses
    it. ``build_fn(spec)`` builds a neighbour (default: ``explorer.build.build`` for the same
    target); ``workers`` > 1 builds them from that many threads (a server's build pool)."""
    current = facts_of(built, binary=binary, ceilings=ceilings, measured_us=measured_us, counters=counters)
    found = ranked(findings_of(current).values(), current.bound_us)[:TOP]
    build_fn = build_fn or (lambda spec: build(spec, built.target))
    candidates = _candidates(built.spec, current, ceilings, build_fn, workers) if found else []
    suggested: list[Finding] = []
    for f in found:
        taken = [s.suggestion.spec for s in suggested if s.suggestion is not None]
        suggested.append(replace(f, suggestion=suggest(f.rule, current, candidates, taken)))
    notes = [STATIC_NOTE if measured_us is None else
             f"Measured: {measured_us:.2f} µs, {100 * current.bound_us / measured_us:.0f}% of the roofline."]
    if binary is None:
        notes.append("Not compiled to a cubin here: registers, spills and the SASS mix are unknown.")
    if current.tensor_cores:
        notes.append("16-bit inputs run on the tensor cores, whose peak is not measured here: the roofline's least "
                     "time is the memory roof's.")
    if counters:
        notes.append("Nsight Compute profiled one launch: its counters are quoted beside the static evidence.")
    notes.append(REGISTER_NOTE)
    return Diagnosis(built.spec, tuple(suggested), current.bound_us, current.bound, estimated_total(current),
                     measured_us, len(candidates), None, tuple(notes))


def _candidates(spec: Spec, current: Facts, ceilings, build_fn, workers: int) -> list[tuple[Spec, tuple, Facts]]:
    """Each neighbour direction's first setting that builds, with its Facts. A direction the
    template refuses altogether is tried once more with each other knob the refusal names
    moved one step as well (async copies that need a second pipeline stage)."""
    def analysed(moves: list[Move]):
        refusal = None
        for moved, changes in moves:
            try:
                return _analysed(moved, changes, build_fn(moved), current, ceilings)
            except InvalidKnobs as error:
                refusal = refusal or error
            except ExplorerError:
                continue
        for moved, changes in _with_named_knobs(moves[0], refusal):
            try:
                return _analysed(moved, changes, build_fn(moved), current, ceilings)
            except ExplorerError:
                continue
        return None

    paths = neighbours(spec)
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            results = list(pool.map(analysed, paths))
    else:
        results = [analysed(moves) for moves in paths]
    return [r for r in results if r is not None]


def _analysed(moved: Spec, changes: tuple, built: Build, current: Facts, ceilings):
    return moved, changes, facts_of(built, ceilings=ceilings, like=current, sms=current.device.sms)


def _with_named_knobs(move: Move, refusal: InvalidKnobs | None) -> list[Move]:
    """``move`` with one more knob that ``refusal`` names moved to its nearest value."""
    if refusal is None:
        return []
    spec, changes = move
    out = []
    for path in neighbours(spec):
        both, more = path[0]
        if more[0][0] in refusal.knobs and more[0][0] != changes[0][0]:
            out.append((both, changes + more))
    return out


def diagnose_spec(spec: Spec, target=None, *, compile: bool = True, **options) -> Diagnosis:
    """Build ``spec`` (and compile it for registers, where the tools are here) and diagnose it;
    a setting the library refuses gets :func:`refusal`."""
    try:
        built = build(spec, target)
        binary = compile_binary(built) if compile else None
    except ExplorerError as error:
        return refusal(spec, error)
    return diagnose(built, binary=binary, **options)


# -- text -----------------------------------------------------------------------------------


def format_diagnosis(d: Diagnosis, command: str = "python -m explorer show TEMPLATE") -> str:
    """The diagnosis as text; ``command`` (e.g. ``python -m explorer show PRESET``) prefixes
    each suggestion's command line."""
    if d.refused is not None:
        return d.refused
    lines = [f"Roofline: at least {d.bound_us:.2f} µs ({d.bound}-bound); static estimate {d.estimate_us:.2f} µs"
             + (f"; measured {d.measured_us:.2f} µs" if d.measured_us is not None else "") + "."]
    if not d.findings:
        lines.append("No finding costs more than "
                     f"{MIN_SHARE:.0%} of the roofline's time: nothing here limits this setting much.")
    for rank, found in enumerate(d.findings, start=1):
        share = f", {100 * found.cost_us / d.bound_us:.0f}% of the roofline's time" if d.bound_us else ""
        lines.append(f"{rank}. {found.title} (about {found.cost_us:.2f} µs{share})")
        lines.extend(f"   - {line}" for line in found.evidence)
        lines.append(f"   cost: {found.cost_rule}")
        s = found.suggestion
        if s is None:
            lines.append("   no single knob move lowers this without raising the estimate")
        else:
            sets = " ".join(f"--set {k}={b}" for k, _, b in s.changes)
            lines.append(f"   try {s.describe()} (estimate {s.total_us:.2f} µs): {command} {sets} --view diagnosis")
    lines.append(f"Ranking: {RANKING_RULE}")
    lines.append(f"Suggestions: {SUGGESTION_RULE} ({d.tried} neighbours built)")
    lines.extend(f"note: {n}" for n in d.notes)
    return "\n".join(lines)

