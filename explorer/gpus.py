"""The GPUs the explorer knows, one entry per CUDA architecture: the one home of every GPU fact
that the analyses, the diagnosis, the search and the templates read — occupancy limits per SM,
the shared memory a block may opt in to, the SMs and FP32 lanes of the GPU the architecture
stands for, and its published peaks. Adding a GPU is one entry of ``GPUS``.

An architecture with a letter (``sm_90a``: the H100's arch-specific features) is its number's
entry. Figures measured on the machine's own GPU (explorer.measure's ceilings, the device's SM
count) take precedence over the published ones wherever a GPU is present.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import ExplorerError

KB = 1024
MB = 1024 * KB
# Shared memory a block may allocate statically (``__shared__``), on every CUDA GPU; beyond it a
# block opts in to dynamic shared memory (``max_shared_per_block``).
STATIC_SHARED_PER_BLOCK = 48 * KB


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


@dataclass(frozen=True)
class Published:
    """A vendor's datasheet figures (boost clocks) for the GPU an architecture stands for."""

    name: str
    fp32_gflops: float  # dense, on the CUDA cores
    memory: str  # the device memory behind the "HBM" roof
    hbm_gbps: float
    l2_bytes: int
    reference: str  # the document the figures are from
    # Tensor cores: dense (without structured sparsity, which doubles the datasheets' headline
    # figures), float32 accumulation, by input type.
    tensor_gflops: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class GPU:
    arch: str
    limits: SMLimits | None = None
    max_shared_per_block: int | None = None  # dynamic shared memory a block may opt in to, bytes
    sms: int | None = None  # of the GPU the published figures are for
    fp32_lanes: int | None = None  # FP32 lanes per SM: peak = SMs × lanes × 2 × clock
    published: Published | None = None


def _limits(arch, threads, blocks, shared_kb, shared_unit, reserved):
    return SMLimits(arch, threads, blocks, 65536, 256, 255, shared_kb * KB, shared_unit, reserved)


# Occupancy limits: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
# Specifications per Compute Capability" (threads, blocks, registers and shared memory per SM; 1 KB
# reserved per block from 8.0; the opt-in dynamic shared memory per block); the CUDA Occupancy
# Calculator (cuda_occupancy.h) for the allocation units: registers in units of 256 per warp, shared
# memory in units of 256 bytes (7.x) or 128 bytes (8.0+). SMs, FP32 lanes and peaks: the vendors'
# datasheets named in each entry (None of them publishes the L2's bandwidth, so published ceilings
# have no L2 roof).
GPUS = {gpu.arch: gpu for gpu in (
    GPU("sm_70", _limits("sm_70", 2048, 32, 96, 256, 0)),  # V100
    GPU("sm_75", _limits("sm_75", 1024, 16, 64, 256, 0), sms=40, fp32_lanes=64,
        published=Published("Tesla T4", 8_100, "GDDR6", 320, 4 * MB, "NVIDIA T4 Tensor Core GPU datasheet",
                            (("float16", 65_000),))),  # the T4 (Turing) has no bfloat16
    GPU("sm_80", _limits("sm_80", 2048, 32, 164, 128, 1024), 163 * KB, sms=108, fp32_lanes=64,
        published=Published("A100 SXM 80GB", 19_500, "HBM2e", 2_039, 40 * MB, "NVIDIA A100 Tensor Core GPU datasheet",
                            (("bfloat16", 312_000), ("float16", 312_000)))),
    GPU("sm_86", _limits("sm_86", 1536, 16, 100, 128, 1024), 99 * KB),  # RTX 30, A10
    GPU("sm_87", _limits("sm_87", 2048, 16, 164, 128, 1024), 163 * KB),  # Jetson Orin
    GPU("sm_89", _limits("sm_89", 1536, 24, 100, 128, 1024), 99 * KB, sms=128, fp32_lanes=128,
        published=Published("GeForce RTX 4090", 82_580, "GDDR6X", 1_008, 72 * MB,
                            "NVIDIA Ada GPU architecture whitepaper", (("bfloat16", 165_200), ("float16", 165_200)))),
    GPU("sm_90", _limits("sm_90", 2048, 32, 228, 128, 1024), 227 * KB, sms=132, fp32_lanes=128,
        published=Published("H100 SXM", 67_000, "HBM3", 3_350, 50 * MB, "NVIDIA H100 Tensor Core GPU datasheet",
                            (("bfloat16", 989_500), ("float16", 989_500)))),
    GPU("sm_100", max_shared_per_block=227 * KB),
    GPU("sm_120", max_shared_per_block=99 * KB),
)}
# The GPU a machine without one generates code for (explorer.targets: an H100).
DEFAULT = GPUS["sm_90"]


def base_arch(arch: str | None) -> str | None:
    """``sm_90a`` → ``sm_90``; None for what is not a CUDA architecture."""
    found = re.fullmatch(r"(sm_\d+)[a-z]?", arch or "")
    return found.group(1) if found else None


def gpu_of(arch: str | None) -> GPU | None:
    """The entry of ``arch`` (``sm_90a`` is sm_90's), or None."""
    return GPUS.get(base_arch(arch))


def nearest_limits(arch: str) -> tuple[SMLimits, str]:
    """Occupancy limits for ``arch``, and a note when an older architecture's are used."""
    key = base_arch(arch)
    if key is None:
        raise ExplorerError(f"Occupancy needs a CUDA architecture such as sm_90, not '{arch}'.")
    known = {gpu.arch: gpu.limits for gpu in GPUS.values() if gpu.limits is not None}
    if key in known:
        return known[key], ""
    lower = sorted(int(k[3:]) for k in known if int(k[3:]) <= int(key[3:]))
    if not lower:
        raise ExplorerError(f"No occupancy limits for {arch}; the table covers {', '.join(known)}.")
    closest = f"sm_{lower[-1]}"
    return known[closest], f"{arch} is not in the limits table; {closest}'s limits are used."


def published_gpus() -> dict[str, Published]:
    return {gpu.arch: gpu.published for gpu in GPUS.values() if gpu.published is not None}
