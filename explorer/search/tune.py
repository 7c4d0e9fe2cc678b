"""Tuning: TVM's MetaSchedule searches its own schedule space for the same workload.

The hand templates expose a few knobs a student can reason about; MetaSchedule
(``tvm.s_tir.meta_schedule``) generates candidate schedules from rules (multi-level
tiling, cooperative fetching, unrolling...), builds them in parallel, times them on the
device and keeps the fastest. :func:`tune` runs it on ``workload.prim_func()`` with a
trial budget and reports progress after each measured batch; the result carries the best
latency MetaSchedule measured and the winning schedule as a trace (Python calls), which is
what gets shown beside the hand schedule and exported.

Two choices here, and why:

* Cost model: MetaSchedule's default is XGBoost. xgboost is not a dependency of this
  project (its wheel pulls in a large NCCL library), so without it the search ranks
  candidates with the random model.
* Builder: TVM's default builder imports ``tvm.s_tir.tensor_intrin`` inside every build
  worker, and every batch starts new workers. That import parses hundreds of TVMScript
  functions (25 s on a 2-core machine), inside the builder's time limit, so whole batches
  failed with "Timeout". This module's build function skips it: fp32 schedules use no
  tensor intrinsics.
* The same import in this process (MetaSchedule's TuneContext needs it) takes minutes in a
  process with many modules loaded, such as the app's: see
  :func:`explorer.schedules.tensor_intrinsics.import_tensor_intrinsics`.
"""
from __future__ import annotations

import functools
import importlib.util
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm.ir.utils import derived_object
from tvm.s_tir import meta_schedule as ms

from ..cuda_env import binary_process_init, kernel_environment
from ..errors import ExplorerError
from ..export import schedule_snippet
from ..measure import local_gpu
from ..schedules.tensor_intrinsics import import_tensor_intrinsics
from ..targets import resolve_target
from ..workloads import Workload
from .sweep import EXPLORER_ROOT, cpu_count

MAX_TRIALS = 10_000


def cost_model_name() -> str:
    """"xgb" when xgboost is installed, else "random" (see the module docstring)."""
    return "xgb" if importlib.util.find_spec("xgboost") is not None else "random"


@dataclass(frozen=True)
class TuneProgress:
    trials: int  # candidates built and run so far
    budget: int
    failed: int  # candidates that failed to build or run
    best_us: float | None

    @property
    def fraction(self) -> float:
        return min(1.0, self.trials / self.budget) if self.budget else 1.0

    def describe(self) -> str:
        best = f" · best {self.best_us:.2f} µs" if self.best_us is not None else ""
        return f"{self.trials}/{self.budget} trials · {self.failed} failed{best}"


@dataclass(frozen=True)
class TuneResult:
    workload: Workload
    variant: str
    target: str
    budget: int
    trials: int  # candidates measured successfully
    best_us: float | None  # MetaSchedule's measurement of its best candidate
    trace: str  # the best schedule as Python calls: ``def apply_trace(sch): ...``
    trace_json: list  # the same as data, for :func:`replay`
    tensorir: str  # the best scheduled TensorIR
    cost_model: str
    strategy: str
    elapsed_s: float
    history: tuple[float | None, ...]  # best latency so far after each batch, µs

    def to_json(self) -> dict:
        return {
            "workload": self.workload.label(),
            "variant": self.variant,
            "target": self.target,
            "budget": self.budget,
            "trials": self.trials,
            "best_us": self.best_us,
            "cost_model": self.cost_model,
            "strategy": self.strategy,
            "elapsed_s": round(self.elapsed_s, 1),
            "history_us": list(self.history),
            "trace": self.trace,
            "trace_json": self.trace_json,
        }


def build_candidate(mod: tvm.IRModule, target: tvm.target.Target, _params) -> tvm.runtime.Module:
    """MetaSchedule's default build function without the tensor-intrinsic import."""
    from tvm.s_tir.transform import RemoveWeightLayoutRewriteBlock

    mod = RemoveWeightLayoutRewriteBlock(skip_tensor_rewrite=True)(mod)
    return tvm.tirx.build(mod, target=target)


@derived_object
class _LocalBuilder(ms.builder.LocalBuilder._cls):
    """TVM's LocalBuilder without its check at construction, which starts a worker process (TVM's
    import, a second of CPU) only to look the build and export functions up by name there: this
    module passes its build function itself and no export function, which need no looking up."""

    def _sanity_check(self) -> None:
        pass


@derived_object
class _ReportProgress(ms.measure_callback.PyMeasureCallback):
    """Called by MetaSchedule after each batch of candidates is built and run."""

    def __init__(self, budget: int, on_progress: Callable[[TuneProgress], None] | None):
        self.budget = budget
        self.on_progress = on_progress
        self.trials = 0
        self.failed = 0
        self.best_us: float | None = None
        self.history: list[float | None] = []

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
        for built, ran in zip(builder_results, runner_results, strict=False):
            self.trials += 1
            if built.error_msg is not None or ran.error_msg is not None or not ran.run_secs:
                self.failed += 1
                continue
            us = 1e6 * sum(float(s) for s in ran.run_secs) / len(ran.run_secs)
            self.best_us = us if self.best_us is None else min(self.best_us, us)
        self.history.append(self.best_us)
        if self.on_progress is not None:
            self.on_progress(TuneProgress(self.trials, self.budget, self.failed, self.best_us))


def tuning_target(target: str | tvm.target.Target | None) -> tvm.target.Target:
    """The target to tune for; a CPU target gets the core count MetaSchedule requires."""
    target = target if isinstance(target, tvm.target.Target) else resolve_target(target)
    if target.kind.name == "llvm" and "num-cores" not in target.attrs:
        target = tvm.target.Target({**target.export(), "num-cores": cpu_count()})
    return target


def tune(
    workload: Workload,
    trials: int,
    *,
    target: str | tvm.target.Target | None = None,
    variant: str = "default",
    strategy: str = "evolutionary",
    work_dir: str | None = None,
    workers: int | None = None,
    seed: int | None = 0,
    on_progress: Callable[[TuneProgress], None] | None = None,
) -> TuneResult:
    """Run MetaSchedule for ``trials`` candidates. Candidates run on the machine's own
    device: a CUDA target needs a local GPU. Records go to ``work_dir`` (a temporary
    directory unless given; give one to resume: measured records are kept there)."""
    if not 1 <= trials <= MAX_TRIALS:
        raise ExplorerError(f"The trial budget must be between 1 and {MAX_TRIALS:,}; got {trials}.")
    if strategy not in ("evolutionary", "replay-trace"):
        raise ExplorerError(f"Unknown search strategy '{strategy}'; use evolutionary or replay-trace.")
    target = tuning_target(target)
    if target.kind.name == "cuda":
        if local_gpu() is None:
            raise ExplorerError(
                "MetaSchedule must run its candidates to rank them and this machine has no CUDA GPU; "
                "tune on a machine with one, or use --target llvm to try tuning on the CPU."
            )
        # MetaSchedule's build and run processes, started from now on, find the CUDA
        # libraries the measuring worker uses (this process may not load them itself).
        os.environ.update(kernel_environment())
    mod = tvm.IRModule({"main": workload.prim_func(variant)})
    workers = workers or cpu_count()
    # MetaSchedule's console log level is its logger's level when tuning starts (it sets
    # DEBUG afterwards): WARNING keeps its tables off stdout (progress goes through
    # on_progress; the full log is in work_dir/logs). A previous run's handlers write to
    # that run's deleted work_dir, and a second run fails on them: start without them.
    quiet = logging.getLogger("tvm.s_tir.meta_schedule")
    quiet.setLevel(logging.WARNING)
    for handler in list(quiet.handlers):
        quiet.removeHandler(handler)
        handler.close()
    progress = _ReportProgress(trials, on_progress)
    start = time.perf_counter()
    import_tensor_intrinsics()
    with tempfile.TemporaryDirectory(prefix="explorer-tune-") as scratch:
        directory = work_dir or scratch
        builder = _LocalBuilder(
            max_workers=workers, f_build=build_candidate,
            initializer=functools.partial(binary_process_init, EXPLORER_ROOT),  # compiles even under the app
        )
        runner = ms.runner.LocalRunner()  # tune_tir's default runner, made here to be shut down below
        try:
            database = ms.tune_tir(
                mod,
                target,
                directory,
                max_trials_global=trials,
                num_trials_per_iter=min(trials, 2 * workers, 64),
                builder=builder,
                runner=runner,
                cost_model=cost_model_name(),
                strategy=strategy,
                measure_callbacks=[*ms.measure_callback.MeasureCallback.create("default"), progress],
                num_tuning_cores=workers,
                seed=seed,
            )
        finally:
            # The runner's process pool is otherwise left to the garbage collector, whose call of its
            # shutdown can deadlock the process on the pool's own lock (TVM's PopenPoolExecutor says so).
            runner.pool.shutdown()
        best = _best_record(database, mod)
        if best is None:
            raise ExplorerError(
                f"MetaSchedule found no working candidate in {progress.trials} trials "
                f"({progress.failed} failed to build or run); try a larger budget."
            )
        sch = ms.tir_integration.compile_tir(database, mod, target)
    return TuneResult(
        workload=workload,
        variant=variant,
        target=str(target.attrs.get("arch", target.kind.name)),
        budget=trials,
        trials=progress.trials - progress.failed,
        best_us=1e6 * _mean(best.run_secs),
        trace=str(sch.trace),
        trace_json=trace_json(sch),
        tensorir=sch.mod.script(),
        cost_model=cost_model_name(),
        strategy=strategy,
        elapsed_s=time.perf_counter() - start,
        history=tuple(progress.history),
    )


def _best_record(database: ms.database.Database, mod: tvm.IRModule):
    if not database.has_workload(mod):
        return None
    top = database.get_top_k(database.commit_workload(mod), 1)
    return top[0] if top else None


def trace_json(sch: tvm.s_tir.Schedule) -> list:
    """A schedule's trace as plain JSON data (what :func:`replay` takes)."""
    return _plain(sch.trace.as_json())


def _plain(value):
    """TVM's JSON form of a trace (ffi arrays, strings and numbers) as Python lists."""
    if isinstance(value, (str, bytes)):
        return str(value)
    if isinstance(value, (int, float)) or value is None:
        return value
    if hasattr(value, "value"):  # IntImm / FloatImm
        return value.value
    return [_plain(v) for v in value]


def _mean(values) -> float:
    values = [float(v) for v in values]
    return math.fsum(values) / len(values)


def replay(workload: Workload, trace_json, variant: str = "default") -> tvm.s_tir.Schedule:
    """The tuned schedule again, from :attr:`TuneResult.trace_json`: TVM parses the
    recorded instructions and applies them to a fresh schedule (nothing is executed as
    Python)."""
    sch = tvm.s_tir.Schedule(tvm.IRModule({"main": workload.prim_func(variant)}))
    try:
        tvm.s_tir.schedule.Trace.apply_json_to_schedule(trace_json, sch)
    except Exception as error:  # TVM raises its own errors for a malformed trace
        raise ExplorerError(f"This tuned trace does not apply to {workload.label()}: {error}") from None
    return sch


def snippet(result: TuneResult, title: str = "") -> str:
    """The tuned schedule as a standalone script, like any template's (see export.py)."""
    if not result.target.startswith("sm_"):
        raise ExplorerError("Only a schedule tuned for a CUDA GPU can be exported as a CUDA script.")
    sch = replay(result.workload, result.trace_json, result.variant)
    origin = f"TVM MetaSchedule ({result.trials} trials, best {result.best_us:.2f} us on {result.target})"
    return schedule_snippet(result.workload, sch, result.target, title or f"{result.workload.label()}, tuned",
                            made_with=origin)
