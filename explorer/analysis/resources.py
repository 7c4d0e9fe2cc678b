"""Threads, shared memory and registers per block, and the occupancy they allow.

Occupancy = how many blocks of this kernel one SM can hold at once, the minimum of four
limits: threads (warps) per SM, blocks per SM, shared memory per SM and registers per SM.
Registers come from the compiled binary (``explorer.analysis.sass.compile_binary``: the cubin that
NVRTC compiles, read by the pip disassembler, or nvcc's report); without it the register
limit is reported as unknown ("not compiled").
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from ..build import warps_for
from ..errors import ExplorerError
from ..targets import WARP_SIZE


@dataclass(frozen=True)
class SMLimits:
    arch: str
    threads: int  # resident threads per SM
    blocks: int  # resident blocks per SM
    registers: int  # 32-bit registers per SM
    register_unit: int  # registers are allocated per warp in units of this many
    max_registers_per_thread: int
    shared: int  # shared memory per SM at the largest carveout, bytes
    shared_unit: int  # shared memory is allocated per block in units of this many bytes
    shared_reserved: int  # bytes the system reserves per block


# Per compute capability. Sources: CUDA C++ Programming Guide, "Compute Capabilities",
# table "Technical Specifications per Compute Capability" (threads, blocks, registers and
# shared memory per SM; 1 KB reserved per block from 8.0); the CUDA Occupancy Calculator
# (cuda_occupancy.h / Nsight Compute's occupancy calculator) for the allocation
# granularities: registers in units of 256 per warp, shared memory in units of 256 bytes
# (7.x) or 128 bytes (8.0+).
SM_LIMITS = {
    "sm_70": SMLimits("sm_70", 2048, 32, 65536, 256, 255, 96 * 1024, 256, 0),  # V100
    "sm_75": SMLimits("sm_75", 1024, 16, 65536, 256, 255, 64 * 1024, 256, 0),  # T4, RTX 20
    "sm_80": SMLimits("sm_80", 2048, 32, 65536, 256, 255, 164 * 1024, 128, 1024),  # A100
    "sm_86": SMLimits("sm_86", 1536, 16, 65536, 256, 255, 100 * 1024, 128, 1024),  # RTX 30, A10
    "sm_87": SMLimits("sm_87", 2048, 16, 65536, 256, 255, 164 * 1024, 128, 1024),  # Jetson Orin
    "sm_89": SMLimits("sm_89", 1536, 24, 65536, 256, 255, 100 * 1024, 128, 1024),  # RTX 40, L4, L40
    "sm_90": SMLimits("sm_90", 2048, 32, 65536, 256, 255, 228 * 1024, 128, 1024),  # H100, H200
}

NOT_COMPILED = "not compiled"
SUB_PARTITIONS = 4  # SM sub-partitions (warp schedulers) from sm_70 on


def sm_limits(arch: str) -> tuple[SMLimits, str]:
    """Limits for ``arch`` (``sm_90a`` uses sm_90's), and a note when a neighbour's are used."""
    found = re.fullmatch(r"sm_(\d+)[a-z]?", arch or "")
    if not found:
        raise ExplorerError(f"Occupancy needs a CUDA architecture such as sm_90, not '{arch}'.")
    number = int(found.group(1))
    key = f"sm_{number}"
    if key in SM_LIMITS:
        return SM_LIMITS[key], ""
    known = sorted(int(k[3:]) for k in SM_LIMITS)
    lower = [k for k in known if k <= number]
    if not lower:
        raise ExplorerError(f"No occupancy limits for {arch}; the table covers {', '.join(SM_LIMITS)}.")
    closest = f"sm_{lower[-1]}"
    return SM_LIMITS[closest], f"{arch} is not in the limits table; {closest}'s limits are used."


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
    notes.append("Occupancy assumes the largest shared-memory carveout and no dynamic shared memory.")
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
        lines.append(f"  occupancy: {occ.blocks_per_sm} blocks/SM ({occ.warps_per_sm} warps, {occ.occupancy:.0%}), "
                     f"limited by {occ.limiter} [blocks/SM allowed by: {limits}]")
    lines.extend(f"note: {n}" for n in report.notes)
    return "\n".join(lines)
