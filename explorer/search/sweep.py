"""Sweeps: every combination of a few knobs of one template, compiled in parallel,
measured one kernel at a time, ranked.

This is the 2017 blog's "simple auto scheduler" (a brute-force loop over thread counts)
made general. A :class:`Grid` names the knobs to vary and their values over a base spec.
:func:`run` builds every point in TVM's ``PopenPoolExecutor`` worker processes (one per
CPU core; a crash or a hang ends only that worker), keeps the combinations the template
or the verifier rejects with their reason, measures the valid ones through the caller's
``measurer`` one at a time while the other points are still compiling, and ranks them.
Without a measurer (no GPU) it ranks by a static score computed from each build and says
so in :attr:`SweepResult.ranking`. :func:`refine` polishes a winner one knob at a time.

Workers return small picklable :class:`Point` summaries, never builds: a TVM module does
not cross a process boundary.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import site
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import tvm
from tvm.support.popen_pool import PopenPoolExecutor

from ..analysis.ranking import StaticScore
from ..build import Build, Spec, build
from ..errors import ExplorerError, InvalidKnobs, summary_line
from ..knobs import KnobSet
from ..targets import resolve_target
from .grid import Grid
from .results import FAILED, INVALID, VALID, Point, SweepResult, best_point

EXPLORER_ROOT = str(Path(__file__).resolve().parents[2])  # on the workers' path, so they can import explorer


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
    best = best_point(points.values(), measurer is not None)

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
            best = best_point([point], measurer is not None, best)
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
    names = list(knob_names) if knob_names is not None else [knob.name for knob in base.knobs.fields()]
    if not names or rounds < 1:
        raise InvalidKnobs("Refining needs at least one knob and one round.")
    measured = run_options.get("measurer") is not None
    points: dict[KnobSet, Point] = dict(previous or {})
    winner = best_point(points.values(), measured)
    best = winner.knobs if winner is not None else base.knobs
    axes = tuple((name, base.knobs.field(name).values(base.workload)) for name in names)
    start = time.perf_counter()
    for _ in range(rounds):
        round_start = best
        for name, values in axes:
            result = run(Grid(dataclasses.replace(base, knobs=best), ((name, values),)), previous=points, **run_options)
            points.update((p.knobs, p) for p in result.points)
            winner = best_point(points.values(), measured)
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
        initargs=(EXPLORER_ROOT,),
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
        return Point(knobs, FAILED, f"Internal error while compiling: {summary_line(error)}")


def _measured(point: Point, spec: Spec, measurer: Callable[[Spec], float]) -> Point:
    try:
        return dataclasses.replace(point, latency_us=float(measurer(spec)))
    except ExplorerError as error:
        return dataclasses.replace(point, status=FAILED, reason=str(error))
