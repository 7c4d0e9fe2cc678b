"""Grade the diagnosis against the lessons and write docs/diagnosis.md.

    python bench/diagnosis_agreement.py --write            # CPU: lesson agreement (docs/diagnosis.md)
    python bench/diagnosis_agreement.py --try-on-gpu --write
        # GPU (one call, under 9 minutes on a 16-core H200): also measure each shipped preset that
        # is not a search's best beside its top suggestion, or beside every neighbour where the
        # diagnosis says it is near its limit; the table goes into docs/diagnosis.md and
        # docs/lessons-gpu.md

For each step k → k+1 of every lesson, the diagnosis of the setting whose knobs the step moves
(step k's knobs on step k+1's workload; static evidence only) is asked for its top two
suggestions, and the step is graded twice (explorer.agreement): strictly (one of them makes the
step's move) and against the GPU's recorded times (a move the H100 measured faster must be
suggested, one it measured no faster declined). Diagnoses run in parallel processes.
"""
from __future__ import annotations

import argparse
import datetime
import multiprocessing
import os
import platform
import shlex
import sys
import tempfile
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from calibrate_diagnosis import format_table, recorded_times
from docs_section import Result, write_result, write_section

from explorer import agreement as A
from explorer.analysis.diagnosis import (
    LIMIT_RULE,
    RANKING_RULE,
    RULE_TABLE,
    SUGGESTION_RULE,
    calibration,
    diagnose_spec,
)
from explorer.lessons import lessons

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "diagnosis.md"
LESSONS_DOC = ROOT / "docs" / "lessons-gpu.md"
BEST_LESSON = "best"  # presets/best.toml: each a search's best point
TOLERANCE = 0.05  # two times within ±5% are the same speed (explorer.lessons.ClaimThresholds)
NO_GPU_EXIT = 3
# The targets: the share of graded steps that agree, over all lessons and in each with enough graded
# steps; the share of presets whose top suggestion the GPU finds faster (or rightly none).
AGREEMENT_GOAL, LESSON_GOAL, LESSON_GRADED, GPU_GOAL = 0.80, 0.60, 3, 0.85

def _source_only() -> None:
    """In a diagnosing process: CUDA source only (a GPU machine would compile every neighbour's
    binary while building it); registers still come from the cubin explorer.analysis.sass compiles."""
    from explorer.cuda_env import SOURCE_ONLY

    os.environ[SOURCE_ONLY] = "1"


def _diagnosis(spec):
    return diagnose_spec(spec)


# How the processes start: spawned, not forked, as this process may have initialised CUDA. A test without
# a GPU forks them (a spawned process imports the explorer and TVM again first: 2.5 CPU-seconds each).
START_METHOD = "spawn"


def processes(workers: int, initializer=None) -> ProcessPoolExecutor:
    """Fresh processes (START_METHOD)."""
    return ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context(START_METHOD), initializer=initializer)


def diagnosing(workers: int) -> ProcessPoolExecutor:
    return processes(workers, _source_only)


def diagnosed(specs, workers: int, known: dict | None = None) -> dict:
    """``known`` with the diagnoses of the other ``specs``, made in ``workers`` processes."""
    known = dict(known or {})
    wanted = [spec for spec in dict.fromkeys(specs) if spec not in known]
    if wanted:
        with diagnosing(workers) as pool:
            known |= dict(zip(wanted, pool.map(_diagnosis, wanted), strict=True))
    return known


def graded_specs() -> list:
    """The settings whose diagnoses the grades read: each knob step's setting diagnosed (step k's knobs on
    step k+1's workload, explorer.agreement.diagnosed_setting)."""
    return [A.diagnosed_setting(step) for lesson in lessons() for step in lesson.steps[1:]
            if A.why_not_graded(step) in ("", A.SEARCHED, A.SLOWER_ON_PURPOSE)]


def grade(workers: int, progress, known: dict | None = None, times: dict | None = None) -> list[A.StepGrade]:
    """Every lesson step, graded against the GPU's ``times`` (µs by setting; default: the recorded H100 runs,
    calibrate_diagnosis.recorded_times); the graded steps' diagnoses (those not ``known``) run in ``workers``
    processes."""
    times = recorded_times()[0] if times is None else times
    steps = [(lesson, step) for lesson in lessons() for step in lesson.steps[1:]]
    diagnoses = diagnosed(graded_specs(), workers, known)
    grades = [A.grade_step(lesson.id, step, diagnoses.get(A.diagnosed_setting(step)), times)
              for lesson, step in steps]
    for g in grades:
        if g.graded:
            progress(f"{'agrees' if g.agrees else 'differs'}: {g.lesson} step {g.step} ({g.after})")
    return grades


def _changes(changes) -> str:
    return ", ".join(f"{k} {a} → {b}" for k, a, b in changes) or "—"


def _findings(g: A.StepGrade) -> str:
    return ", ".join(f"{rule} ({cost:.2f} µs)" for rule, cost in zip(g.findings, g.costs, strict=True)) or "none"


def _truth(g: A.StepGrade) -> str:
    """What the step's move is graded against: the GPU's speedup, or the tutorial's claim."""
    if g.measured_speedup is not None:
        return f"×{g.measured_speedup:.2f} {'faster' if g.faster else 'no faster'}"
    return "— (claimed faster)" if g.claims_faster else "— (not claimed faster)"


def explanation(g: A.StepGrade) -> str:
    """Why a graded step disagrees, read from the grade: what the diagnosis ranks first and
    what it suggests instead of the step's knobs, or that it suggests a move that does not pay."""
    paid = (f"the GPU measured the step ×{g.measured_speedup:.2f} faster" if g.measured else
            "the tutorial claims the step faster (not measured here)" if g.claims_faster else
            "the tutorial does not claim the step faster (not measured here), nor does the diagnosis say the setting "
            "is near its limit")
    if g.measured and not g.faster:
        return (f"the diagnosis suggests the step's move (#{g.agreeing}: {g.suggestions[g.agreeing - 1]}), "
                f"which the GPU measured no faster (×{g.measured_speedup:.2f})")
    if g.near_limit:
        return ("the diagnosis says no one-knob move is estimated faster by more than the model's error (near its "
                f"limit), and {paid}")
    if not g.suggestions:
        return ("the diagnosis finds no single-knob move that lowers "
                f"its static estimate by more than the model's error, so it suggests nothing; {paid}")
    knobs = ", ".join(dict.fromkeys(k for k, _, _ in g.changes))
    text = (f"the diagnosis ranks {g.findings[0]} first and suggests "
            f"{' and '.join(g.suggestions)}; "
            f"{'neither moves' if len(g.suggestions) > 1 else 'that does not move'} {knobs} the step's way; {paid}")
    if g.agreeing_later is not None:
        text += f"; the step's move is its suggestion #{g.agreeing_later}"
    if len(g.changes) > 2:
        text += f" (the step changes {len(g.changes)} knobs at once)"
    return text


def verdict(g: A.StepGrade) -> str:
    if g.agrees_near_limit:
        text = "yes (near its limit)"
    elif g.declines:
        text = "yes (declines it)"
    elif g.agrees:
        text = f"yes (#{g.agreeing})"
    else:
        text = "no"
    if g.agrees != g.agrees_strictly:
        text += "; strictly " + (f"yes (#{g.agreeing})" if g.agrees_strictly else "no")
    return text + ("" if g.graded else f"; not graded: {g.not_graded}")


def _knob_steps(grades: list[A.StepGrade]) -> list[A.StepGrade]:
    return [g for g in grades if g.not_graded in ("", A.SEARCHED, A.SLOWER_ON_PURPOSE)]


def _share(a: int, n: int) -> str:
    return f"{a / n:.0%}" if n else "—"


def agreement_summary(grades: list[A.StepGrade]) -> list[str]:
    """The headline and the table per lesson, both grades (also docs/lessons-gpu.md's)."""
    agreeing, graded = A.agreement_share(grades)
    strict, _ = A.agreement_share(grades, strict=True)
    measured = sum(g.measured_speedup is not None for g in grades if g.graded)
    knob_steps = _knob_steps(grades)
    all_agreeing = sum(g.agrees for g in knob_steps)
    per_lesson = defaultdict(list)
    for g in grades:
        per_lesson[g.lesson].append(g)
    lines = [
        f"**Against the GPU: {agreeing} of {graded} graded steps agree ({_share(agreeing, graded)}).** Strictly (one "
        f"of the top two suggestions makes the step's move, whatever the GPU measured): {strict} of {graded} "
        f"({_share(strict, graded)}). The GPU measured both settings of {measured} of the {graded} steps; the others "
        f"are graded against the tutorial's claim. Counting also the steps a search found for another workload and "
        f"those the tutorial marks slower: {all_agreeing} of {len(knob_steps)} knob steps "
        f"({_share(all_agreeing, len(knob_steps))}) against the GPU.",
        "",
        "| lesson | steps | graded | measured | agree (GPU) | share | agree strictly | share |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for lesson, rows in per_lesson.items():
        a, n = A.agreement_share(rows)
        st, _ = A.agreement_share(rows, strict=True)
        m = sum(g.measured_speedup is not None for g in rows if g.graded)
        lines.append(f"| {lesson} | {len(rows)} | {n} | {m} | {a} | {_share(a, n)} | {st} | {_share(st, n)} |")
    return lines


GRADING = (
    "Each lesson is a sequence of settings. For each step k → k+1 the diagnosis (static evidence only, `python -m "
    "explorer show <preset> --view diagnosis`) of the setting whose knobs the step moves is asked for its top two "
    "suggestions: step k's own setting, or, where the step changes the workload as well as knobs, step k's knobs "
    "on step k+1's workload (the knob move is made on the new workload; the diagnosis of step k on its own "
    "workload speaks of another problem). A suggestion **makes the step's move** when it moves a knob that step "
    "k+1 changes, the same way (to the same value, or in the same direction; a split's factors towards its inner "
    "or outer levels). A step is graded when it keeps the template and changes a knob, the tutorial does not mark "
    "it slower than an earlier step (it shows a slower setting on purpose), it is not a search's best for another "
    "workload (a preset with a `found_by` command, searched for its own shape rather than made from the step "
    "before), and step k's knobs build for its workload.",
    "",
    "Two grades, both counted over the same graded steps. **Strictly**, a step agrees when one of the top two "
    "suggestions makes its move, whatever the GPU measured. **Against the GPU**, the GPU's verdict on the move is "
    "the truth a student meets. Its times are the H100's recorded ones, by setting: bench/results/lessons-sm_90.json "
    "first, then docs/lessons-gpu.md's step tables, then every valid row of the searches in bench/results/search/ "
    "(the first time found for a setting is taken); the step's speedup is the setting diagnosed's time ÷ step "
    "k+1's. Where both are recorded, a move measured faster (×1.05 or more, beyond the ±5% noise band) agrees "
    "when one of the top two suggestions makes it (as strictly); a move measured no faster (the tutorial's claim "
    "not reproduced on the H100, or a claim of \"no slower\") agrees when the diagnosis **declines** it: none of "
    "its top two suggestions makes it (it says the setting is near its limit, or it suggests another move, whose "
    "worth the GPU section below measures), and disagrees when it suggests it. Where either time is missing, the "
    "tutorial's claim stands in for the GPU's verdict: a step it claims faster agrees as strictly; a step it does "
    "not claim faster (it claims it no slower, or makes no claim against the setting diagnosed) also agrees when "
    "the diagnosis says the setting is near its limit, since the tutorial then advises the move for something "
    "other than speed.",
    "",
    "Declining is easy: a diagnosis that never suggests anything would agree with every step the GPU measured no "
    "faster. So the strict grade is printed beside it (it credits no declining), and the suggestions the diagnosis "
    "makes instead are themselves tried on the GPU below. The columns: *the GPU* is the measured speedup of the "
    "step (— where a time is missing, with the tutorial's claim); *agrees* says which rule credits it: `#n` (the "
    "n-th suggestion makes the move), `near its limit`, or `declines it`, then the strict grade where it differs.",
)


def agreement_text(grades: list[A.StepGrade], seconds: float) -> str:
    knob_steps = _knob_steps(grades)
    lines = [
        "# The diagnosis, graded against the lessons",
        "",
        *GRADING,
        "",
        f"`python bench/diagnosis_agreement.py --write` on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {datetime.date.today().isoformat()}, target: the H100 "
        f"(its published figures: static evidence only); {seconds:.0f} s.",
        "",
    ]
    lines += agreement_summary(grades)
    lines += ["", "## Every step that moves a knob", "", "| lesson | step | changes | the GPU | top two suggestions at "
              "the setting diagnosed | agrees |", "| --- | ---: | --- | --- | --- | --- |"]
    for g in knob_steps:
        step = f"{g.step} {g.after}" + (f" (diagnosed: {g.diagnosed})" if g.diagnosed else "")
        lines.append(f"| {g.lesson} | {step} | {_changes(g.changes)} | {_truth(g)} | "
                     f"{'; '.join(g.suggestions) or '—'} | {verdict(g)} |")
    lines += ["", "## Disagreements among the graded steps", ""]
    for g in grades:
        if g.graded and not g.agrees:
            lines.append(f"- **{g.lesson} step {g.step}** ({g.before} → {g.after}: {_changes(g.changes)}): "
                         f"findings {_findings(g)}; {explanation(g)}.")
    lines += ["", "## Steps not graded", ""]
    for g in grades:
        if not g.graded:
            lines.append(f"- {g.lesson} step {g.step} ({g.after}): {g.not_graded}.")
    lines += ["", "## Calibration", "", *calibration_lines(), "",
              "On a GPU machine, `python bench/calibrate_diagnosis.py --measure --write` measures every shipped preset "
              "and a sample of their one-knob neighbours and rewrites the table (one call, about 8 minutes on 16 "
              "cores); `python bench/diagnosis_agreement.py --try-on-gpu --write` then grades this page again and "
              "times each preset beside its top suggestion, or beside every neighbour where the diagnosis says it is "
              "near its limit (one call, under 9 minutes)."]
    lines += ["", "## Rules", "", f"- Ranking: {RANKING_RULE}", f"- Suggestions: {SUGGESTION_RULE}",
              f"- Near its limit: {LIMIT_RULE}", "",
              "| finding | what it looks for | its cost |", "| --- | --- | --- |",
              *(f"| {name} | {what} | {cost} |" for name, what, cost in RULE_TABLE), ""]
    return "\n".join(lines)


def calibration_lines() -> list[str]:
    """The calibration table the diagnosis reads (bench/calibrate_diagnosis.py wrote it), or why none."""
    table = calibration.table()
    if not table:
        return ["No calibration table: the rules' constants are their models' assumptions "
                "(`python bench/calibrate_diagnosis.py --measure --write` on a GPU, or `--recorded --write`)."]
    return format_table(table).splitlines()


# -- the GPU half ----------------------------------------------------------------------------


def presets_to_try() -> list:
    """Shipped presets that are not a search's best (presets/best.toml), one per setting."""
    best = {step.preset.spec for lesson in lessons() if lesson.id == BEST_LESSON for step in lesson.steps}
    seen, out = set(), []
    for lesson in lessons():
        for step in lesson.steps:
            spec = step.preset.spec
            if lesson.id != BEST_LESSON and spec not in best and spec not in seen:
                seen.add(spec)
                out.append(step.preset)
    return out


def _compile(spec, directory):
    from explorer.server.compiles import compile_library

    result = compile_library(spec, "auto", directory)
    return result if isinstance(result, str) else None


def _near_neighbours(spec) -> list[list]:
    """Each knob direction's settings, nearest first (the first that compiles is the neighbour)."""
    from explorer.analysis.diagnosis import neighbours

    return [[moved for moved, _ in path] for path in neighbours(spec)]


def try_on_gpu(workers: int, deadline: float, progress, known: dict | None = None) -> list[dict]:
    """Each preset beside its top suggestion, measured on the local GPU (10 repeats); where the
    diagnosis suggests nothing (near its limit), beside every neighbour it would have tried, to check
    that none is faster. Presets and their suggestions are measured first, then the neighbours, until
    the ``deadline`` (a ``time.time()``); what is left says so."""
    from explorer.measure import MeasureSettings, measure

    presets = presets_to_try()
    known = diagnosed([p.spec for p in presets], workers, known)
    diagnoses = [known[p.spec] for p in presets]
    tops = [d.suggestions(1) for d in diagnoses]
    progress(f"diagnosed {len(presets)} presets")
    first = list(dict.fromkeys(spec for p, top in zip(presets, tops, strict=True)
                               for spec in (p.spec, *(s.spec for s in top))))
    paths = {p.spec: _near_neighbours(p.spec) for p, top, d in zip(presets, tops, diagnoses, strict=True)
             if not top and d.refused is None}
    later = list(dict.fromkeys(spec for ways in paths.values() for way in ways for spec in way if spec not in first))
    times = {}
    with tempfile.TemporaryDirectory(prefix="diagnosis-libraries-") as directory:
        with processes(workers) as pool:
            specs = first + later
            libraries = dict(zip(specs, pool.map(_compile, specs, [directory] * len(specs)), strict=True))
        progress(f"compiled {len(specs)} kernels")
        chosen = {spec: [next((s for s in way if libraries.get(s)), None) for way in ways]
                  for spec, ways in paths.items()}
        wanted = first + list(dict.fromkeys(s for ways in chosen.values() for s in ways if s is not None))
        for spec in wanted:
            if time.time() > deadline:
                break
            if libraries.get(spec) is None and spec not in first:
                continue
            try:
                result = measure(spec, settings=MeasureSettings(repeats=10), library=libraries[spec])
                times[spec] = result.median_us if result.correct else None
            except Exception as error:  # one kernel's failure must not end the run; its row says so
                progress(f"no time: {error}")
                times[spec] = None
    return [_row(preset, top[0] if top else None, times, [s for s in chosen.get(preset.spec, []) if s is not None])
            for preset, top in zip(presets, tops, strict=True)]


def _row(preset, suggestion, times: dict, neighbours: list = ()) -> dict:
    row = {"preset": preset.id, "us": times.get(preset.spec),
           "suggestion": suggestion.describe() if suggestion else None,
           "suggested_us": times.get(suggestion.spec) if suggestion else None,
           "measured": preset.spec in times and (suggestion is None or suggestion.spec in times)}
    if row["us"] and row["suggested_us"]:
        ratio = row["us"] / row["suggested_us"]
        row["verdict"] = "faster" if ratio >= 1 + TOLERANCE else "slower" if ratio <= 1 - TOLERANCE else "same"
        row["speedup"] = ratio
    elif suggestion is None and row["us"] and neighbours:
        measured = [(times[s], s) for s in neighbours if times.get(s)]
        row["measured"] = len(measured) == len(neighbours)
        if row["measured"]:
            best_us, best = min(measured, key=lambda item: item[0])
            ratio = row["us"] / best_us
            row["neighbours"] = len(measured)
            row["speedup"] = ratio
            row["verdict"] = "near its limit" if ratio < 1 + TOLERANCE else "a neighbour is faster"
            row["fastest"] = ", ".join(f"{k} {a} → {b}" for k, a, b in _changes_of(preset.spec, best))
    return row


def _changes_of(before, after) -> list[tuple[str, str, str]]:
    old, new = before.knobs.to_strings(), after.knobs.to_strings()
    return [(k, old[k], new[k]) for k in after.knobs.changed_from(before.knobs)]


GOOD = ("faster", "near its limit")


def gpu_text(rows: list[dict], device: str, seconds: float, command: str) -> str:
    compared = [r for r in rows if "verdict" in r]
    good = sum(r["verdict"] in GOOD for r in compared)
    faster = sum(r["verdict"] == "faster" for r in compared)
    near = [r for r in compared if r["verdict"] in ("near its limit", "a neighbour is faster")]
    lines = [
        GPU_HEADING,
        "",
        f"`{command}` on {device}, {datetime.date.today().isoformat()}, {seconds:.0f} s: each shipped preset that "
        "is not a search's best beside the diagnosis's top suggestion, both checked against NumPy and timed "
        f"(median of 10 repeats); within ±{TOLERANCE:.0%} counts as the same speed. Where the diagnosis suggests "
        "nothing (near its limit), every neighbour it would have tried is timed too: it is right when none is "
        "faster.",
        "",
        f"**The top suggestion is faster, or the diagnosis rightly says no one-knob move is, for {good} of "
        f"{len(compared)} presets" + (f" ({good / len(compared):.0%})**" if compared else "**")
        + f": {faster} suggestions faster, {sum(r['verdict'] == 'near its limit' for r in near)} of {len(near)} "
        "near-limit verdicts confirmed.",
        "",
        "| preset | µs | top suggestion | µs | verdict |",
        "| --- | ---: | --- | ---: | --- |",
    ]
    for r in rows:
        us = f"{r['us']:.2f}" if r["us"] else "—"
        sus = f"{r['suggested_us']:.2f}" if r.get("suggested_us") else "—"
        if r.get("neighbours"):
            verdict = (f"{r['verdict']}: the fastest of {r['neighbours']} neighbours, {r['fastest']}, "
                       f"{r['speedup']:.2f}×")
        else:
            verdict = (f"{r['verdict']} ({r['speedup']:.2f}×)" if "verdict" in r else
                       "no suggestion" if r["suggestion"] is None and r["measured"] else
                       "not measured (time budget)" if not r["measured"] else "no correct time")
        lines.append(f"| {r['preset']} | {us} | {r['suggestion'] or '—'} | {sus} | {verdict} |")
    return "\n".join(lines) + "\n"


GPU_HEADING = "## The top suggestion, tried on the GPU"


def _share_verdict(share: float, goal: float) -> str:
    return "met" if share >= goal else f"missed by {round(100 * (goal - share))} points"


GPU_GRADE = ("lesson agreement against the GPU: a move the GPU measured faster suggested in the top two, one it "
             "measured no faster not (the tutorial's claim where it measured neither)")
STRICT_GRADE = "lesson agreement, strictly: a top-two suggestion makes the step's move"


def _lesson_shares(grades: list[A.StepGrade], strict: bool) -> tuple[str, str]:
    """The lessons with at least LESSON_GRADED graded steps below LESSON_GOAL: docs/results.md's figure and verdict."""
    per_lesson = defaultdict(list)
    for g in grades:
        per_lesson[g.lesson].append(g)
    shares = [(lesson, *A.agreement_share(rows, strict)) for lesson, rows in per_lesson.items()]
    judged = [(lesson, a, n) for lesson, a, n in shares if n >= LESSON_GRADED]
    low = sorted((s for s in judged if s[1] / s[2] < LESSON_GOAL), key=lambda s: s[1] / s[2])
    now = (f"below it: {', '.join(f'{lesson} {a} of {n} ({a / n:.0%})' for lesson, a, n in low)}" if low else
           f"all {len(judged)} lessons at {LESSON_GOAL:.0%} or more")
    return now, "met" if not low else f"missed in {len(low)} of {len(judged)} lessons"


def results(grades: list[A.StepGrade], gpu_rows: list[dict] | None, machine: str, date: str,
            command: str) -> list[Result]:
    """docs/results.md's rows: the lessons' agreement, both grades, over all and per lesson, and (after
    --try-on-gpu) the share of presets whose top suggestion the GPU confirms."""
    run = str(DOC.relative_to(ROOT))
    out = []
    for target, strict in ((GPU_GRADE, False), (STRICT_GRADE, True)):
        agreeing, graded = A.agreement_share(grades, strict)
        out += [Result("diagnosis", target, f"≥ {AGREEMENT_GOAL:.0%} of graded steps",
                       f"{agreeing} of {graded} ({agreeing / graded:.0%})",
                       _share_verdict(agreeing / graded, AGREEMENT_GOAL), machine, date, command, run),
                Result("diagnosis", f"{target.split(':')[0]}, in every lesson with ≥ {LESSON_GRADED} graded steps",
                       f"≥ {LESSON_GOAL:.0%} in each", *_lesson_shares(grades, strict), machine, date, command, run)]
    if gpu_rows is not None:
        compared = [r for r in gpu_rows if "verdict" in r]
        good = sum(r["verdict"] in GOOD for r in compared)
        out.append(Result(
            "diagnosis", "the top suggestion faster on the GPU (beyond ±5%), or rightly none where it says no "
            "one-knob move is, over the shipped presets that are not a search's best", f"≥ {GPU_GOAL:.0%} of presets",
            f"{good} of {len(compared)} ({good / len(compared):.0%})" if compared else "none compared",
            _share_verdict(good / len(compared), GPU_GOAL) if compared else "not measured", machine, date, command,
            run))
    return out


def kept_gpu_section(document: str) -> str:
    """The GPU section of a document this script wrote (from its heading to the end), or ""."""
    return document[document.index(GPU_HEADING):].rstrip("\n") + "\n" if GPU_HEADING in document else ""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true", help="write docs/diagnosis.md")
    parser.add_argument("--try-on-gpu", action="store_true",
                        help="also measure each preset beside its top suggestion on this machine's GPU")
    parser.add_argument("--max-minutes", type=float, default=8.5,
                        help="with --try-on-gpu: stop measuring this long after the start (the rest is listed as "
                             "not measured)")
    parser.add_argument("--workers", type=int, default=max(1, (os.cpu_count() or 2) - 1),
                        help="processes that diagnose and compile")
    args = parser.parse_args(argv)
    progress = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    if args.try_on_gpu:
        from explorer.targets import local_gpu_target

        if local_gpu_target() is None:
            print("error: --try-on-gpu needs a local CUDA GPU.", file=sys.stderr)
            return NO_GPU_EXIT
    started = time.time()
    known = None
    if args.try_on_gpu:  # the presets' diagnoses and the grades' together, in one pool
        known = diagnosed(graded_specs() + [p.spec for p in presets_to_try()], args.workers)
    grades = grade(args.workers, progress, known)
    text = agreement_text(grades, time.time() - started)
    section, gpu_rows = "", None
    if args.try_on_gpu:
        import tvm

        device = tvm.cuda(0).device_name
        begun = time.time()
        command = "python bench/diagnosis_agreement.py " + shlex.join(argv if argv is not None else sys.argv[1:])
        gpu_rows = try_on_gpu(args.workers, started + 60 * args.max_minutes, progress, known)
        section = gpu_text(gpu_rows, device, time.time() - begun, command)
        text += "\n" + section
    elif args.write:  # the GPU's table of the last --try-on-gpu run stays, with its own date and command
        section = kept_gpu_section(DOC.read_text() if DOC.exists() else "")
        text += "\n" + section if section else ""
    agreeing, graded = A.agreement_share(grades)
    strict, _ = A.agreement_share(grades, strict=True)
    print(f"{agreeing} of {graded} graded steps agree against the GPU, {strict} strictly; "
          f"{time.time() - started:.0f} s")
    if args.write:
        DOC.write_text(text)
        lessons_section = "\n".join(["## The diagnosis, graded against the lessons", "",
                                      "Static evidence only (`python bench/diagnosis_agreement.py --write`; each step "
                                      "in `docs/diagnosis.md`):", "", *agreement_summary(grades)])
        write_section("diagnosis", lessons_section + ("\n\n" + section if section else ""), LESSONS_DOC)
        machine = (device if args.try_on_gpu else
                   f"{platform.machine()}, {os.cpu_count()} CPUs (static evidence: the H100's published figures)")
        write_result(*results(grades, gpu_rows, machine, datetime.date.today().isoformat(),
                              "python bench/diagnosis_agreement.py " + shlex.join(argv if argv is not None
                                                                                  else sys.argv[1:])))
        print(f"wrote {DOC.relative_to(ROOT)} and a section of {LESSONS_DOC.relative_to(ROOT)}")
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
