"""Threads, shared memory and registers per block, and the occupancy they allow.

Occupancy = how many blocks of this kernel one SM can hold at once, the minimum of four
limits: threads (warps) per SM, blocks per SM, shared memory per SM and registers per SM.
Registers come from the compiled binary (``explorer.analysis.sass.compile_binary``: the cubin that
NVRTC compiles, read by the pip disassembler, or nvcc's report); without it the register
limit is reported as unknown ("not compiled").
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..build import warps_for
from ..errors import ExplorerError
from ..gpus import SMLimits, nearest_limits
from ..targets import WARP_SIZE
from ..units import count

NOT_COMPILED = "not compiled"
SUB_PARTITIONS = 4  # SM sub-partitions (warp schedulers) from sm_70 on


def sm_limits(arch: str) -> tuple[SMLimits, str]:
    """Limits for ``arch`` (``sm_90a`` uses sm_90's), and a note when a neighbour's are used."""
    return nearest_limits(arch)


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int
    limiter: str  # threads | blocks | shared memory | registers
    limits: dict  # limiter name -> blocks per SM it allows (None when unknown)
    warps_per_sm: int
    occupancy: float  # active warps / the SM's maximum warps


@dataclass(frozen=True)
class KernelResources:
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    threads_per_block: int
    shared_bytes: int  # static shared memory per block
    registers: int | str  # per thread, or "not compiled"
    spill_bytes: int | str
    occupancy: Occupancy


@dataclass(frozen=True)
class ResourceReport:
    arch: str
    limits: SMLimits
    kernels: tuple[KernelResources, ...]
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return asdict(self)


def occupancy(limits: SMLimits, threads: int, shared_bytes: int, registers: int | None) -> Occupancy:
    """Active blocks per SM for one block shape, and which resource limits it."""
    warps = warps_for(threads)
    allowed = {
        "threads": (limits.threads // WARP_SIZE) // warps if warps else limits.blocks,
        "blocks": limits.blocks,
    }
    per_block = _round_up(shared_bytes + limits.shared_reserved, limits.shared_unit) if shared_bytes else 0
    allowed["shared memory"] = limits.shared // per_block if per_block else limits.blocks
    if registers is None:
        allowed["registers"] = None
    elif registers > limits.max_registers_per_thread:
        allowed["registers"] = 0
    else:
        # A warp's registers come from one of the SM's 4 sub-partitions (cuda_occupancy.h).
        per_warp = _round_up(max(registers, 1) * WARP_SIZE, limits.register_unit)
        warps_by_registers = (limits.registers // SUB_PARTITIONS // per_warp) * SUB_PARTITIONS
        allowed["registers"] = warps_by_registers // warps
    known = {name: n for name, n in allowed.items() if n is not None}
    limiter = min(known, key=lambda name: known[name])  # dict order breaks ties: threads first
    blocks = known[limiter]
    return Occupancy(blocks, limiter, allowed, blocks * warps, blocks * warps / (limits.threads // WARP_SIZE))


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def analyze_resources(built, binary=None) -> ResourceReport:
    """Resources of each kernel of a build; ``binary`` is ``compile_binary(built)`` or None."""
    if not built.kernels:
        raise ExplorerError("A CPU build has no CUDA kernels to measure.")
    limits, note = sm_limits(str(built.target.arch))
    kernels = []
    for k in built.kernels:
        registers = binary.registers.get(k.name) if binary is not None else None
        spills = binary.spill_bytes.get(k.name, 0) if binary is not None else NOT_COMPILED
        kernels.append(KernelResources(
            kernel=k.name, grid=k.grid, block=k.block, threads_per_block=k.threads_per_block,
            shared_bytes=k.shared_bytes,
            registers=registers if registers is not None else NOT_COMPILED,
            spill_bytes=spills,
            occupancy=occupancy(limits, k.threads_per_block, k.shared_bytes, registers),
        ))
    notes = [n for n in (note,) if n]
    notes.append("Occupancy assumes the largest shared-memory carveout; shared memory counts what the kernel "
                 "declares, static and dynamic.")
    if binary is None:
        notes.append("Registers are unknown until the kernel is compiled; occupancy ignores the register limit.")
    else:
        notes.append(f"Registers and spills: {'the cubin NVRTC compiles' if binary.tool == 'nvrtc' else 'ptxas'} "
                     f"for {binary.arch}.")
    return ResourceReport(str(built.target.arch), limits, tuple(kernels), tuple(notes))


def format_resources(report: ResourceReport) -> str:
    lines = [f"target {report.arch}: per SM {report.limits.threads} threads, {report.limits.blocks} blocks, "
             f"{report.limits.registers:,} registers, {report.limits.shared // 1024} KB shared memory"]
    for k in report.kernels:
        occ = k.occupancy
        limits = ", ".join(f"{name} {n if n is not None else '?'}" for name, n in occ.limits.items())
        lines.append(
            f"kernel {k.kernel}: grid {k.grid}, block {k.block} = {k.threads_per_block} threads, "
            f"{k.shared_bytes:,} B shared, registers/thread {k.registers}, spills {k.spill_bytes}"
        )
        lines.append(f"  occupancy: {count(occ.blocks_per_sm, 'block')}/SM ({count(occ.warps_per_sm, 'warp')}, "
                     f"{occ.occupancy:.0%}), "
                     f"limited by {occ.limiter} [blocks/SM allowed by: {limits}]")
    lines.extend(f"note: {n}" for n in report.notes)
    return "\n".join(lines)
