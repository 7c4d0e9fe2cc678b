"""The roofline: where a workload can sit on a GPU, and where a measured setting sits.

A kernel that does ``flops`` of work over at least ``compulsory_bytes`` of memory traffic
(every input read once, the output written once) has the arithmetic intensity
``flops / compulsory_bytes`` (FLOP per byte). On a GPU whose FP32 peak is P GFLOP/s and
whose memory delivers B GB/s, it can run at most at ``min(P, intensity × B)`` GFLOP/s: the
*attainable* performance. A measured latency gives the achieved GFLOP/s; achieved ÷
attainable is how close the setting is to the roof.

Which bandwidth applies: the measurements launch a kernel back to back on the same buffers,
so a workload whose compulsory bytes fit in the L2 cache finds them there from the second
launch on, and its ceiling is the L2's bandwidth; a larger one streams from HBM. The
ceilings come from :mod:`explorer.measure.ceilings` on a GPU (measured once per device) or,
without one, from the published figures below, labelled as such.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from ..errors import ExplorerError

MEASURED = "measured"
PUBLISHED = "published"
STATIC = "static estimate"


@dataclass(frozen=True)
class Ceilings:
    """A device's roofs. ``l2_gbps`` is None where no figure exists (vendors do not publish
    the L2's bandwidth); ``source`` says where the figures come from."""

    fp32_gflops: float
    hbm_gbps: float
    l2_gbps: float | None
    l2_bytes: int
    source: str  # "measured on <device>" or "published figures for <GPU>"

    @property
    def measured(self) -> bool:
        return self.source.startswith(MEASURED)

    def bandwidth_for(self, compulsory_bytes: int) -> tuple[float, str]:
        """The bandwidth roof for a workload of ``compulsory_bytes``, and its name."""
        if self.l2_gbps is not None and compulsory_bytes <= self.l2_bytes:
            return self.l2_gbps, "L2-resident"
        return self.hbm_gbps, "HBM"

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class PublishedGPU:
    name: str
    fp32_gflops: float
    memory: str  # the device memory behind the "HBM" roof
    hbm_gbps: float
    l2_bytes: int
    reference: str  # the document the figures are from


MB = 1024 * 1024
# Vendors' datasheet figures (boost clocks; dense FP32 on the CUDA cores, no tensor cores).
# None of them publishes the L2 cache's bandwidth, so published ceilings have no L2 roof.
PUBLISHED_GPUS = {
    "sm_90": PublishedGPU("H100 SXM", 67_000, "HBM3", 3_350, 50 * MB, "NVIDIA H100 Tensor Core GPU datasheet"),
    "sm_80": PublishedGPU("A100 SXM 80GB", 19_500, "HBM2e", 2_039, 40 * MB, "NVIDIA A100 Tensor Core GPU datasheet"),
    "sm_75": PublishedGPU("Tesla T4", 8_100, "GDDR6", 320, 4 * MB, "NVIDIA T4 Tensor Core GPU datasheet"),
    "sm_89": PublishedGPU("GeForce RTX 4090", 82_580, "GDDR6X", 1_008, 72 * MB,
                          "NVIDIA Ada GPU architecture whitepaper"),
}


def published_ceilings(arch: str) -> Ceilings:
    """The published figures for a CUDA architecture (``sm_90a`` uses sm_90's)."""
    found = re.fullmatch(r"(sm_\d+)[a-z]?", arch or "")
    gpu = PUBLISHED_GPUS.get(found.group(1)) if found else None
    if gpu is None:
        raise ExplorerError(f"No published figures for {arch or 'this target'}; the table covers "
                            f"{', '.join(f'{a} ({g.name})' for a, g in PUBLISHED_GPUS.items())}. Measure on a GPU.")
    return Ceilings(gpu.fp32_gflops, gpu.hbm_gbps, None, gpu.l2_bytes,
                    f"{PUBLISHED} figures for {gpu.name}, {gpu.memory} ({gpu.reference})")


def intensity(flops: int, compulsory_bytes: int) -> float:
    """FLOP per compulsory byte."""
    return flops / compulsory_bytes


def attainable_gflops(ceilings: Ceilings, flop_per_byte: float, bandwidth_gbps: float) -> float:
    return min(ceilings.fp32_gflops, flop_per_byte * bandwidth_gbps)


def bound_us(ceilings: Ceilings, flops: int, compulsory_bytes: int) -> float:
    """The least time the roofline allows: the work at peak or the bytes at the roof's
    bandwidth, whichever is longer. ``bound_us / latency_us`` = achieved ÷ attainable."""
    bandwidth, _ = ceilings.bandwidth_for(compulsory_bytes)
    return max(flops / ceilings.fp32_gflops, compulsory_bytes / bandwidth) / 1e3


@dataclass(frozen=True)
class Point:
    """One setting on the roofline: measured (a latency) or a static estimate."""

    label: str
    intensity: float  # FLOP / compulsory byte
    gflops: float
    latency_us: float
    kind: str  # MEASURED or STATIC
    percent_of_attainable: float


def point(label: str, flops: int, compulsory_bytes: int, latency_us: float, ceilings: Ceilings,
          kind: str = MEASURED) -> Point:
    return Point(label, intensity(flops, compulsory_bytes), flops / latency_us / 1e3, latency_us, kind,
                 100 * bound_us(ceilings, flops, compulsory_bytes) / latency_us)


@dataclass(frozen=True)
class Roofline:
    """The data behind the figure: the workload's intensity, the device's roofs, the
    current setting's point (measured, or a static estimate), and this session's tries."""

    workload: str
    flops: int
    compulsory_bytes: int
    ceilings: Ceilings
    current: Point
    tries: tuple[Point, ...]
    notes: tuple[str, ...]

    @property
    def intensity(self) -> float:
        return intensity(self.flops, self.compulsory_bytes)

    @property
    def roof(self) -> tuple[float, str]:
        """The bandwidth roof that applies to this workload, and its name."""
        return self.ceilings.bandwidth_for(self.compulsory_bytes)

    @property
    def attainable_gflops(self) -> float:
        return attainable_gflops(self.ceilings, self.intensity, self.roof[0])

    def ridge(self, bandwidth_gbps: float) -> float:
        """The intensity where a bandwidth roof meets the compute roof."""
        return self.ceilings.fp32_gflops / bandwidth_gbps

    def to_dict(self) -> dict:
        return {
            "workload": self.workload, "flops": self.flops, "compulsory_bytes": self.compulsory_bytes,
            "intensity_flop_per_byte": self.intensity, "ceilings": self.ceilings.to_dict(),
            "roof": self.roof[1], "attainable_gflops": self.attainable_gflops,
            "current": asdict(self.current), "tries": [asdict(t) for t in self.tries], "notes": list(self.notes),
        }


def no_roofline_reason(workload) -> str | None:
    """Why this roofline does not apply to ``workload``, or None: its compute roof is the
    FP32 peak of the CUDA cores, and 16-bit matrices are multiplied on the tensor cores."""
    others = sorted(set(workload.input_dtypes()) - {"float32"})
    if not others:
        return None
    return (f"No roofline for {' and '.join(others)} inputs: its compute roof is the FP32 peak of the CUDA cores, "
            f"and {' and '.join(others)} matrices are multiplied on the tensor cores, whose peak is not measured "
            f"here. Compare the kernel's TFLOP/s with PyTorch's (cuBLAS) instead.")


def roofline(workload, ceilings: Ceilings, latency_us: float | None = None,
             tries: tuple[tuple[str, object, float], ...] = ()) -> Roofline:
    """The roofline of ``workload`` (an ``explorer.workloads.Workload``) on ``ceilings``.

    ``latency_us``: the current setting's measured median; without it the current point is
    a static estimate, the roof itself (the best any schedule can do: a real one is
    slower). ``tries``: (label, workload, latency µs) of this session's measured settings,
    each placed at its own workload's intensity. Raises ExplorerError where the roofline
    does not apply (:func:`no_roofline_reason`)."""
    if reason := no_roofline_reason(workload):
        raise ExplorerError(reason)
    flops, nbytes = workload.flops, workload.compulsory_bytes
    fits = nbytes <= ceilings.l2_bytes
    notes = [f"Ceilings: {ceilings.source}.",
             f"{nbytes / MB:.1f} MiB of compulsory traffic {'fit' if fits else 'do not fit'} in the "
             f"{ceilings.l2_bytes / MB:.0f} MiB L2: the roof is {ceilings.bandwidth_for(nbytes)[1]}."]
    if ceilings.l2_gbps is None:
        notes.append("No L2 roof: vendors do not publish the L2's bandwidth; it is measured on a GPU."
                     + (" This workload fits in L2, so kernels launched back to back can beat the HBM roof."
                        if fits else ""))
    if latency_us is None:
        current = point("this setting", flops, nbytes, bound_us(ceilings, flops, nbytes), ceilings, STATIC)
        notes.append("Static estimate: without a measurement the setting is placed on the roof, the best any "
                     "schedule of this workload can do; a measured kernel sits below it.")
    else:
        current = point("this setting", flops, nbytes, latency_us, ceilings)
    placed = tuple(point(label, w.flops, w.compulsory_bytes, us, ceilings) for label, w, us in tries)
    return Roofline(workload.label(), flops, nbytes, ceilings, current, placed, tuple(notes))


def format_roofline(r: Roofline) -> str:
    """The roofline as text (``python -m explorer show … --view roofline``)."""
    c = r.ceilings
    bandwidth, roof = r.roof
    bound_by = "memory" if r.intensity < r.ridge(bandwidth) else "compute"
    lines = [f"{r.workload}: {r.flops:,} FLOPs over {r.compulsory_bytes:,} compulsory bytes = "
             f"{r.intensity:.2f} FLOP/byte",
             f"ceilings ({c.source}): FP32 {c.fp32_gflops:,.0f} GFLOP/s, HBM {c.hbm_gbps:,.0f} GB/s, "
             f"L2-resident {'—' if c.l2_gbps is None else f'{c.l2_gbps:,.0f} GB/s'}",
             f"roof: {roof} at {bandwidth:,.0f} GB/s, ridge at {r.ridge(bandwidth):.1f} FLOP/byte; attainable "
             f"{r.attainable_gflops:,.0f} GFLOP/s ({bound_by}-bound)"]
    for p in (r.current, *r.tries):
        lines.append(f"{p.label} ({p.kind}): {p.latency_us:.2f} µs, {p.gflops:,.0f} GFLOP/s, "
                     f"{p.percent_of_attainable:.0f}% of attainable")
    return "\n".join(lines + list(r.notes))
