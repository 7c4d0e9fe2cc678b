"""Fit the diagnosis's cost models to measured times and write the calibration table the
diagnosis reads (explorer/analysis/diagnosis/calibration.json).

    python bench/calibrate_diagnosis.py --measure --write   # GPU: the shipped presets and a sample of their
                                                            # one-knob neighbours, measured now (one call, ~9 min),
                                                            # kept in bench/results/calibration-<gpu>.json
    python bench/calibrate_diagnosis.py --recorded --samples bench/results/calibration-nvidia-h200.json --write
                                                            # CPU: refit from what a --measure run kept
    python bench/calibrate_diagnosis.py --recorded --write  # CPU: the settings this repository measured before
                                                            # (bench/results/, docs/lessons-gpu.md)
    python bench/calibrate_diagnosis.py --dry-run           # CPU: what --measure would measure, and its budget

Each setting is reduced to Facts as the static diagnosis sees it (the target's published ceilings;
registers from its cubin where NVRTC compiles it) and each rule's cost is computed with its
model's constants as assumed. The fit scales each rule's cost (its constant refitted: cycles per
step, bytes per cycle ...) so that the roofline's least time plus the scaled costs comes nearest
the measured times within each workload (the mean |log(estimate / measured)| once each workload's
mean is taken out: what no rule models of a workload cancels in a move's speedup), coordinate by
coordinate over a grid of scales within a factor of 2 of the model's (pulled towards 1: PRIOR); a
rule that fires on fewer than MIN_SETTINGS settings keeps its assumption. Settings that run for less
than MIN_US are left out: their time is mostly the launch. Errors are
held out: the settings are split by workload into FOLDS groups, each fitted on the others; a
rule's error is the median error of the held-out settings it fires on, and the error of the
estimated speedup of a one-knob move (a pair of measured settings one knob apart) is what the
diagnosis requires a suggestion to beat (calibration.speedup_error). The settings the lesson
agreement grades (bench/diagnosis_agreement.py) are left out of the fit: their error is stated apart.
"""
from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import math
import os
import re
import shlex
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from docs_section import Result, write_result
from result_files import gpu_slug

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
LESSONS_DOC = ROOT / "docs" / "lessons-gpu.md"
FOLDS = 3
MIN_SETTINGS = 5  # a rule fitted on fewer settings than this keeps its model's constants
# Settings measured faster than this are left out of the fit and its errors: their time is mostly the launch and
# the last wave of blocks, and their differences within ±5% noise say little of any rule's cost.
MIN_US = 10.0
# The scales the fit tries per rule: within a factor of 2 of the model's constants, which are physical
# figures (cycles, bytes per cycle), not free parameters; and a pull towards them (PRIOR per factor of e
# away, in the loss's unit), so that a rule whose cost moves with others' (softmax and rescale) keeps its own.
SCALES = np.geomspace(0.5, 2, 41)
PRIOR = 0.002
SEARCHED_ON = "nvidia-h100-80gb-hbm3"  # the GPU slug of the recorded searches (bench/result_files.py)
PER_SEARCH = 24  # settings taken from each recorded search: its best, the best's neighbours, then others
MEASURE_REPEATS = 10
UNSEEN = "(no finding moves)"  # a pair of settings whose estimates are equal: the model sees no move
NO_GPU_EXIT = 3


@dataclass(frozen=True)
class Sample:
    spec: object  # explorer.build.Spec
    measured_us: float
    source: str  # where the time comes from


# -- the settings and their times ------------------------------------------------------------------------------


def recorded_samples(per_search: int | None = PER_SEARCH) -> tuple[list[Sample], dict]:
    """The settings measured before on the H100, with where each time comes from: the lessons'
    presets (bench/results/lessons-sm_90.json, then docs/lessons-gpu.md's tables for the presets that
    file lacks) and ``per_search`` settings of each search (bench/results/search/*.jsonl; None: all)."""
    from explorer.presets import all_presets

    presets = all_presets()
    lessons = json.loads((RESULTS / "lessons-sm_90.json").read_text())
    samples = {p: Sample(presets[p].spec, row["median_us"], "bench/results/lessons-sm_90.json")
               for p, row in lessons["presets"].items() if p in presets and row.get("median_us")}
    for preset, us in _lesson_table_times().items():
        if preset in presets and preset not in samples:
            samples[preset] = Sample(presets[preset].spec, us, "docs/lessons-gpu.md")
    out = list(samples.values())
    for path in sorted((RESULTS / "search").glob("*.jsonl")):
        out += _search_samples(path, per_search)
    header = lessons["header"]
    return _distinct(out), {"machine": header["device"], "date": header["date"],
                            "l2_gbps": _recorded_l2_gbps(), "target": "h100"}


def recorded_times() -> tuple[dict, dict]:
    """Every setting measured before on the H100 (the lessons' presets first, then every valid row of the
    searches), µs by Spec, with recorded_samples' header: what the lesson agreement takes as the GPU's
    verdict on a step."""
    samples, about = recorded_samples(per_search=None)
    return {s.spec: s.measured_us for s in samples}, about


def samples_path(machine: str) -> Path:
    """Where --measure keeps what it measured on ``machine``: bench/results/calibration-<gpu>.json."""
    return RESULTS / f"calibration-{gpu_slug(machine)}.json"


def save_samples(samples: list[Sample], about: dict, path: Path) -> None:
    """``samples`` (each setting as its link's query parameters, explorer.urlstate) with ``about`` (the machine,
    date, target, L2 bandwidth): what a later ``--recorded --samples PATH`` refits from, without the GPU."""
    from explorer.urlstate import to_query

    rows = [{"setting": to_query(s.spec), "measured_us": s.measured_us} for s in samples]
    path.write_text(json.dumps({"header": about, "samples": rows}, indent=1, ensure_ascii=False) + "\n")


def load_samples(path: Path, progress=lambda text: None) -> tuple[list[Sample], dict]:
    """The samples :func:`save_samples` kept in ``path``, and its header. A setting whose link no longer reads
    whole (a knob renamed or a value refused since) is not the one measured: left out, and said."""
    from explorer.urlstate import read_link

    data = json.loads(path.read_text())
    source = str(path.resolve().relative_to(ROOT)) if path.resolve().is_relative_to(ROOT) else str(path)
    out = []
    for row in data["samples"]:
        link = read_link(row["setting"])
        if link.spec is None or link.dropped:
            progress(f"left out a setting {path.name} holds: {link.summary()}")
            continue
        out.append(Sample(link.spec, float(row["measured_us"]), source))
    return out, data["header"]


def _lesson_table_times() -> dict[str, float]:
    """Preset → the measured µs of docs/lessons-gpu.md's step tables (``| 3 | `preset` | … | 12.34 |``)."""
    times = {}
    for match in re.finditer(r"^\| \d+ \| `([^`]+)` \| [^|]* \| ([\d,]+\.\d+) \|", LESSONS_DOC.read_text(), re.M):
        times[match.group(1)] = float(match.group(2).replace(",", ""))
    return times


def _search_samples(path: Path, per_search: int | None = PER_SEARCH) -> list[Sample]:
    from search_best import PLANS  # bench/search_best.py: the searches, by id

    from explorer.build import Spec
    from explorer.schedules import get_template

    plan = PLANS.get(path.name.removesuffix(f"-{SEARCHED_ON}.jsonl"))
    if plan is None:
        return []
    template, workload = get_template(plan.template), plan.benchmark.workload
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("status") == "valid" and r.get("latency_us")]
    if not rows:
        return []
    best = min(rows, key=lambda r: r["latency_us"])
    near = [r for r in rows if r is not best and _knobs_apart(r["knobs"], best["knobs"]) == 1]
    rest = sorted((r for r in rows if r is not best and r not in near), key=lambda r: _digest(r["knobs"]))
    chosen = ([best] + near + rest)[:per_search]
    source = f"bench/results/search/{path.name}"
    out = []
    for row in chosen:
        try:
            out.append(Sample(Spec(template.name, workload, template.knobs.from_strings(row["knobs"])),
                              row["latency_us"], source))
        except Exception:  # a knob the template has since renamed: the row says nothing about today's template
            continue
    return out


def _recorded_l2_gbps() -> float | None:
    path = RESULTS / "ceilings-h100.json"
    return json.loads(path.read_text())["ceilings"]["measured"].get("l2_gbps") if path.exists() else None


def _knobs_apart(a: dict, b: dict) -> int:
    return sum(a.get(k) != b.get(k) for k in set(a) | set(b))


def _digest(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _distinct(samples: list[Sample]) -> list[Sample]:
    seen, out = set(), []
    for s in samples:
        if s.spec not in seen:
            seen.add(s.spec)
            out.append(s)
    return out


def graded_settings() -> set:
    """The settings the lesson agreement grades the diagnosis on (explorer.agreement): each graded step's
    setting diagnosed and the step it leads to. The fit leaves them out, so that no constant is fitted to
    the steps it is graded on; their error is stated apart (``lessons`` in the table)."""
    from explorer import agreement
    from explorer.lessons import lessons

    out = set()
    for lesson in lessons():
        for step in lesson.steps[1:]:
            if not agreement.why_not_graded(step):
                out |= {agreement.diagnosed_setting(step), step.preset.spec}
    return out


def planned_settings(max_settings: int) -> list:
    """What --measure measures: every shipped preset once, then one-knob neighbours of them (the first
    that builds of each knob's directions is not known before building: each direction's nearest value),
    taken round-robin over the presets in a fixed order until ``max_settings``."""
    from explorer.analysis.diagnosis import neighbours
    from explorer.presets import all_presets

    presets = list(dict.fromkeys(p.spec for p in all_presets().values()))
    moves = {spec: sorted((path[0][0] for path in neighbours(spec)), key=_digest) for spec in presets}
    out = list(presets)
    for round_ in range(max(len(m) for m in moves.values())):
        for spec in presets:
            if len(out) >= max_settings:
                return list(dict.fromkeys(out))
            if round_ < len(moves[spec]):
                out.append(moves[spec][round_])
    return list(dict.fromkeys(out))


# -- in worker processes -------------------------------------------------------------------------------------


def _source_only() -> None:
    from explorer.cuda_env import SOURCE_ONLY

    os.environ[SOURCE_ONLY] = "1"


def costs_of(spec, target: str) -> dict | None:
    """The static diagnosis's view of ``spec``: its roofline's least time and each rule's cost as
    its model charges it (unscaled), or None where it does not build."""
    from explorer.analysis.diagnosis import RULES, facts_of
    from explorer.analysis.sass import compile_binary
    from explorer.build import build
    from explorer.errors import ExplorerError

    try:
        built = build(spec, target)
        try:
            binary = compile_binary(built)
        except ExplorerError:
            binary = None
        facts = facts_of(built, binary=binary)
    except ExplorerError:
        return None
    costs = {}
    for rule in RULES:
        found = rule.check(facts)
        if found is not None and not found.within_roof:
            costs[rule.name] = found.cost_us
    return {"bound_us": facts.bound_us, "costs": costs}


def _compile(spec, directory):
    from explorer.server.compiles import compile_library

    result = compile_library(spec, "auto", directory)
    return result if isinstance(result, str) else None


# -- the fit --------------------------------------------------------------------------------------------------


@dataclass
class Table:
    """The settings' measured times, bounds and unscaled costs as arrays (settings × rules)."""

    rules: list[str]
    measured: np.ndarray
    bound: np.ndarray
    costs: np.ndarray
    groups: list[str]  # each setting's template and workload

    def estimate(self, scales: np.ndarray, rows=slice(None)) -> np.ndarray:
        return self.bound[rows] + self.costs[rows] @ scales


def table_of(samples: list[Sample], views: list[dict | None], rules: list[str]) -> tuple[Table, list[Sample]]:
    """The settings that built, measured for at least MIN_US, as arrays."""
    kept = [(s, v) for s, v in zip(samples, views, strict=True)
            if v is not None and v["bound_us"] > 0 and s.measured_us >= MIN_US]
    costs = np.array([[v["costs"].get(r, 0.0) for r in rules] for _, v in kept]).reshape(len(kept), len(rules))
    return (Table(rules, np.array([s.measured_us for s, _ in kept]), np.array([v["bound_us"] for _, v in kept]),
                  costs, [f"{s.spec.template} {s.spec.workload.label()}" for s, _ in kept]), [s for s, _ in kept])


def fit(t: Table, rows: np.ndarray, sweeps: int = 6) -> np.ndarray:
    """Each rule's scale: coordinate by coordinate over SCALES, the mean |log(estimate / measured)| of
    ``rows`` once each workload's mean of it is taken out. A workload's kernels share what no rule models (the
    efficiency of its instructions, its launch): a one-knob move's estimated speedup, what a suggestion is
    judged by, does not depend on it, so the scales are fitted to the differences within a workload. A rule
    that fires on fewer than MIN_SETTINGS of the rows keeps 1."""
    scales = np.ones(len(t.rules))
    if not len(rows):  # a fold holding every setting (a run of few workloads): nothing to fit the others to
        return scales
    fires = (t.costs[rows] > 0).sum(axis=0)
    log_measured = np.log(t.measured[rows])
    names = sorted(set(t.groups[i] for i in rows))
    group = np.array([names.index(t.groups[i]) for i in rows])
    sizes = np.bincount(group, minlength=len(names))

    def loss() -> float:
        residual = np.log(t.estimate(scales, rows)) - log_measured
        offset = np.bincount(group, residual, minlength=len(names)) / sizes
        return float(np.abs(residual - offset[group]).mean() + PRIOR * np.abs(np.log(scales)).sum())

    for _ in range(sweeps):
        for r in np.flatnonzero(fires >= MIN_SETTINGS):
            trials = []
            for value in SCALES:
                scales[r] = value
                trials.append(loss())
            scales[r] = SCALES[int(np.argmin(trials))]
    return scales


def folds(t: Table) -> list[np.ndarray]:
    """The settings split by workload (template and shape) into FOLDS groups of similar sizes."""
    sizes: dict[str, int] = {}
    for g in t.groups:
        sizes[g] = sizes.get(g, 0) + 1
    fold_of, totals = {}, [0] * FOLDS
    for g in sorted(sizes, key=lambda g: (-sizes[g], _digest(g))):
        i = totals.index(min(totals))
        fold_of[g] = i
        totals[i] += sizes[g]
    return [np.array([k for k, g in enumerate(t.groups) if fold_of[g] == i]) for i in range(FOLDS)]


def pairs_of(samples: list[Sample]) -> list[tuple[int, int]]:
    """Settings of one template and workload whose knobs differ in one knob."""
    out = []
    for i, a in enumerate(samples):
        for j in range(i + 1, len(samples)):
            b = samples[j]
            if (a.spec.template, a.spec.workload) == (b.spec.template, b.spec.workload) \
                    and len(b.spec.knobs.changed_from(a.spec.knobs)) == 1:
                out.append((i, j))
    return out


def held_out(t: Table, samples: list[Sample], fitting=fit) -> dict:
    """Each setting estimated by the fit of the folds that do not hold it (``fitting``: the scales from
    the other rows); the errors per rule and of the one-knob pairs' estimated speedups."""
    estimate = np.zeros(len(t.measured))
    scaled = np.zeros_like(t.costs)
    parts = folds(t)
    for part in parts:
        if not len(part):
            continue
        others = np.setdiff1d(np.arange(len(t.measured)), part)
        scales = fitting(t, others)
        estimate[part] = t.estimate(scales, part)
        scaled[part] = t.costs[part] * scales
    error = np.abs(np.log(estimate / t.measured))
    pair_errors: dict[str, list[float]] = {}
    every_pair = []  # the moves whose speedup the model estimates: some finding's cost moves
    for i, j in pairs_of(samples):
        wrong = abs(math.log(estimate[i] / estimate[j]) - math.log(t.measured[i] / t.measured[j]))
        moved = np.abs(scaled[i] - scaled[j])
        rule = t.rules[int(np.argmax(moved))] if moved.max() > 0 else UNSEEN
        pair_errors.setdefault(rule, []).append(wrong)
        if rule != UNSEEN:
            every_pair.append(wrong)
    per_rule = {}
    for r, name in enumerate(t.rules):
        fired = t.costs[:, r] > 0
        per_rule[name] = {"held_out_settings": int(fired.sum()),
                          "held_out_error": _share(np.median(error[fired])) if fired.any() else None,
                          "held_out_pairs": len(pair_errors.get(name, [])),
                          "pair_error": _share(np.median(pair_errors[name])) if name in pair_errors else None}
    unseen = pair_errors.get(UNSEEN, [])
    return {"settings_error": _share(np.median(error)), "pairs": len(every_pair),
            "speedup_error": _share(np.median(every_pair)) if every_pair else None, "rules": per_rule,
            "unseen_pairs": len(unseen), "unseen_error": _share(np.median(unseen)) if unseen else None}


def _share(log_error: float) -> float:
    """A median |log ratio| as a share: 0.1 is ±10%."""
    return round(math.exp(float(log_error)) - 1, 4)


def calibration(t: Table, samples: list[Sample], about: dict, command: str, graded: set | None = None) -> dict:
    """The table: each rule's scale fitted to the settings that are not ``graded`` (the lesson agreement's), with
    the errors held out by workload among them, and the error of the fitted model on the graded ones (never
    fitted: held out as a whole)."""
    from explorer.analysis.diagnosis.calibration import ASSUMED_SPEEDUP_ERROR

    graded = graded or set()
    kept = np.array([i for i, s in enumerate(samples) if s.spec not in graded], dtype=int)
    apart = np.array([i for i, s in enumerate(samples) if s.spec in graded], dtype=int)
    fitted, fitted_samples = _rows(t, kept), [samples[i] for i in kept]
    scales = fit(fitted, np.arange(len(fitted.measured)))
    errors = held_out(fitted, fitted_samples)
    assumed = held_out(fitted, fitted_samples, lambda table, rows: np.ones(len(table.rules)))  # the models as assumed
    fires = (fitted.costs > 0).sum(axis=0)
    rules = {}
    for r, name in enumerate(t.rules):
        rules[name] = {"scale": round(float(scales[r]), 4), "settings": int(fires[r]),
                       "fitted": bool(fires[r] >= MIN_SETTINGS), **errors["rules"][name]}
    searches = {s.source for s in samples if s.source.startswith("bench/results/search/")}
    sources = sorted({s.source for s in samples} - searches) + (
        [f"{len(searches)} searches in bench/results/search/"] if searches else [])
    return {
        "machine": about["machine"], "date": about["date"], "command": command,
        "measured_by": sources, "settings": len(fitted_samples), "pairs": errors["pairs"],
        "speedup_error": errors["speedup_error"] if errors["speedup_error"] is not None else ASSUMED_SPEEDUP_ERROR,
        "settings_error": errors["settings_error"], "unseen_pairs": errors["unseen_pairs"],
        "unseen_error": errors["unseen_error"],
        "before": {key: assumed[key] for key in ("settings_error", "speedup_error", "pairs")},
        "lessons": _apart_errors(t, [samples[i] for i in apart], apart, scales),
        "devices": {"sm_90": {"l2_gbps": about["l2_gbps"], "from": about.get("l2_from", "")}}
        if about.get("l2_gbps") else {},
        "rules": rules,
    }


def _rows(t: Table, rows: np.ndarray) -> Table:
    return Table(t.rules, t.measured[rows], t.bound[rows], t.costs[rows], [t.groups[i] for i in rows])


def _apart_errors(t: Table, samples: list[Sample], rows: np.ndarray, scales: np.ndarray) -> dict:
    """The fitted model's errors on settings the fit did not see: each setting's estimate, and the speedup of
    each pair of them one knob apart whose estimates differ."""
    if not len(rows):
        return {"settings": 0, "settings_error": None, "pairs": 0, "speedup_error": None}
    part = _rows(t, rows)
    estimate = part.estimate(scales)
    error = np.abs(np.log(estimate / part.measured))
    wrong = [abs(math.log(estimate[i] / estimate[j]) - math.log(part.measured[i] / part.measured[j]))
             for i, j in pairs_of(samples) if not math.isclose(estimate[i], estimate[j])]
    return {"settings": len(rows), "settings_error": _share(np.median(error)), "pairs": len(wrong),
            "speedup_error": _share(np.median(wrong)) if wrong else None}


# -- the runs ---------------------------------------------------------------------------------------------------


def views_of(specs: list, target: str, workers: int) -> list[dict | None]:
    import multiprocessing

    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                             initializer=_source_only) as pool:
        return list(pool.map(costs_of, specs, [target] * len(specs), chunksize=4))


def cached_views(samples: list[Sample], target: str, workers: int, cache: Path | None) -> list[dict | None]:
    """The settings' static views, from ``cache`` where it holds them (to refit without recomputing them:
    they change with the rules, not with the fit), the rest computed and added to it."""
    def key(spec) -> str:
        return f"{spec.template} {spec.workload!r} {sorted(spec.knobs.to_strings().items())}"

    known = json.loads(cache.read_text()) if cache is not None and cache.exists() else {}
    missing = [s.spec for s in samples if key(s.spec) not in known]
    known |= dict(zip(map(key, missing), views_of(missing, target, workers), strict=True)) if missing else {}
    if cache is not None:
        cache.write_text(json.dumps(known))
    return [known[key(s.spec)] for s in samples]


def measure_now(specs: list, workers: int, deadline: float, progress) -> tuple[list[Sample], dict]:
    """Each setting compiled in parallel, then checked against NumPy and timed on the local GPU until
    ``deadline``; the ceilings first (their L2 bandwidth goes into the table)."""
    import multiprocessing
    import tempfile

    import tvm

    import explorer.measure
    from explorer.measure import MeasureSettings, measure

    ceilings = explorer.measure.ceilings()
    with tempfile.TemporaryDirectory(prefix="calibration-libraries-") as directory:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
            libraries = dict(zip(specs, pool.map(_compile, specs, [directory] * len(specs)), strict=True))
        progress(f"compiled {len(specs)} settings")
        out = []
        for spec in specs:
            if time.time() > deadline:
                progress(f"time budget spent: {len(out)} of {len(specs)} settings measured")
                break
            try:
                result = measure(spec, settings=MeasureSettings(repeats=MEASURE_REPEATS), library=libraries[spec])
            except Exception as error:  # one kernel's failure must not end the run
                progress(f"no time: {error}")
                continue
            if result.correct:
                out.append(Sample(spec, result.median_us, "measured by this run"))
    from explorer.targets import local_gpu_target

    device = tvm.cuda(0).device_name
    # The local GPU's target in full (str() of a target reads back as the same target), so that a refit
    # elsewhere from the saved samples sees the settings as this run's static views did.
    return out, {"machine": device, "date": datetime.date.today().isoformat(),
                 "l2_gbps": ceilings.l2_gbps if ceilings is not None else None,
                 "l2_from": f"measured on {device} by this run" if ceilings is not None else "",
                 "target": str(local_gpu_target())}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--measure", action="store_true", help="measure on this machine's GPU")
    what.add_argument("--recorded", action="store_true", help="fit to the times bench/results and docs recorded")
    what.add_argument("--dry-run", action="store_true", help="list what --measure would measure; measure nothing")
    parser.add_argument("--write", action="store_true", help="write explorer/analysis/diagnosis/calibration.json")
    parser.add_argument("--max-settings", type=int, default=300, help="settings --measure measures at most")
    parser.add_argument("--max-minutes", type=float, default=7.0,
                        help="--measure stops timing this long after the start and fits what it has (its static "
                             "views and the fit then take about a minute more on 16 cores)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    parser.add_argument("--out", type=Path, default=None, help="where to write the table (default: the diagnosis's)")
    parser.add_argument("--views-cache", type=Path, default=None,
                        help="keep the settings' static views in this file and reuse them (to refit after changing "
                             "the fit, not the rules)")
    parser.add_argument("--samples", type=Path, default=None,
                        help="with --recorded: fit to the samples a --measure run saved (bench/results/"
                             "calibration-<gpu>.json) instead of the H100's recorded times")
    parser.add_argument("--sample", type=int, default=None,
                        help="fit to this many of the settings only, every n-th (a quick look at the fit)")
    args = parser.parse_args(argv)
    progress = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    started = time.time()
    command = "python bench/calibrate_diagnosis.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    from explorer.analysis.diagnosis import RULES
    from explorer.analysis.diagnosis.calibration import PATH

    rules = [rule.name for rule in RULES]
    if args.dry_run:
        specs = planned_settings(args.max_settings)
        presets = len({p.spec for p in __import__("explorer.presets", fromlist=["all_presets"]).all_presets().values()})
        print(f"--measure would time {len(specs)} settings ({presets} shipped presets, {len(specs) - presets} "
              f"one-knob neighbours), {MEASURE_REPEATS} repeats each, compiled by {args.workers} processes, within "
              f"{args.max_minutes:g} minutes; then fit {len(rules)} rules' scales and hold out {FOLDS} folds.")
        return 0
    if args.measure:
        from explorer.targets import local_gpu_target

        if local_gpu_target() is None:
            print("error: --measure needs a local CUDA GPU (try --recorded or --dry-run).", file=sys.stderr)
            return NO_GPU_EXIT
        samples, about = measure_now(planned_settings(args.max_settings), args.workers,
                                     started + 60 * args.max_minutes, progress)
        saved = samples_path(about["machine"])
        save_samples(samples, {**about, "command": command}, saved)  # before the fit: a refit needs no GPU
        progress(f"kept the {len(samples)} measured settings in {saved.relative_to(ROOT)} (refit from them: "
                 f"--recorded --samples {saved.relative_to(ROOT)})")
        samples = [Sample(s.spec, s.measured_us, str(saved.relative_to(ROOT))) for s in samples]
    elif args.samples is not None:
        samples, about = load_samples(args.samples, progress)
    else:
        samples, about = recorded_samples()
    if args.sample:
        samples = samples[::max(1, len(samples) // args.sample)]
    progress(f"{len(samples)} measured settings; their static diagnoses…")
    views = cached_views(samples, about["target"], args.workers, args.views_cache)
    t, kept = table_of(samples, views, rules)
    result = calibration(t, kept, about, command, graded_settings())
    result["seconds"] = round(time.time() - started)
    text = json.dumps(result, indent=1, ensure_ascii=False) + "\n"
    if args.write:
        (args.out or PATH).write_text(text)
        progress(f"wrote {args.out or PATH}")
        if args.out is None and args.sample is None:  # the table the diagnosis ships: the errors it states
            write_result(*results(result, str(PATH.relative_to(ROOT))))
    print(format_table(result))
    return 0


def results(c: dict, table: str) -> list[Result]:
    """docs/results.md's rows: the held-out errors the calibration states (``table``: where it is kept). They are
    figures to know, the margin a suggestion must beat, not bounds to meet."""
    common = dict(machine=c["machine"], date=c["date"], command=c["command"], run=table)
    return [Result("diagnosis", "the calibration's held-out error of a one-knob move's estimated speedup",
                   "stated (the margin a suggestion must beat)",
                   f"±{c['speedup_error']:.0%} over {c['pairs']} measured pairs ({c['settings']} settings)",
                   "measured", **common),
            Result("diagnosis", "the calibration's held-out error of a setting's estimated time", "stated",
                   f"±{c['settings_error']:.0%} over {c['settings']} settings (±{c['before']['settings_error']:.0%} "
                   "with the models' constants as assumed)", "measured", **common)]


def format_table(c: dict) -> str:
    """The calibration as the Markdown table docs/diagnosis.md prints."""
    before = c["before"]["settings_error"]
    lines = [f"Fitted to {c['settings']} settings measured on {c['machine']} ({c['date']}; "
             f"{', '.join(c['measured_by'])}) with `{c['command']}`. Held out by workload in {FOLDS} folds: the "
             f"median error of a setting's estimate is ±{c['settings_error']:.0%} (±{before:.0%} with the models' "
             f"constants as assumed: the fit is to the differences within a workload); of a one-knob move's estimated "
             f"speedup ±{c['speedup_error']:.0%} over {c['pairs']} measured pairs whose estimates differ "
             + (f"(±{c['before']['speedup_error']:.0%} as assumed)" if c["before"]["speedup_error"] is not None else
                "(none measured: the error assumed)")
             + ": the margin a suggestion must beat. The model "
             f"sees no change in {c['unseen_pairs']} more pairs"
             + (f", which differ by a median ±{c['unseen_error']:.0%} when measured." if c["unseen_error"] else ".")
             + _lessons_sentence(c.get("lessons")),
             "",
             "| rule | settings | scale | held-out error | one-knob pairs | their speedup error |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for name, r in c["rules"].items():
        if not r["settings"]:
            continue
        scale = f"× {r['scale']:.2f}" if r["fitted"] else "— (too few)"
        err = f"±{r['held_out_error']:.0%}" if r["held_out_error"] is not None else "—"
        pair = f"±{r['pair_error']:.0%}" if r["pair_error"] is not None else "—"
        lines.append(f"| {name} | {r['settings']} | {scale} | {err} | {r['held_out_pairs']} | {pair} |")
    return "\n".join(lines) + "\n"


def _lessons_sentence(lessons: dict | None) -> str:
    if not lessons or not lessons.get("settings"):
        return ""
    text = (f" The settings of the lessons' graded steps ({lessons['settings']} measured) are left out of the fit and "
            f"held out as a whole: the median error of their estimates is ±{lessons['settings_error']:.0%}")
    if lessons.get("speedup_error") is not None:
        text += (f", of the speedups of the {lessons['pairs']} pairs of them one knob apart "
                 f"±{lessons['speedup_error']:.0%}")
    return text + "."


if __name__ == "__main__":
    sys.exit(main())
