"""Sweeps: every combination of a few knobs of one template, compiled in parallel,
measured one kernel at a time, ranked.

This is the 2017 blog's "simple auto scheduler" (a brute-force loop over thread counts)
made general. A :class:`Grid` names the knobs to vary and their values over a base spec.
:func:`run` builds every point in TVM's ``PopenPoolExecutor`` worker processes (one per
CPU core; a crash or a hang ends only that worker), keeps the combinations the template
or the verifier rejects with their reason, measures the valid ones through the caller's
``measurer`` one at a time while the other points are still compiling, and ranks them.
Without a measurer (no GPU) it ranks by a static score computed from each build and says
so in :attr:`SweepResult.ranking`.

Workers return small picklable :class:`Point` summaries, never builds: a TVM module does
not cross a process boundary.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import math
import os
import random
import re
import site
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm.support.popen_pool import PopenPoolExecutor

from .build import Build, Kernel, Spec, build
from .errors import ExplorerError, InvalidKnobs
from .knobs import KnobSet, KnobSpec
from .measure.settings import Settings
from .targets import resolve_target

# A sweep past this many points is a search, not a grid: sample it (``sample=``).
MAX_POINTS = 20_000
ALL_VALUES = "all"  # --grid knob=all: every value the knob allows on this workload

VALID, INVALID, FAILED = "valid", "invalid", "failed"
_ROOT = str(Path(__file__).resolve().parent.parent)  # so workers can import explorer


@dataclass(frozen=True)
class Grid:
    """The knobs a sweep varies, each with its values, over a base spec (whose other
    knobs stay fixed). Values are checked against the knob's domain on construction."""

    base: Spec
    axes: tuple[tuple[str, tuple], ...]

    def __post_init__(self):
        if not self.axes:
            raise InvalidKnobs("A sweep needs at least one knob to vary, e.g. --grid num_thread_x=8,16,32.")
        names = [name for name, _ in self.axes]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise InvalidKnobs(f"Knob '{repeated[0]}' appears twice in the grid; list all its values once.",
                               tuple(repeated))
        axes = []
        for name, values in self.axes:
            spec = type(self.base.knobs).spec(name)
            checked = tuple(dict.fromkeys(spec.check(value) for value in values))  # unique, in order
            if not checked:
                raise InvalidKnobs(f"Knob '{name}' has no values in the grid.", (name,))
            axes.append((name, checked))
        object.__setattr__(self, "axes", tuple(axes))

    @classmethod
    def parse(cls, base: Spec, items: Iterable[str]) -> Grid:
        """From command-line/URL text: ``"knob=v1,v2,..."`` or ``"knob=all"``; a split
        knob's values are written ``8x2x4x1``."""
        axes = []
        for item in items:
            name, equals, text = item.partition("=")
            if not equals or not text.strip():
                raise InvalidKnobs(f"A grid axis is written knob=v1,v2,... (or knob=all), not '{item}'.")
            spec = type(base.knobs).spec(name.strip())
            axes.append((spec.name, parse_values(spec, text, base.workload)))
        return cls(base, tuple(axes))

    @property
    def knob_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.axes)

    @property
    def size(self) -> int:
        return math.prod(len(values) for _, values in self.axes)

    def knobs_at(self, index: int) -> KnobSet:
        """The knobs of grid point ``index`` (the last axis varies fastest)."""
        changes = {}
        for name, values in reversed(self.axes):
            index, i = divmod(index, len(values))
            changes[name] = values[i]
        return self.base.knobs.replace(**changes)

    def indices(self, sample: int | None = None, seed: int = 0) -> list[int]:
        """Every point, or ``sample`` of them drawn at random (reproducibly, by ``seed``)."""
        count = self.size if sample is None or sample >= self.size else sample
        if count > MAX_POINTS:
            raise InvalidKnobs(
                f"This grid has {self.size:,} combinations, more than the {MAX_POINTS:,} one sweep may run: "
                f"give fewer values or sample some of them.",
                self.knob_names,
            )
        if count == self.size:
            return list(range(self.size))
        return sorted(random.Random(seed).sample(range(self.size), count))

    def to_strings(self) -> list[str]:
        """The inverse of :meth:`parse` (for ``found_by`` lines and URLs)."""
        out = []
        for name, values in self.axes:
            spec = self.base.knobs.spec(name)
            out.append(f"{name}={','.join(spec.format(v).replace(',', 'x') for v in values)}")
        return out


def parse_values(spec: KnobSpec, text: str, workload) -> tuple:
    if text.strip() == ALL_VALUES:
        return spec.values(workload)
    try:
        return tuple(spec.parse(part) for part in text.split(","))
    except InvalidKnobs as error:
        if spec.kind is tuple:
            raise InvalidKnobs(f"{error} In a grid, write each split with x between factors: 8x2x4x1,4x4x4x2.",
                               (spec.name,)) from None
        raise


@dataclass(frozen=True)
class StaticScore:
    """What a sweep ranks by without a GPU: ``cost`` (lower is better) and the figures it
    was computed from, shown as columns."""

    cost: float
    metrics: tuple[tuple[str, float], ...]
    explanation: str  # how cost is computed, in one sentence


@dataclass(frozen=True)
class Point:
    """One grid point's outcome: small and picklable (it comes back from a worker)."""

    knobs: KnobSet
    status: str  # VALID, INVALID (rejected, with reason) or FAILED (crashed, timed out, wrong result)
    reason: str = ""
    fault: tuple[str, ...] = ()  # knobs named by the rejection
    kernels: tuple[Kernel, ...] = ()
    static: StaticScore | None = None
    latency_us: float | None = None
    compile_s: float = 0.0

    def to_json(self) -> dict:
        static = self.static
        return {
            "knobs": self.knobs.to_strings(),
            "status": self.status,
            "reason": self.reason,
            "fault": list(self.fault),
            "latency_us": self.latency_us,
            "compile_s": self.compile_s,
            "kernels": [dataclasses.asdict(k) for k in self.kernels],
            "static": None if static is None else {"cost": static.cost, "metrics": dict(static.metrics),
                                                   "explanation": static.explanation},
        }

    @classmethod
    def from_json(cls, knobs_type: type[KnobSet], data: Mapping) -> Point:
        """The inverse of :meth:`to_json` (a resumed search reads its earlier points);
        knob values go through the knob dataclass like any other input."""
        if data.get("status") not in (VALID, INVALID, FAILED):
            raise ExplorerError(f"A saved sweep point has an unknown status {data.get('status')!r}.")
        static = data.get("static")
        return cls(
            knobs=knobs_type.from_strings(data["knobs"]),
            status=data["status"],
            reason=str(data.get("reason", "")),
            fault=tuple(data.get("fault", ())),
            kernels=tuple(Kernel(k["name"], tuple(k["grid"]), tuple(k["block"]), int(k["shared_bytes"]))
                          for k in data.get("kernels", ())),
            static=None if static is None else StaticScore(float(static["cost"]), tuple(static["metrics"].items()),
                                                           str(static["explanation"])),
            latency_us=None if data.get("latency_us") is None else float(data["latency_us"]),
            compile_s=float(data.get("compile_s", 0.0)),
        )


# A sweep ranks: the median of 10 repeats is plenty, the bandwidth floor is the same for
# every point, and back-to-back launches rank kernels as graphs do except below a few µs,
# where the launch cost dominates both (bench/kernels.py measures the winners with the
# full default settings, graphs included).
SWEEP_SETTINGS = Settings(repeats=10, floor=False, cuda_graph=False)

# Without a GPU a sweep ranks by this rough model of the static analyses (and says so).
LATENCY_HIDING_WARPS = 16  # resident warps per SM taken as enough to hide memory latency
DEFAULT_SMS = 132  # an H100's SMs, assumed when no GPU is present to ask
STATIC_MODEL = (
    "Static cost = loads per output (each thread loading its input footprint once, the blog's reuse count) "
    "× shared-memory wavefronts per conflict-free wavefront ÷ the share of each warp's 32 lanes in use "
    f"÷ min(1, resident warps per SM ÷ {LATENCY_HIDING_WARPS}); lower ranks first. "
    "A rough model of the analyses, not a time."
)


def static_score(built: Build) -> StaticScore:
    """Rank key from the analyses of one build (see STATIC_MODEL): tiling reuse, bank
    conflicts, and whether enough warps are resident to hide memory latency."""
    from .analysis.banks import analyze_banks
    from .analysis.resources import analyze_resources
    from .analysis.tiling import analyze_tiling

    loads = sum(f.loads_per_output for f in analyze_tiling(built).footprints)
    banks = analyze_banks(built).kernels
    wavefronts = sum(k.loads.wavefronts + k.stores.wavefronts for k in banks)
    conflicts = sum(k.loads.conflicts + k.stores.conflicts for k in banks)
    conflict_factor = wavefronts / (wavefronts - conflicts) if wavefronts > conflicts else 1.0
    kernel = analyze_resources(built).kernels[0]  # the compute kernel
    device = tvm.cuda(0)
    sms = device.multi_processor_count if device.exist else DEFAULT_SMS
    resident_blocks = min(kernel.occupancy.blocks_per_sm, -(-math.prod(kernel.grid) // sms))
    warps_per_block = -(-kernel.threads_per_block // 32)
    lanes_used = kernel.threads_per_block / (32 * warps_per_block)
    warps = resident_blocks * warps_per_block
    hiding = min(1.0, warps / LATENCY_HIDING_WARPS)
    metrics = (("loads_per_output", round(loads, 3)), ("conflict_factor", round(conflict_factor, 3)),
               ("lanes_used", round(lanes_used, 3)), ("warps_per_sm", warps),
               ("occupancy", round(kernel.occupancy.occupancy, 3)))
    return StaticScore(loads * conflict_factor / lanes_used / hiding, metrics, STATIC_MODEL)


def gpu_measurer(target: str | None = None, remote=None, settings=None) -> Callable[[Spec], float] | None:
    """``spec -> median µs`` through the measurement queue (checked against NumPy first,
    one kernel at a time), on this machine's GPU or on ``remote`` (an
    ``explorer.measure.Remote``); None without either: the sweep then ranks by the static
    analyses. ``settings`` default to SWEEP_SETTINGS."""
    from .measure import latency_us, local_gpu
    from .measure.cuda_env import kernel_environment

    if remote is None and local_gpu() is None:
        return None
    # Compile workers started from now on find the CUDA libraries the measuring worker
    # uses, so they compile the binaries (in parallel) that it then finds in the cache.
    os.environ.update(kernel_environment())
    return functools.partial(latency_us, target=target, remote=remote,
                             settings=settings or SWEEP_SETTINGS)


def compile_point(spec: Spec, target: str | None, scorer: Callable[[Build], StaticScore] | None) -> Point:
    """Worker side: build (schedule, verify, lower, generate code) and score one point.
    ``target`` is resolved here: "auto"/None is this machine's GPU as the worker sees it,
    the same as the measuring worker sees it (the app's process may not load the CUDA
    libraries; the workers do), so both compile for one architecture."""
    start = time.perf_counter()
    try:
        built = build(spec, target)
        static = scorer(built) if scorer is not None else None
    except InvalidKnobs as error:
        return Point(spec.knobs, INVALID, str(error), error.knobs, compile_s=time.perf_counter() - start)
    except ExplorerError as error:
        return Point(spec.knobs, FAILED, str(error), compile_s=time.perf_counter() - start)
    return Point(spec.knobs, VALID, kernels=built.kernels, static=static, compile_s=time.perf_counter() - start)


@dataclass(frozen=True)
class Progress:
    total: int
    done: int
    valid: int
    skipped: int  # invalid or failed
    best: Point | None
    last: Point

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else 1.0

    def describe(self, measured: bool) -> str:
        best = ""
        if self.best is not None:
            best = (f" · best {self.best.latency_us:.2f} µs" if measured
                    else f" · best static cost {self.best.static.cost:.3g}")
        return f"{self.done}/{self.total} · {self.valid} valid · {self.skipped} skipped{best}"


def run(
    grid: Grid,
    *,
    target: str | tvm.target.Target | None = None,
    measurer: Callable[[Spec], float] | None = None,
    scorer: Callable[[Build], StaticScore] | None = None,
    sample: int | None = None,
    seed: int = 0,
    workers: int | None = None,
    timeout_s: float = 60.0,
    pool: PopenPoolExecutor | None = None,
    on_progress: Callable[[Progress], None] | None = None,
    on_point: Callable[[Point], None] | None = None,
    previous: Mapping[KnobSet, Point] | None = None,
) -> SweepResult:
    """Build every point of ``grid`` (or ``sample`` of them) in ``workers`` processes and
    measure the valid ones with ``measurer(spec) -> µs`` one at a time; with no measurer,
    score them with ``scorer(build)`` in the workers and rank by that. ``measurer`` raises
    ExplorerError for a kernel that fails
    (wrong result, crash, time limit). ``previous`` points (from an interrupted run or an
    earlier sweep) are reused instead of rebuilt; ``on_point`` sees each new one as it
    finishes. Several sweeps can share one ``pool`` (see :func:`compile_pool`)."""
    if measurer is None and scorer is None:
        raise ExplorerError("A sweep without a GPU needs a static scorer to rank by.")
    if measurer is not None:
        scorer = None  # measured points are ranked by latency; no analysis may fail one
    target_name = str(target) if isinstance(target, tvm.target.Target) else target
    label = resolve_target(target_name)  # in this process: for the result's label only
    start = time.perf_counter()
    previous = previous or {}
    all_knobs = [grid.knobs_at(i) for i in grid.indices(sample, seed)]
    points = {k: previous[k] for k in all_knobs if k in previous}
    todo = [k for k in all_knobs if k not in points]
    counts = Counter(p.status for p in points.values())
    best = _best(points.values(), measurer is not None)

    own_pool = pool is None
    pool = pool or compile_pool(workers, timeout_s)
    futures = {
        pool.submit(compile_point, dataclasses.replace(grid.base, knobs=k), target_name, scorer): k for k in todo
    }
    try:
        for future in concurrent.futures.as_completed(futures):
            point = _compiled(future, futures[future])
            if point.status == VALID and measurer is not None:
                point = _measured(point, dataclasses.replace(grid.base, knobs=point.knobs), measurer)
            points[point.knobs] = point
            counts[point.status] += 1
            best = _best([point], measurer is not None, best)
            if on_point is not None:
                on_point(point)
            if on_progress is not None:
                on_progress(Progress(len(all_knobs), len(points), counts[VALID], counts[INVALID] + counts[FAILED],
                                     best, point))
    finally:
        for future in futures:
            future.cancel()
        if own_pool:
            pool.shutdown(wait=False)
    return SweepResult(
        grid=grid,
        target=str(label.attrs.get("arch", label.kind.name)),
        points=tuple(points[k] for k in all_knobs),
        measured=measurer is not None,
        elapsed_s=time.perf_counter() - start,
    )


def refine(
    base: Spec,
    knob_names: Iterable[str] | None = None,
    *,
    rounds: int = 2,
    previous: Mapping[KnobSet, Point] | None = None,
    **run_options,
) -> SweepResult:
    """Coordinate descent: starting from the best point so far (``previous``, else
    ``base``), sweep one knob at a time over every value it allows with the others fixed,
    move to the best point found, and repeat for ``rounds`` or until a round changes
    nothing. It costs the sum of the knobs' value counts per round, not their product, so
    it can polish a grid's winner over knobs the grid left fixed. ``run_options`` go to
    :func:`run` (pass a shared ``pool`` to keep the workers between sweeps)."""
    names = list(knob_names) if knob_names is not None else [spec.name for spec in base.knobs.specs()]
    if not names or rounds < 1:
        raise InvalidKnobs("Refining needs at least one knob and one round.")
    measured = run_options.get("measurer") is not None
    points: dict[KnobSet, Point] = dict(previous or {})
    winner = _best(points.values(), measured)
    best = winner.knobs if winner is not None else base.knobs
    axes = tuple((name, base.knobs.spec(name).values(base.workload)) for name in names)
    start = time.perf_counter()
    for _ in range(rounds):
        round_start = best
        for name, values in axes:
            result = run(Grid(dataclasses.replace(base, knobs=best), ((name, values),)), previous=points, **run_options)
            points.update((p.knobs, p) for p in result.points)
            winner = _best(points.values(), measured)
            best = winner.knobs if winner is not None else best
        if best == round_start:
            break
    return SweepResult(
        grid=Grid(dataclasses.replace(base, knobs=best), axes),
        target=result.target,
        points=tuple(points.values()),
        measured=measured,
        elapsed_s=time.perf_counter() - start,
    )


def compile_pool(workers: int | None = None, timeout_s: float = 60.0) -> PopenPoolExecutor:
    """TVM's process pool: one compile worker per core (default); a worker that crashes or
    runs past ``timeout_s`` on a point is restarted."""
    return PopenPoolExecutor(
        max_workers=workers or cpu_count(),
        timeout=timeout_s,
        initializer=site.addsitedir,
        initargs=(_ROOT,),
        stdout=subprocess.DEVNULL,  # TVM's warnings would garble the progress bar
        stderr=subprocess.DEVNULL,
    )


def cpu_count() -> int:
    """The CPU cores this process may use (its affinity), which is what a pool should fill."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _compiled(future: concurrent.futures.Future, knobs: KnobSet) -> Point:
    try:
        return future.result()
    except TimeoutError:
        return Point(knobs, FAILED, "Compiling took longer than the sweep's time limit; the worker was stopped.")
    except ChildProcessError:
        return Point(knobs, FAILED, "The compiler process crashed on this combination.")
    except Exception as error:  # a bug in TVM or a template: keep the sweep going, say what happened
        return Point(knobs, FAILED, f"Internal error while compiling: {_last_line(error)}")


def _measured(point: Point, spec: Spec, measurer: Callable[[Spec], float]) -> Point:
    try:
        return dataclasses.replace(point, latency_us=float(measurer(spec)))
    except ExplorerError as error:
        return dataclasses.replace(point, status=FAILED, reason=str(error))


def _best(points: Iterable[Point], measured: bool, current: Point | None = None) -> Point | None:
    for point in points:
        if point.status == VALID and (current is None or _rank_key(point, measured) < _rank_key(current, measured)):
            current = point
    return current


def _rank_key(point: Point, measured: bool) -> float:
    return point.latency_us if measured else point.static.cost


def _last_line(error: Exception) -> str:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return lines[-1] if lines else type(error).__name__


@dataclass(frozen=True)
class Heatmap:
    """The best value for each pair of values of two knobs (the minimum over the others).
    ``z[i][j]`` is for ``y_values[i]``, ``x_values[j]``; None where no point was valid."""

    x: str
    y: str
    x_values: tuple[str, ...]
    y_values: tuple[str, ...]
    z: tuple[tuple[float | None, ...], ...]
    best: tuple[tuple[KnobSet | None, ...], ...]  # the point behind each cell
    valid: tuple[tuple[int, ...], ...]  # valid points per cell
    total: tuple[tuple[int, ...], ...]  # points per cell
    value: str  # what z is, with its unit


@dataclass(frozen=True)
class SweepResult:
    grid: Grid
    target: str
    points: tuple[Point, ...]  # in grid order
    measured: bool  # True: ranked by measured latency; False: by the static score
    elapsed_s: float

    @property
    def ranking(self) -> str:
        """What the ranking is based on, to show next to it."""
        if self.measured:
            return f"Ranked by measured latency on the GPU ({self.target})."
        scored = next((p.static for p in self.points if p.static is not None), None)
        how = f" {scored.explanation}" if scored is not None else ""
        return f"No GPU: ranked by the static analyses, not by measurement.{how}"

    @property
    def value_label(self) -> str:
        return "latency (µs)" if self.measured else "static cost (lower is better)"

    def value(self, point: Point) -> float | None:
        if point.status != VALID:
            return None
        return point.latency_us if self.measured else point.static.cost

    def ranked(self) -> list[Point]:
        return sorted((p for p in self.points if p.status == VALID), key=lambda p: _rank_key(p, self.measured))

    @property
    def best(self) -> Point | None:
        ranked = self.ranked()
        return ranked[0] if ranked else None

    def best_spec(self) -> Spec | None:
        best = self.best
        return dataclasses.replace(self.grid.base, knobs=best.knobs) if best is not None else None

    def skipped(self) -> list[Point]:
        return [p for p in self.points if p.status != VALID]

    def skipped_reasons(self) -> list[tuple[str, int, str]]:
        """(status, how many, one example reason) per kind of rejection, most frequent first;
        reasons that differ only in their numbers are one kind."""
        groups: dict[tuple[str, str], list[Point]] = {}
        for point in self.skipped():
            groups.setdefault((point.status, re.sub(r"\d+(?:[.,]\d+)*", "#", point.reason)), []).append(point)
        rows = [(status, len(members), members[0].reason) for (status, _), members in groups.items()]
        return sorted(rows, key=lambda row: -row[1])

    @property
    def per_minute(self) -> float:
        return 60 * len(self.points) / self.elapsed_s if self.elapsed_s else 0.0

    def table(self) -> list[dict]:
        """One row per point, best first, then the skipped ones with their reasons."""
        rank = {p.knobs: i for i, p in enumerate(self.ranked(), start=1)}
        rows = []
        for point in sorted(self.points, key=lambda p: rank.get(p.knobs, len(rank) + 1)):
            row: dict = {"rank": rank.get(point.knobs)}
            for name in self.grid.knob_names:
                row[name] = point.knobs.spec(name).format(getattr(point.knobs, name))
            row["status"] = point.status
            row["latency_us" if self.measured else "static_cost"] = self.value(point)
            if point.static is not None:
                row.update(dict(point.static.metrics))
            if point.kernels:
                row["threads"] = max(k.threads_per_block for k in point.kernels)
                row["shared_bytes"] = max(k.shared_bytes for k in point.kernels)
            row["reason"] = point.reason
            rows.append(row)
        return rows

    def heatmap(self, x: str, y: str) -> Heatmap:
        for name in (x, y):
            if name not in self.grid.knob_names:
                raise InvalidKnobs(
                    f"'{name}' is not one of the swept knobs ({', '.join(self.grid.knob_names)}).", (name,)
                )
        if x == y:
            raise InvalidKnobs("A heatmap needs two different knobs.", (x,))
        axes = dict(self.grid.axes)
        xs, ys = axes[x], axes[y]
        z = [[None] * len(xs) for _ in ys]
        best = [[None] * len(xs) for _ in ys]
        valid = [[0] * len(xs) for _ in ys]
        total = [[0] * len(xs) for _ in ys]
        for point in self.points:
            i, j = ys.index(getattr(point.knobs, y)), xs.index(getattr(point.knobs, x))
            total[i][j] += 1
            value = self.value(point)
            if value is None:
                continue
            valid[i][j] += 1
            if z[i][j] is None or value < z[i][j]:
                z[i][j], best[i][j] = value, point.knobs
        spec_x, spec_y = self.grid.base.knobs.spec(x), self.grid.base.knobs.spec(y)
        return Heatmap(
            x=x,
            y=y,
            x_values=tuple(spec_x.format(v) for v in xs),
            y_values=tuple(spec_y.format(v) for v in ys),
            z=tuple(map(tuple, z)),
            best=tuple(map(tuple, best)),
            valid=tuple(map(tuple, valid)),
            total=tuple(map(tuple, total)),
            value=self.value_label,
        )

    def to_json(self) -> dict:
        best = self.best
        return {
            "template": self.grid.base.template,
            "workload": self.grid.base.workload.label(),
            "target": self.target,
            "grid": self.grid.to_strings(),
            "ranking": self.ranking,
            "points": len(self.points),
            "valid": len(self.ranked()),
            "elapsed_s": round(self.elapsed_s, 2),
            "best": best.knobs.to_strings() if best is not None else None,
            "skipped": [{"status": s, "count": n, "example": r} for s, n, r in self.skipped_reasons()],
            "table": self.table(),
        }
