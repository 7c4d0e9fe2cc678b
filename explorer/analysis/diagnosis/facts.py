"""What the rules read: a build's analyses reduced to plain numbers (:class:`Facts`), with the
GPU's figures the cost models need (:class:`Device`).

:func:`facts_of` reads one build: occupancy and its limiter, registers and spills, bank conflicts
per shared access, sectors per global access, work per thread, the roofline's least time, the SASS
mix, Nsight Compute's counters when given. A neighbouring setting is not compiled: its registers
are estimated from the compiled setting's (:data:`REGISTER_NOTE`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import tvm
from tvm import tirx
from tvm_ffi import StructuralKey

from ...build import Build
from ...errors import ExplorerError
from ...gpus import DEFAULT, base_arch, gpu_of
from ...schedules.attention_fused import AttentionFusedKnobs, kv_bytes_loaded
from ...schedules.attention_mma import AttentionMmaKnobs
from ...targets import WARP_SIZE, gpu_name
from ...tir_walk import walk
from ...workloads import numpy_dtype
from ..accesses import global_accesses, shared_accesses
from ..banks import analyze_banks
from ..coalescing import analyze_coalescing
from ..races import analyze_races
from ..resources import analyze_resources, occupancy, sm_limits
from ..roofline import FP32, Ceilings, bound_us, compute_types, no_roofline_reason, published_for
from ..sass import analyze_sass
from ..texpr import free_vars
from ..tiling import analyze_tiling
from ..tree import BARRIERS, LOOP, analyze_tree
from . import calibration
from .tiles import FmaLoop, TileLoop, fma_loop, tile_loop


@dataclass(frozen=True)
class Device:
    """What the cost models need of the GPU."""

    name: str
    arch: int  # compute capability × 10, e.g. 90
    sms: int
    clock_ghz: float
    bandwidth_gbps: float  # the roof that applies to this workload (HBM, or L2 when it fits and is measured)
    roof: str  # "HBM" or "L2-resident"
    # The L2's bandwidth where the ceilings measured it, else where the calibration measured it for this
    # architecture (vendors do not publish it; the roof, bandwidth_gbps, stays the ceilings').
    l2_gbps: float | None = None
    l2_bytes: int = 0  # the L2's size (explorer.gpus), 0 where not known
    fp32_lanes: int = 128  # FP32 lanes per SM: one fused multiply-add each per cycle

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
class RaceFact:
    """A pair of shared accesses that race (explorer.analysis.races): its sentence and CUDA lines."""

    storage: str
    sentence: str
    lines: tuple[int, ...] = ()


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
    # Per block of a written tree (reduce_tree): the warps its steps keep busy beyond those the same adds would
    # take with the active threads side by side (warps with some lanes adding and some idle, summed over steps).
    divergent_warp_steps: int = 0
    # Causal attention whose kernels store the whole score matrix (S): the FLOPs of the masked scores they compute
    # anyway (both products), and the workload's own FLOPs (the unmasked half).
    masked_flops: float = 0.0
    workload_flops: float = 0.0
    # 16-bit inputs multiplied on the CUDA cores (a template without mma, Template.tensor_cores): the roofline's
    # least time of the same work on the tensor cores, where the ceilings have their peak (None otherwise; the
    # roofline's own, bound_us, is the CUDA cores' FP32 peak's).
    tensor_core_us: float | None = None
    compulsory_bytes: int = 0  # the workload's inputs read once and its output written once
    # Attention written as one kernel whose blocks each hold a tile of query rows and walk every key and value
    # tile of their head: the rows a block holds, the bytes of K and V, and those its blocks load together (0
    # otherwise).
    query_rows_per_block: int = 0
    kv_bytes: int = 0
    kv_loaded_bytes: int = 0
    kv_in_flight_bytes: int = 0  # K and V of the heads whose blocks are on the GPU at once (0: not known)
    races: tuple[RaceFact, ...] = ()  # shared-memory races: the kernel's result is wrong
    # Per block of a written tree (reduce_tree): its steps that only the first warp works in and that end in a
    # block-wide __syncthreads(), where that warp alone could go on with warp-synchronous steps or shuffles.
    warp_only_barriers: int = 0
    loop: TileLoop | None = None  # the tile loop of a kernel that multiplies on the tensor cores (.tiles)
    fma_loop: FmaLoop | None = None  # the inner loops of fused attention on the CUDA cores (.tiles)
    roof: str = ""  # what sets the roofline's least time, in words: a bandwidth or a compute peak
    # Bytes of the global stores (GlobalFact's, summed) that the compiler keeps in a register instead of writing
    # them to memory: a store to the same address on every iteration of a loop (_stores); and the distinct bytes
    # the stores write (each address once: what a rewritten buffer holds), 0 where not known.
    register_kept_bytes: int = 0
    stored_footprint: int = 0
    launches: int = 0  # kernel launches the host makes (a kernel launched in a host loop counts each time); 0: one each

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


def device_for(arch: str, ceilings: Ceilings, compulsory_bytes: int, sms: int | None = None,
               gpu_name: str | None = None) -> Device:
    """The clock is derived from the FP32 peak: peak = SMs × FP32 lanes × 2 × clock (explorer.gpus: the
    GPU called ``gpu_name`` within ``arch``, or the one it stands for; one the table has no SM count for
    is taken as the default one)."""
    entry, key = gpu_of(arch, gpu_name), base_arch(arch)
    gpu = entry if entry is not None and entry.sms else DEFAULT
    sms = sms or gpu.sms
    bandwidth, roof = ceilings.bandwidth_for(compulsory_bytes)
    number = int((key or DEFAULT.arch)[3:])
    return Device(ceilings.source, number, sms, ceilings.fp32_gflops / (sms * gpu.fp32_lanes * 2), bandwidth, roof,
                  ceilings.l2_gbps or calibration.l2_gbps(key or DEFAULT.arch),
                  ceilings.l2_bytes or (gpu.published.l2_bytes if gpu.published else 0),
                  gpu.fp32_lanes)


def facts_of(built: Build, *, binary=None, ceilings: Ceilings | None = None, measured_us: float | None = None,
             counters: dict | None = None, like: Facts | None = None, sms: int | None = None) -> Facts:
    """The Facts of ``built``. ``binary`` (``compile_binary``) gives registers, spills and the
    SASS mix; without it and with ``like`` (the Facts of a compiled neighbour) registers and
    spills are estimated from the change in outputs per thread (one accumulator each)."""

    if not built.kernels:
        raise ExplorerError("A CPU build has no CUDA kernel to diagnose.")
    arch = str(built.target.attrs.get("arch", ""))
    workload = built.spec.workload
    ceilings = ceilings or published_for(built.target)
    device = device_for(arch, ceilings, workload.compulsory_bytes, sms, gpu_name(built.target))
    memory_us = device.bytes_us(workload.compulsory_bytes)
    # The roof of the units the template multiplies on (compute_types): the tensor cores' for 16-bit inputs
    # where the ceilings have their peak, else bytes alone; the CUDA cores' FP32 peak for any other template.
    types = compute_types(built.spec)
    no_compute_roof = no_roofline_reason(workload, ceilings, types) is not None
    least = memory_us if no_compute_roof else bound_us(ceilings, workload.flops, workload.compulsory_bytes, types)
    bound = "memory" if memory_us >= least * (1 - 1e-12) else "compute"  # equal, but for rounding: memory
    kernel = analyze_resources(built, binary).kernels[0]
    tiling = _tiling(built)
    registers = kernel.registers if isinstance(kernel.registers, int) else None
    spills = kernel.spill_bytes if isinstance(kernel.spill_bytes, int) else None
    occ = kernel.occupancy
    loop = tile_loop(built, ceilings)
    if registers is None and like is not None and like.registers is not None:
        registers, spills = _estimated_registers(like, tiling.outputs_per_thread, loop)
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
    facts = Facts(device, least, bound, len(built.kernels),
                 first.blocks, kernel.threads_per_block, kernel.shared_bytes, occ.blocks_per_sm,
                 occ.limiter, registers, spills, math.prod(workload.output_shape()), tiling.outputs_per_thread,
                 tiling.loads, shared, globals_, _ffma_share(built, binary), _staged_steps(built),
                 "cp.async" in built.cuda, measured_us, dict(counters or {}), no_compute_roof, tiling.stage_outputs,
                 tiling.threads_per_output, tiling.compulsory_loads(input_elements), _input_bytes(workload),
                 _input_reads(built, globals_), first_loads / element_bytes / threads if threads else None,
                 _tree_steps(built, globals_), _divergent_warp_steps(built), _masked_flops(built, globals_),
                 workload.flops, _tensor_core_us(built, ceilings), workload.compulsory_bytes,
                 *_kv_loads(built, min(first.blocks, occ.blocks_per_sm * device.sms)),
                 races=tuple(RaceFact(r.storage, r.sentence(), r.lines) for r in analyze_races(built).races))
    return replace(facts, warp_only_barriers=_warp_only_barriers(built), loop=loop, fma_loop=fma_loop(built, ceilings),
                   roof=_roof(ceilings, device, workload.flops, facts.bound_us, facts.bound),
                   launches=_launches(built), **_stores(built))


def _launches(built: Build) -> int:
    """The kernel launches the host function makes: each call of a kernel, times the extents of the host loops
    around it (d2l's default depthwise schedule launches its kernel once per channel, from a loop on the host)."""
    names = {k.name for k in built.kernels}
    total = 0
    for func in (built.host_mod.functions.values() if built.host_mod is not None else ()):
        body = getattr(func, "body", None)
        if body is None:
            continue
        for stmt, loops in walk(body):
            call = getattr(stmt, "value", None) if isinstance(stmt, tirx.Evaluate) else None
            if isinstance(call, tvm.ir.Call) and call.args and isinstance(call.args[0], tvm.ir.StringImm) \
                    and str(call.args[0].value) in names:
                total += math.prod(int(loop.extent) if isinstance(loop.extent, tirx.IntImm) else 1 for loop in loops)
    return total


def _stores(built: Build) -> dict[str, int]:
    """The global stores' ``register_kept_bytes`` and ``stored_footprint`` (Facts). A store kept in a register:
    one whose address does not change over a loop around it (its index and guards do not use the loop's
    variable, the loop has no barrier, no other address of that buffer is touched in the loop), of a group of
    stores to that address one of which no condition guards (nvcc does not promote a conditional store). TVM
    marks a kernel's pointers ``__restrict__``, so nvcc keeps the element in a register over the loop and writes it
    once: the SASS of conv1d-v1 has one STG for the 33 stores of its 32-tap loop and the zero before it; conv1d-v2,
    whose stores sit under ``if (i < 16415)``, has 33. The stores to one address count once per iteration of their
    other loops: the largest of them, over its loops' repeats."""
    report = iter(analyze_coalescing(built).accesses)
    kept = footprint = 0
    for kernel in global_accesses(built):
        stores: dict = {}
        touched: dict = {}  # buffer -> {index key: loop variables around an access of it}
        for access in kernel.accesses:
            if access.duplicate_of:
                continue
            fact = next(report)
            key = StructuralKey(access.index)
            touched.setdefault(access.buffer, {}).setdefault(key, set()).update(loop.var for loop in access.loops)
            if access.op == "store" and not fact.not_modelled:
                stores.setdefault((access.buffer, key), []).append((access, fact.ideal_bytes))
        for (buffer, key), group in stores.items():
            other_loops = set().union(*(v for k, v in touched[buffer].items() if k != key))
            written = distinct = 0.0
            for access, nbytes in group:
                used = free_vars(access.index, kernel.bindings).union(
                    *(free_vars(cond, kernel.bindings) for cond, _ in access.guards))
                unused = [loop for loop in access.loops if loop.var not in used]
                distinct = max(distinct, nbytes / math.prod(loop.extent for loop in unused))
                repeats = math.prod(loop.extent for loop in unused
                                    if loop.var not in kernel.barrier_loops and loop.var not in other_loops)
                written = max(written, nbytes / repeats)
            footprint += int(round(distinct))
            if any(not access.guards for access, _ in group):
                kept += sum(nbytes for _, nbytes in group) - int(round(written))
    return {"register_kept_bytes": kept, "stored_footprint": footprint}


def _kv_loads(built: Build, resident_blocks: int) -> tuple[int, int, int, int]:
    """(query rows per block, bytes of K and V, bytes of K and V loaded, bytes of K and V of the heads
    whose blocks are on the GPU at once) for the written attention kernels, whose blocks walk the keys and
    values of their head in tiles, a head's blocks side by side; zeros for any other setting. The count
    is the template's (its tiles and loop), not the lowered TIR's: the access analysis does not see the
    cp.async copies, nor addresses computed through the block's head index."""
    knobs, workload = built.spec.knobs, built.spec.workload
    if not isinstance(knobs, (AttentionFusedKnobs, AttentionMmaKnobs)):
        return 0, 0, 0, 0
    sizes = _input_sizes(workload)
    kv_bytes, heads = sizes["K"] + sizes["V"], workload.batch * workload.heads
    # The blocks running at once cover this many heads, plus one whose blocks straddle the edge.
    in_flight = min(heads, -(-resident_blocks * knobs.block_q // workload.seq) + 1)
    return (knobs.block_q, kv_bytes, kv_bytes_loaded(workload, knobs.block_q, knobs.block_kv),
            kv_bytes * in_flight // heads)


def _tensor_core_us(built: Build, ceilings: Ceilings) -> float | None:
    """The roofline's least time of the workload on the tensor cores, where its 16-bit inputs are multiplied
    on the CUDA cores (Template.tensor_cores) and the ceilings have the tensor cores' peak for them."""
    workload = built.spec.workload
    types = tuple(workload.input_dtypes())
    if built.spec.template_def.tensor_cores or set(types) <= {FP32} or no_roofline_reason(workload, ceilings, types):
        return None
    return bound_us(ceilings, workload.flops, workload.compulsory_bytes, types)


def _masked_flops(built: Build, globals_) -> float:
    """FLOPs spent on masked scores: causal attention whose kernels store the score matrix S (the
    workload's stage of that name) compute every score and multiply every probability by V, twice
    the unmasked half the workload counts."""
    workload = built.spec.workload
    if not getattr(workload, "causal", False) or not any(g.op == "store" and g.buffer == "S" for g in globals_):
        return 0.0
    return float(workload.flops)


def _staged_steps(built: Build) -> int:
    """Iterations of the loops whose body has a barrier and a global load (tiles staged in shared
    memory), in the first kernel (one block's). A tree that only adds shared values between its
    barriers stages nothing."""

    kernel = shared_accesses(built)[0]
    globals_ = global_accesses(built)[0]
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


def _input_sizes(workload) -> dict[str, int]:
    """Each input's bytes, by name."""
    return {name: math.prod(shape) * numpy_dtype(dtype).itemsize for name, shape, dtype in
            zip(workload.input_names, workload.input_shapes(), workload.input_dtypes(), strict=True)}


def _input_bytes(workload) -> int:
    return sum(_input_sizes(workload).values())


def _input_reads(built: Build, globals_: tuple[GlobalFact, ...]) -> tuple[int, ...]:
    """Per kernel, the bytes of the workload's inputs it reads, each input counted once at most (a
    kernel that reads an element again finds it in a cache, the model's assumption): one kernel per
    pass reads the input once per pass."""
    sizes = _input_sizes(built.spec.workload)
    out = []
    for k in built.kernels:
        read = 0
        for name, size in sizes.items():
            read += min(size, sum(a.ideal_bytes for a in globals_
                                  if a.op == "load" and a.kernel == k.name and a.buffer == name))
        out.append(read)
    return tuple(out)


def _divergent_warp_steps(built: Build) -> int:
    """Σ over the tree's steps of the warps with an active lane, less the warps its active threads
    would fill side by side (0 for a setting without a written tree)."""
    report = analyze_tree(built.spec)
    if report is None:
        return 0
    return sum(max(0, step.warps - step.idle_warps - -(-step.active_threads // WARP_SIZE)) for step in report.steps)


def _roof(ceilings: Ceilings, device: Device, flops: int, least_us: float, bound: str) -> str:
    """The roof whose time the roofline's least time is, named as the Roofline tab names it."""
    if bound == "memory":
        return f"the {device.roof} bandwidth ({device.bandwidth_gbps:,.0f} GB/s)"
    gflops = flops / (least_us * 1e3)
    peaks = [("the CUDA cores' FP32 peak", ceilings.fp32_gflops),
             *((f"the {dtype} tensor-core peak", peak) for dtype, peak in ceilings.tensor_gflops)]
    name, peak = min(peaks, key=lambda item: abs(item[1] - gflops))
    return f"{name} ({peak:,.0f} GFLOP/s)"


def _warp_only_barriers(built: Build) -> int:
    """Steps of the tree whose adding threads all sit in the first warp and that end in __syncthreads()
    (0 for a setting without a written tree)."""
    report = analyze_tree(built.spec)
    if report is None:
        return 0
    return sum(step.barrier == BARRIERS[LOOP] and step.idle_warps == step.warps - 1 for step in report.steps)


def _tree_steps(built: Build, globals_: tuple[GlobalFact, ...]) -> int:
    """log2(threads per block) when the first kernel adds its threads' values in a tree: it waits at
    a barrier and stores at most one element per warp to global memory (a tile of outputs stores
    about one per thread; stores the analysis cannot model say nothing)."""
    first = built.kernels[0]
    kernel = shared_accesses(built)[0]
    if not kernel.barrier_loops and not any(a.epoch for a in kernel.accesses):
        return 0
    stored = sum(a.ideal_bytes for a in globals_ if a.op == "store" and a.kernel == first.name)
    element_bytes = numpy_dtype(built.spec.workload.output_dtype()).itemsize
    threads = first.threads_per_block
    if threads < 2 or not stored or stored / element_bytes * WARP_SIZE > first.blocks * threads:
        return 0
    return threads.bit_length() - 1


def _estimated_registers(like: Facts, outputs_per_thread: int | None,
                         loop: TileLoop | None = None) -> tuple[int, int | None]:
    if loop is not None and like.loop is not None and loop.fragments and like.loop.fragments:
        # The tile loops' accumulators and fragments: the compiled setting's registers (its spilled ones
        # counted back in), moved by the change in what the fragments take; beyond 255 they spill.
        wanted = like.registers + (like.spill_bytes or 0) // 4 + loop.fragments - like.loop.fragments
        return min(MAX_REGISTERS, max(16, wanted)), 4 * max(0, wanted - MAX_REGISTERS)
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
                 "plus one per extra output per thread (for a tensor-core tile loop, plus the change in the "
                 "registers its accumulators and fragments take, spilling beyond 255); spills shrink in proportion "
                 "to a smaller thread tile.")
MAX_REGISTERS = 255  # per thread
