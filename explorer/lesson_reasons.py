"""Why a timing claim measured on this GPU may differ from the tutorial's: the evidence of
the two kernels (static analyses of their builds, and their measurements) and the reasons
it supports, in a sentence or two.

:func:`evidence` is what a build shows without running it; :func:`measure_steps` times
presets through any ``measure(spec) -> explorer.measure.Measurement`` and keeps, per
preset, what :func:`reasons` needs. The Lessons page and bench/lessons_h100.py both show
these reasons next to a verdict that is not "reproduced".
"""
from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from . import lessons as L
from .analysis.banks import analyze_banks
from .analysis.resources import analyze_resources
from .analysis.tiling import analyze_tiling
from .analysis.written import analyze_written, is_written
from .build import Build, Spec
from .claims import bank_conflict_degree, first_input
from .errors import ExplorerError
from .measure.errors import WrongResult
from .presets import Preset

NEAR_ROOF = 60.0  # % of the roofline above which the machine, not the schedule, sets a kernel's time
FEW_MICROSECONDS = 10.0  # below this, fixed launch costs weigh as much as the schedule
OCCUPANCY_GAP = 0.25  # a difference in theoretical occupancy worth naming
MOST_REASONS = 3  # a cell of a table, or a caption: the strongest few


@dataclass(frozen=True)
class Evidence:
    """What a build shows about a claim without running it."""

    shared_bytes: int
    bank_conflict_degree: int | None
    outputs_per_thread: int | None
    loads_per_output: float | None
    blocks_per_sm: int
    occupancy: float
    occupancy_limiter: str
    registers: int | str  # per thread, or "not compiled"
    blocks: int  # of the first kernel's grid
    notes: tuple[str, ...] = ()


def evidence(built: Build, binary=None) -> Evidence:
    """Static evidence for the first kernel of a build; ``binary`` (compile_binary) adds
    registers to the occupancy. An analysis that cannot evaluate the schedule leaves its
    figure empty and says why in ``notes``."""
    notes = []

    def attempt(compute):
        try:
            return compute()
        except ExplorerError as error:
            notes.append(str(error))
            return None

    resources = analyze_resources(built, binary).kernels[0]
    if is_written(built.spec.template_def):  # a kernel written out: its loads and stores say who owns what
        tiling = attempt(lambda: analyze_written(built))
        outputs = (tiling.outputs_per_thread or None) if tiling else None
        loads = tiling.loads_per_output if tiling else None
        if tiling is not None and tiling.loads_rule:
            notes.append(tiling.loads_rule)
    else:
        outputs = attempt(lambda: analyze_tiling(built).outputs_per_thread)
        loads = attempt(lambda: first_input(built).loads_per_output)
    degree = attempt(lambda: bank_conflict_degree(built))
    if not degree:  # no thread loads shared memory: the tiles wgmma reads, under their swizzle
        ways = [t.core_matrix_ways for t in analyze_banks(built).kernels[0].tiles if t.core_matrix_ways]
        if ways:
            degree = max(ways)
            notes.append("Bank conflict: of one 8 × 16-byte core matrix of the swizzled tiles wgmma reads (a model "
                         "of their layout; the Bank conflicts tab).")
    return Evidence(
        shared_bytes=resources.shared_bytes,
        bank_conflict_degree=degree,
        outputs_per_thread=outputs,
        loads_per_output=loads,
        blocks_per_sm=resources.occupancy.blocks_per_sm,
        occupancy=resources.occupancy.occupancy,
        occupancy_limiter=resources.occupancy.limiter,
        registers=resources.registers,
        blocks=built.kernels[0].blocks,
        notes=tuple(dict.fromkeys(notes)),
    )


@dataclass(frozen=True)
class MeasuredStep:
    """What a measurement found for one preset, as plain data."""

    preset: str
    median_us: float | None
    gflops: float | None
    percent_of_roofline: float | None  # % of the roofline's least time
    roofline_us: float | None
    error: str  # why there is no time ("" when there is one)
    evidence: Evidence | None  # None when the preset cannot be built

    @property
    def blocks(self) -> int | None:
        return self.evidence.blocks if self.evidence is not None else None


def measure_steps(
    presets: Iterable[Preset],
    measure: Callable[[Spec], object],
    build: Callable[[Spec], Build],
    on_done: Callable[[Preset, float | None, str], None] | None = None,
) -> dict[str, MeasuredStep]:
    """Each distinct spec measured once (:func:`explorer.lessons.measure_presets`) with
    ``measure(spec) -> Measurement``, which raises ExplorerError when a kernel fails; a
    wrong result gets no time. Static evidence from ``build(spec)``."""
    records = {}

    def measured_us(spec: Spec) -> float:
        record = records[spec] = measure(spec)
        if not record.correct:
            raise WrongResult(f"wrong result: {record.check.describe()}")
        return record.median_us

    presets = list(presets)
    times, errors = L.measure_presets(presets, measured_us, on_done=on_done)
    out = {}
    for preset in presets:
        record = records.get(preset.spec) if preset.id in times else None
        out[preset.id] = MeasuredStep(
            preset.id, times.get(preset.id), record.gflops if record else None,
            record.percent_of_roofline if record else None, record.roofline_us if record else None,
            errors.get(preset.id, ""), _static_evidence(preset.spec, build),
        )
    return out


def _static_evidence(spec: Spec, build: Callable[[Spec], Build]) -> Evidence | None:
    try:
        return evidence(build(spec))
    except ExplorerError:
        return None


def local_sm_count() -> int | None:
    """The SMs of this machine's GPU (None without one)."""
    import tvm

    device = tvm.cuda(0)
    return int(device.multi_processor_count) if device.exist else None


def reasons(check: L.ComparisonCheck, this_step: int, this: MeasuredStep, other: MeasuredStep | None,
            sm_count: int | None, thresholds: L.ClaimThresholds | None = None) -> str:
    """For a claim this GPU does not reproduce: what the measurements and the static
    analyses of the two kernels show, in a sentence or two."""
    thresholds = thresholds or L.ClaimThresholds()
    if check.measured is None or other is None:
        return this.error or (other.error if other is not None else "the compared step was not measured")
    notes = [*_timing_notes(check, this, other, thresholds), *_launch_notes(check, this_step, this, other, sm_count)]
    if len(notes) < 2:
        hardware = check.tutorial.where if check.tutorial is not None else "the tutorial's GPU"
        notes.append(f"nothing in the static analyses singles out a cause: {hardware} and this GPU differ in "
                     f"cache sizes, memory bandwidth and compiler")
    text = "; ".join(notes[:MOST_REASONS])
    return text[0].upper() + text[1:] + "."


def _timing_notes(check: L.ComparisonCheck, this: MeasuredStep, other: MeasuredStep, thresholds: L.ClaimThresholds):
    m = check.measured
    if check.comparison.expect != "same_speed":
        if abs(m.ratio - 1) <= thresholds.tolerance:
            yield f"the two differ by less than ±{thresholds.tolerance:.0%} here, within run-to-run noise"
        elif m.ratio < 1:
            yield f"the order is reversed here (×{m.ratio:.2f})"
    roofs = [x.percent_of_roofline for x in (this, other)]
    if all(f is not None and f >= NEAR_ROOF for f in roofs):
        yield (f"both run at {min(roofs):.0f}% or more of the roofline, so the GPU's bandwidth or peak, not the "
               f"schedule, sets their time")
    elif m.this_us < FEW_MICROSECONDS and m.other_us < FEW_MICROSECONDS:
        yield ("both take a few microseconds, where launch cost and the last wave of blocks weigh as much as the "
               "schedule")


def _launch_notes(check: L.ComparisonCheck, this_step: int, this: MeasuredStep, other: MeasuredStep,
                  sm_count: int | None):
    for step, x in ((this_step, this), (check.other.step, other)):
        if sm_count and x.blocks is not None and x.blocks < sm_count:
            yield f"step {step} launches only {x.blocks} blocks for {sm_count} SMs"
    a, b = this.evidence, other.evidence
    if a is not None and b is not None:
        degrees = (a.bank_conflict_degree, b.bank_conflict_degree)
        if None not in degrees and degrees[0] != degrees[1]:  # None: the model could not read a kernel
            yield f"the bank model gives {a.bank_conflict_degree}-way against {b.bank_conflict_degree}-way conflicts"
        if abs(a.occupancy - b.occupancy) >= OCCUPANCY_GAP:
            yield f"occupancy is {a.occupancy:.0%} against {b.occupancy:.0%}"
