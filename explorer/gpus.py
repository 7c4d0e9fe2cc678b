"""The GPUs the explorer knows: the one home of every GPU fact that the analyses, the diagnosis,
the search and the templates read. An architecture (``ARCHITECTURES``) has the occupancy limits per
SM and the shared memory a block may opt in to; a GPU (``GPUS``, by its name within its
architecture: H100 SXM, H100 PCIe, H200) has its SMs and FP32 lanes and its published peaks.
Adding a GPU of a known architecture is one entry of ``GPUS``; a new architecture, one entry of
``ARCHITECTURES`` and its GPUs.

An architecture with a letter (``sm_90a``: Hopper's arch-specific features) is its number's
entry; an architecture stands for its first GPU in ``GPUS`` wherever no GPU is named. Figures
measured on the machine's own GPU (explorer.measure's ceilings, the device's SM count) take
precedence over the published ones wherever a GPU is present.
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
    """A vendor's datasheet figures (boost clocks) of one GPU."""

    fp32_gflops: float  # dense, on the CUDA cores
    memory: str  # the device memory behind the "HBM" roof
    hbm_gbps: float
    l2_bytes: int
    reference: str  # the document the figures are from
    # Tensor cores: dense (without structured sparsity, which doubles the datasheets' headline
    # figures), float32 accumulation, by input type.
    tensor_gflops: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Architecture:
    arch: str
    limits: SMLimits | None = None
    max_shared_per_block: int | None = None  # dynamic shared memory a block may opt in to, bytes


@dataclass(frozen=True)
class GPU:
    """One GPU of an architecture, as its datasheet describes it."""

    name: str  # within its architecture: "H100 SXM", "H100 PCIe", "H200"
    arch: str
    sms: int | None = None
    fp32_lanes: int | None = None  # FP32 lanes per SM: peak = SMs × lanes × 2 × clock
    published: Published | None = None
    device_names: tuple[str, ...] = ()  # what the CUDA driver calls it (``tvm.cuda().device_name``)

    @property
    def limits(self) -> SMLimits | None:
        return ARCHITECTURES[self.arch].limits

    @property
    def max_shared_per_block(self) -> int | None:
        return ARCHITECTURES[self.arch].max_shared_per_block


def _limits(arch, threads, blocks, shared_kb, shared_unit, reserved):
    return SMLimits(arch, threads, blocks, 65536, 256, 255, shared_kb * KB, shared_unit, reserved)


# Occupancy limits: CUDA C++ Programming Guide, "Compute Capabilities", table "Technical
# Specifications per Compute Capability" (threads, blocks, registers and shared memory per SM; 1 KB
# reserved per block from 8.0; the opt-in dynamic shared memory per block); the CUDA Occupancy
# Calculator (cuda_occupancy.h) for the allocation units: registers in units of 256 per warp, shared
# memory in units of 256 bytes (7.x) or 128 bytes (8.0+).
ARCHITECTURES = {entry.arch: entry for entry in (
    Architecture("sm_70", _limits("sm_70", 2048, 32, 96, 256, 0)),  # V100
    Architecture("sm_75", _limits("sm_75", 1024, 16, 64, 256, 0)),  # T4
    Architecture("sm_80", _limits("sm_80", 2048, 32, 164, 128, 1024), 163 * KB),  # A100
    Architecture("sm_86", _limits("sm_86", 1536, 16, 100, 128, 1024), 99 * KB),  # RTX 30, A10
    Architecture("sm_87", _limits("sm_87", 2048, 16, 164, 128, 1024), 163 * KB),  # Jetson Orin
    Architecture("sm_89", _limits("sm_89", 1536, 24, 100, 128, 1024), 99 * KB),  # RTX 40, L4
    Architecture("sm_90", _limits("sm_90", 2048, 32, 228, 128, 1024), 227 * KB),  # H100, H200
    Architecture("sm_100", max_shared_per_block=227 * KB),
    Architecture("sm_120", max_shared_per_block=99 * KB),
)}
# SMs, FP32 lanes and peaks: the vendors' datasheets named in each entry (None of them publishes the
# L2's bandwidth, so published ceilings have no L2 roof). An architecture's first GPU here is the one
# it stands for where no GPU is named.
GPUS = {gpu.name: gpu for gpu in (
    GPU("Tesla T4", "sm_75", 40, 64, Published(8_100, "GDDR6", 320, 4 * MB,
                                               "NVIDIA T4 Tensor Core GPU datasheet", (("float16", 65_000),)),
        ("Tesla T4",)),  # the T4 (Turing) has no bfloat16
    GPU("A100 SXM 80GB", "sm_80", 108, 64, Published(19_500, "HBM2e", 2_039, 40 * MB,
                                                     "NVIDIA A100 Tensor Core GPU datasheet",
                                                     (("bfloat16", 312_000), ("float16", 312_000))),
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB PCIe")),
    GPU("GeForce RTX 4090", "sm_89", 128, 128, Published(82_580, "GDDR6X", 1_008, 72 * MB,
                                                         "NVIDIA Ada GPU architecture whitepaper",
                                                         (("bfloat16", 165_200), ("float16", 165_200))),
        ("NVIDIA GeForce RTX 4090",)),
    GPU("H100 SXM", "sm_90", 132, 128, Published(67_000, "HBM3", 3_350, 50 * MB,
                                                 "NVIDIA H100 Tensor Core GPU datasheet",
                                                 (("bfloat16", 989_500), ("float16", 989_500))),
        ("NVIDIA H100 80GB HBM3",)),
    GPU("H100 PCIe", "sm_90", 114, 128, Published(51_000, "HBM2e", 2_000, 50 * MB,
                                                  "NVIDIA H100 Tensor Core GPU datasheet",
                                                  (("bfloat16", 756_500), ("float16", 756_500))),
        ("NVIDIA H100 PCIe",)),
    GPU("H200", "sm_90", 132, 128, Published(67_000, "HBM3e", 4_800, 50 * MB,
                                             "NVIDIA H200 Tensor Core GPU datasheet",
                                             (("bfloat16", 989_500), ("float16", 989_500))),
        ("NVIDIA H200",)),
)}
# The GPU a machine without one generates code for (explorer.targets: an H100).
DEFAULT = GPUS["H100 SXM"]


def base_arch(arch: str | None) -> str | None:
    """``sm_90a`` → ``sm_90``; None for what is not a CUDA architecture."""
    found = re.fullmatch(r"(sm_\d+)[a-z]?", arch or "")
    return found.group(1) if found else None


def architecture_of(arch: str | None) -> Architecture | None:
    """The entry of ``arch`` (``sm_90a`` is sm_90's), or None."""
    return ARCHITECTURES.get(base_arch(arch))


def gpu_of(arch: str | None, name: str | None = None) -> GPU | None:
    """The GPU called ``name`` (its name here, or what the CUDA driver calls it: "NVIDIA H200") among
    ``arch``'s, else the GPU the architecture stands for (its first), or None where the table has none."""
    key = base_arch(arch)
    mine = [gpu for gpu in GPUS.values() if gpu.arch == key]
    wanted = (name or "").strip().lower()
    named = [gpu for gpu in mine if wanted in (gpu.name.lower(), *(n.lower() for n in gpu.device_names))]
    return (named or mine or [None])[0]


def nearest_limits(arch: str) -> tuple[SMLimits, str]:
    """Occupancy limits for ``arch``, and a note when an older architecture's are used."""
    key = base_arch(arch)
    if key is None:
        raise ExplorerError(f"Occupancy needs a CUDA architecture such as sm_90, not '{arch}'.")
    known = {entry.arch: entry.limits for entry in ARCHITECTURES.values() if entry.limits is not None}
    if key in known:
        return known[key], ""
    lower = sorted(int(k[3:]) for k in known if int(k[3:]) <= int(key[3:]))
    if not lower:
        raise ExplorerError(f"No occupancy limits for {arch}; the table covers {', '.join(known)}.")
    closest = f"sm_{lower[-1]}"
    return known[closest], f"{arch} is not in the limits table; {closest}'s limits are used."


def published_gpus() -> dict[str, Published]:
    """The published figures of every GPU, by the GPU's name."""
    return {gpu.name: gpu.published for gpu in GPUS.values() if gpu.published is not None}
