"""The roofline: where a workload can sit on a GPU, and where a measured setting sits.

A kernel that does ``flops`` of work over at least ``compulsory_bytes`` of memory traffic
(every input read once, the output written once) has the arithmetic intensity
``flops / compulsory_bytes`` (FLOP per byte). On a GPU whose compute peak is P GFLOP/s and
whose memory delivers B GB/s, it can run at most at ``min(P, intensity × B)`` GFLOP/s: the
*attainable* performance. P is the peak of the units that multiply: the tensor cores' peak
(float32 accumulation) for the float16 and bfloat16 inputs of a template that multiplies on them,
the CUDA cores' FP32 peak for every other (:func:`compute_types`: a template's own fact). A
measured latency gives the achieved GFLOP/s; achieved ÷ attainable is how close the setting is to
the roof.

Which bandwidth applies: the measurements launch a kernel back to back on the same buffers,
so a workload whose compulsory bytes fit in the L2 cache finds them there from the second
launch on, and its ceiling is the L2's bandwidth; a larger one streams from HBM. The
ceilings come from :mod:`explorer.measure.ceilings` on a GPU (measured once per device) or,
without one, from the published figures below, labelled as such.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from ..errors import ExplorerError
from ..gpus import MB, gpu_of, published_gpus

MEASURED = "measured"
PUBLISHED = "published"
STATIC = "static estimate"
FP32 = "float32"
# What ceilings without a tensor-core peak say, where nothing more precise is known.
NO_TENSOR_PEAK = "these ceilings have no tensor-core peak"


@dataclass(frozen=True)
class Ceilings:
    """A device's roofs. ``l2_gbps`` is None where no figure exists (vendors do not publish
    the L2's bandwidth); ``source`` says where the figures come from. ``tensor_gflops``:
    the tensor cores' peak with float32 accumulation, as (input type, GFLOP/s) pairs (a
    tuple, so that ceilings stay hashable); empty where it is not known, and
    ``no_tensor_peak`` then says why in a sentence's clause."""

    fp32_gflops: float
    hbm_gbps: float
    l2_gbps: float | None
    l2_bytes: int
    source: str  # "measured on <device>" or "published figures for <GPU>"
    tensor_gflops: tuple[tuple[str, float], ...] = ()
    no_tensor_peak: str = NO_TENSOR_PEAK  # the default: ceilings recorded without one

    @property
    def measured(self) -> bool:
        return self.source.startswith(MEASURED)

    def bandwidth_for(self, compulsory_bytes: int) -> tuple[float, str]:
        """The bandwidth roof for a workload of ``compulsory_bytes``, and its name."""
        if self.l2_gbps is not None and compulsory_bytes <= self.l2_bytes:
            return self.l2_gbps, "L2-resident"
        return self.hbm_gbps, "HBM"

    def tensor_peak(self, dtype: str) -> float | None:
        """The tensor cores' GFLOP/s for ``dtype`` inputs, or None."""
        return dict(self.tensor_gflops).get(dtype)

    def compute_roof(self, input_dtypes: tuple[str, ...]) -> tuple[float, str]:
        """The compute roof of a kernel that multiplies these types, and its name: the CUDA
        cores' FP32 peak for float32, the tensor cores' peak for 16-bit types (a kernel that
        multiplies 16-bit inputs on the CUDA cores multiplies float32: :func:`compute_types`).
        Raises ExplorerError where there is none."""
        others = sorted(set(input_dtypes) - {FP32})
        if not others:
            return self.fp32_gflops, "FP32"
        peak = self.tensor_peak(others[0]) if len(others) == 1 else None
        if peak is None:
            raise ExplorerError(self._no_compute_roof(others))
        return peak, f"{others[0]} tensor-core"

    def _no_compute_roof(self, dtypes: list[str]) -> str:
        typed = " and ".join(dtypes)
        why = (f"these ceilings give it for {' and '.join(d for d, _ in self.tensor_gflops)} only"
               if self.tensor_gflops else self.no_tensor_peak)
        return (f"No roofline for {typed} inputs: {typed} matrices are multiplied on the tensor cores, and {why}. "
                f"Compare the kernel's TFLOP/s with PyTorch's (cuBLAS) instead.")

    def to_dict(self) -> dict:
        return {**asdict(self), "tensor_gflops": dict(self.tensor_gflops)}


def published_ceilings(arch: str) -> Ceilings:
    """The published figures for a CUDA architecture (``sm_90a`` uses sm_90's)."""
    entry = gpu_of(arch)
    gpu = entry.published if entry else None
    if gpu is None:
        raise ExplorerError(f"No published figures for {arch or 'this target'}; the table covers "
                            f"{', '.join(f'{a} ({g.name})' for a, g in published_gpus().items())}. Measure on a GPU.")
    return Ceilings(gpu.fp32_gflops, gpu.hbm_gbps, None, gpu.l2_bytes,
                    f"{PUBLISHED} figures for {gpu.name}, {gpu.memory} ({gpu.reference})", gpu.tensor_gflops)


def compute_types(spec) -> tuple[str, ...]:
    """The types that choose the compute roof of ``spec`` (an ``explorer.build.Spec``;
    :meth:`Ceilings.compute_roof`): its workload's inputs where its template multiplies on the tensor
    cores (``Template.tensor_cores``), float32 (the CUDA cores' FP32 peak) where it multiplies on the
    CUDA cores, which it does in float32 whatever the inputs' type."""
    return tuple(spec.workload.input_dtypes()) if spec.template_def.tensor_cores else (FP32,)


def intensity(flops: int, compulsory_bytes: int) -> float:
    """FLOP per compulsory byte."""
    return flops / compulsory_bytes


def attainable_gflops(peak_gflops: float, flop_per_byte: float, bandwidth_gbps: float) -> float:
    return min(peak_gflops, flop_per_byte * bandwidth_gbps)


def bound_us(ceilings: Ceilings, flops: int, compulsory_bytes: int, input_dtypes: tuple[str, ...] = (FP32,)) -> float:
    """The least time the roofline allows: the work at the compute roof of ``input_dtypes``
    or the bytes at the roof's bandwidth, whichever is longer. ``bound_us / latency_us`` =
    achieved ÷ attainable. Raises ExplorerError where there is no compute roof."""
    peak, _ = ceilings.compute_roof(input_dtypes)
    bandwidth, _ = ceilings.bandwidth_for(compulsory_bytes)
    return max(flops / peak, compulsory_bytes / bandwidth) / 1e3


@dataclass(frozen=True)
class Point:
    """One setting on the roofline: measured (a latency) or a static estimate."""

    label: str
    intensity: float  # FLOP / compulsory byte
    gflops: float
    latency_us: float
    kind: str  # MEASURED or STATIC
    percent_of_attainable: float


def point(label: str, workload, latency_us: float, ceilings: Ceilings, kind: str = MEASURED,
          types: tuple[str, ...] | None = None) -> Point:
    """``workload`` (an ``explorer.workloads.Workload``) run in ``latency_us``, under its own roofs: the
    compute roof of ``types`` (:func:`compute_types`; None: its inputs' types, as on the tensor cores)."""
    flops, nbytes = workload.flops, workload.compulsory_bytes
    types = tuple(workload.input_dtypes()) if types is None else types
    return Point(label, intensity(flops, nbytes), flops / latency_us / 1e3, latency_us, kind,
                 100 * bound_us(ceilings, flops, nbytes, types) / latency_us)


@dataclass(frozen=True)
class Roofline:
    """The data behind the figure: the workload's intensity, the device's roofs, the
    current setting's point (measured, or a static estimate), and this session's tries."""

    workload: str
    flops: int
    compulsory_bytes: int
    compute_types: tuple[str, ...]  # they choose the compute roof (compute_types)
    ceilings: Ceilings
    current: Point
    tries: tuple[Point, ...]
    notes: tuple[str, ...]
    # The tensor cores' peak for these inputs and its name, where they are 16-bit and the kernel multiplies
    # them on the CUDA cores: what a template that uses the tensor cores could reach (None otherwise).
    unused_tensor_roof: tuple[float, str] | None = None

    @property
    def intensity(self) -> float:
        return intensity(self.flops, self.compulsory_bytes)

    @property
    def roof(self) -> tuple[float, str]:
        """The bandwidth roof that applies to this workload, and its name."""
        return self.ceilings.bandwidth_for(self.compulsory_bytes)

    @property
    def compute_roof(self) -> tuple[float, str]:
        """The compute roof (GFLOP/s) of this workload's inputs, and its name."""
        return self.ceilings.compute_roof(self.compute_types)

    @property
    def attainable_gflops(self) -> float:
        return attainable_gflops(self.compute_roof[0], self.intensity, self.roof[0])

    def ridge(self, bandwidth_gbps: float) -> float:
        """The intensity where a bandwidth roof meets the compute roof."""
        return self.compute_roof[0] / bandwidth_gbps

    def to_dict(self) -> dict:
        peak, name = self.compute_roof
        return {
            "workload": self.workload, "flops": self.flops, "compulsory_bytes": self.compulsory_bytes,
            "intensity_flop_per_byte": self.intensity, "ceilings": self.ceilings.to_dict(),
            "roof": self.roof[1], "compute_roof": name, "compute_roof_gflops": peak,
            "attainable_gflops": self.attainable_gflops,
            "current": asdict(self.current), "tries": [asdict(t) for t in self.tries], "notes": list(self.notes),
        }


def no_roofline_reason(workload, ceilings: Ceilings, types: tuple[str, ...] | None = None) -> str | None:
    """Why ``ceilings`` give ``workload`` no roofline under the compute roof of ``types``
    (:func:`compute_types`; None: its inputs' types), or None: 16-bit matrices multiplied on the
    tensor cores, and ceilings that lack their peak (:meth:`Ceilings.compute_roof`)."""
    try:
        ceilings.compute_roof(tuple(workload.input_dtypes()) if types is None else types)
    except ExplorerError as error:
        return str(error)
    return None


def roofline(workload, ceilings: Ceilings, latency_us: float | None = None,
             tries: tuple[tuple[str, object, float, tuple[str, ...]], ...] = (),
             types: tuple[str, ...] | None = None) -> Roofline:
    """The roofline of ``workload`` (an ``explorer.workloads.Workload``) on ``ceilings``, under the
    compute roof of ``types`` (:func:`compute_types` of the setting; None: its inputs' types, as a
    template that multiplies them on the tensor cores).

    ``latency_us``: the current setting's measured median; without it the current point is
    a static estimate, the roof itself (the best any schedule can do: a real one is
    slower). ``tries``: (label, workload, latency µs, compute types) of this session's measured
    settings, each placed at its own workload's intensity and under its own compute roof. Raises
    ExplorerError where the roofline does not apply (:func:`no_roofline_reason`)."""
    types = tuple(workload.input_dtypes()) if types is None else tuple(types)
    if reason := no_roofline_reason(workload, ceilings, types):
        raise ExplorerError(reason)
    flops, nbytes = workload.flops, workload.compulsory_bytes
    fits = nbytes <= ceilings.l2_bytes
    notes = [f"Ceilings: {ceilings.source}.",
             f"{nbytes / MB:.1f} MiB of compulsory traffic {'fit' if fits else 'do not fit'} in the "
             f"{ceilings.l2_bytes / MB:.0f} MiB L2: the roof is {ceilings.bandwidth_for(nbytes)[1]}."]
    peak, name = ceilings.compute_roof(types)
    sixteen_bit = sorted(set(workload.input_dtypes()) - {FP32})
    unused = None
    if name != "FP32":
        notes.append(f"Compute roof: the {name} peak, {peak:,.0f} GFLOP/s with float32 accumulation: this kernel "
                     f"multiplies these matrices on the tensor cores, not on the CUDA cores (FP32 peak).")
    elif sixteen_bit:
        tensor = ceilings.tensor_peak(sixteen_bit[0]) if len(sixteen_bit) == 1 else None
        unused = (tensor, f"{sixteen_bit[0]} tensor-core") if tensor else None
        notes.append(f"Compute roof: the CUDA cores' FP32 peak, {peak:,.0f} GFLOP/s: this kernel converts its "
                     f"{' and '.join(sixteen_bit)} inputs to float32 and multiplies them on the CUDA cores."
                     + (f" The tensor cores' {sixteen_bit[0]} peak, {tensor:,.0f} GFLOP/s, is drawn dotted: the roof "
                        "of a kernel that multiplies them there (mma.sync, wgmma)." if unused else ""))
    if ceilings.l2_gbps is None:
        notes.append("No L2 roof: vendors do not publish the L2's bandwidth; it is measured on a GPU."
                     + (" This workload fits in L2, so kernels launched back to back can beat the HBM roof."
                        if fits else ""))
    if latency_us is None:
        static_us = bound_us(ceilings, flops, nbytes, types)
        current = point("this setting", workload, static_us, ceilings, STATIC, types)
        notes.append("Static estimate: without a measurement the setting is placed on the roof, the best any "
                     "schedule of this workload can do; a measured kernel sits below it.")
    else:
        current = point("this setting", workload, latency_us, ceilings, MEASURED, types)
    placed = tuple(point(label, w, us, ceilings, MEASURED, t) for label, w, us, t in tries)
    return Roofline(workload.label(), flops, nbytes, types, ceilings, current, placed, tuple(notes), unused)


def ceiling_rows(c: Ceilings) -> list[tuple[str, str]]:
    """(roof, figure) for each of the device's roofs, the tensor cores' included (or why
    there is none): the Device page's table."""
    rows = [("FP32, CUDA cores", f"{c.fp32_gflops:,.0f} GFLOP/s"), ("HBM", f"{c.hbm_gbps:,.0f} GB/s"),
            ("L2-resident", "not published" if c.l2_gbps is None else f"{c.l2_gbps:,.0f} GB/s"),
            ("L2 size", f"{c.l2_bytes / MB:.0f} MiB")]
    rows += [(f"{dtype} tensor cores (float32 accumulation)", f"{gflops:,.0f} GFLOP/s")
             for dtype, gflops in c.tensor_gflops]
    if not c.tensor_gflops:
        rows.append(("tensor cores", f"none: {c.no_tensor_peak}"))
    return rows


def format_roofline(r: Roofline) -> str:
    """The roofline as text (``python -m explorer show … --view roofline``)."""
    c = r.ceilings
    bandwidth, roof = r.roof
    peak, compute = r.compute_roof
    bound_by = "memory" if r.intensity < r.ridge(bandwidth) else "compute"
    tensor = "" if compute == "FP32" else f", {compute} {peak:,.0f} GFLOP/s"
    lines = [f"{r.workload}: {r.flops:,} FLOPs over {r.compulsory_bytes:,} compulsory bytes = "
             f"{r.intensity:.2f} FLOP/byte",
             f"ceilings ({c.source}): FP32 {c.fp32_gflops:,.0f} GFLOP/s{tensor}, HBM {c.hbm_gbps:,.0f} GB/s, "
             f"L2-resident {'—' if c.l2_gbps is None else f'{c.l2_gbps:,.0f} GB/s'}",
             f"roof: {roof} at {bandwidth:,.0f} GB/s under the {compute} peak, ridge at "
             f"{r.ridge(bandwidth):.1f} FLOP/byte; attainable {r.attainable_gflops:,.0f} GFLOP/s ({bound_by}-bound)"]
    for p in (r.current, *r.tries):
        lines.append(f"{p.label} ({p.kind}): {p.latency_us:.2f} µs, {p.gflops:,.0f} GFLOP/s, "
                     f"{p.percent_of_attainable:.0f}% of attainable")
    return "\n".join(lines + list(r.notes))
