"""Measure every shipped question's answer on this machine's GPU and write docs/questions.md: the
question, the answer it ships with (and the recorded figures it rests on), the measured answer
and the verdict. A question whose answer the GPU does not reproduce is to be rewritten or dropped.

    python bench/questions_check.py                  # on the GPU machine: every question
    python bench/questions_check.py --dry-run        # anywhere: the recorded figures stand in for the GPU
    python bench/questions_check.py --only dw-blog-threads-case2 --out /tmp/questions.md

One process, no streamlit. The settings are timed as bench/lessons_gpu.py times the lesson steps:
in explorer.measure's worker process, each kernel checked against NumPy before it is timed (a
kernel that is wrong, crashes or hangs loses its own number, never the run), each distinct
setting once. A limit question is checked twice: its fix must be faster than the step beyond the
noise band, and the diagnosis of the step (explorer.analysis.diagnosis, placed on the step's
measured time) must rank the question's answer first. Exit status 0 when every question is
reproduced, 1 when some are not (the document says which and why), 3 without a GPU.
"""
from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import platform
import shlex
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from docs_section import Result, write_result
from result_files import RESULTS, gpu_slug

from explorer import lessons as L
from explorer.analysis.diagnosis import diagnose_spec
from explorer.errors import ExplorerError
from explorer.measure import MeasureSettings, latency_us, local_gpu, shutdown
from explorer.questions import SAME_SPEED, SPEEDUP_FACTOR, Answer, answer_from, recorded_answer, reproduces

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "questions.md"
NO_GPU_EXIT = 3
REPRODUCED, NOT_REPRODUCED = "reproduced", "not reproduced"


def measured_times(questions: list[L.Asked], measurer, progress) -> tuple[dict[str, float], dict[str, str]]:
    """µs and errors by preset id: every setting a question needs, each distinct spec once."""
    presets = list({p.id: p for q in questions for p in q.settings}.values())

    def done(preset, us, error):
        progress(f"{preset.id}: " + (f"{us:,.2f} µs" if us is not None else f"no time ({error})"))

    return L.measure_presets(presets, measurer, on_done=done)


def gpu_measurer(target: str | None):
    """``spec -> µs`` through the measuring worker (explorer.measure.latency_us)."""
    def measured(spec):
        try:
            return latency_us(spec, target=target)
        except ExplorerError:
            raise
        except Exception as error:  # a bug on one kernel's path must not end the run: its row says what happened
            raise ExplorerError(f"internal error: {type(error).__name__}: {error}") from error

    return measured


def recorded_measurer(questions: list[L.Asked]):
    """The dry run's stand-in for the GPU: each setting's recorded time (a setting recorded by two
    questions takes the first one's)."""
    times = {}
    for q in questions:
        for preset, us in zip(q.settings, q.question.recorded.us, strict=True):
            times.setdefault(preset.spec, us)
    return times.__getitem__


def first_finding(question: L.Asked, measured_us: float | None, target: str | None) -> str:
    """The rule the diagnosis of the step ranks first (placed on its measured time), or why none."""
    diagnosis = diagnose_spec(question.preset.spec, target, measured_us=measured_us,
                              workers=max(1, min(8, os.cpu_count() or 1)))
    if diagnosis.refused:
        return f"— ({diagnosis.refused})"
    return diagnosis.findings[0].rule if diagnosis.findings else "— (no finding)"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def expected_cell(question: L.Asked) -> str:
    recorded = recorded_answer(question.question)
    return _cell(f"{question.words(question.question.answer)} ({_figures(question, recorded)})")


def _figures(question: L.Asked, answer: Answer) -> str:
    names = [f"step {p.step}" if p.lesson == question.preset.lesson else p.id for p in question.settings]
    return f"{names[0]} {answer.us[0]:,.2f} µs, {names[1]} {answer.us[1]:,.2f} µs, on {answer.where}"


def check(question: L.Asked, times: dict, errors: dict, device: str, diagnosis: str | None) -> dict:
    """One row: the measured answer and the verdict (with the reason where not reproduced)."""
    first, second = (p.id for p in question.settings)
    row = {"preset": question.preset.id, "lesson": question.preset.lesson, "step": question.preset.step,
           "kind": question.question.kind, "question": question.text, "expected": question.question.answer,
           "recorded_us": list(question.question.recorded.us), "measured_us": None, "measured": None,
           "diagnosis": diagnosis, "verdict": NOT_REPRODUCED, "why": ""}
    if first not in times or second not in times:
        row["why"] = errors.get(first) or errors.get(second) or "not measured"
        return row
    answer = answer_from(question.question, (times[first], times[second]), device, True)
    row.update(measured_us=[times[first], times[second]], measured=answer.value,
               measured_words=f"{question.words(answer.value)} ({_figures(question, answer)})")
    why = []
    if not reproduces(question.question, answer):
        why.append("its fix is not faster beyond the noise band" if question.question.kind == "limit" else
                   f"the GPU's answer is {question.words(answer.value)}")
    if diagnosis is not None and diagnosis != question.question.answer:
        why.append(f"the diagnosis ranks {diagnosis} first")
    row.update(verdict=NOT_REPRODUCED if why else REPRODUCED, why="; ".join(why))
    return row


def render(rows: list[dict], header: dict) -> str:
    reproduced = sum(r["verdict"] == REPRODUCED for r in rows)
    lines = [
        f"# The lessons' questions on {header['device']}", "",
        ("**Dry run, nothing measured:** the recorded figures stand in for the GPU, to check this script; "
         "`python bench/questions_check.py` on the GPU machine measures them. " if header["dry_run"] else "")
        + f"{header['date']}, `{header['command']}` on {header['device']} ({header['cpus']} CPU cores, "
          f"{header['elapsed_s']:.0f} s), TVM {header['tvm']}: every setting a question needs checked against NumPy "
          f"in the measuring worker, then timed with TVM's `time_evaluator` (median of {header['repeats']} repeats "
          f"of ≥ {header['min_repeat_ms']} ms), each distinct setting once.",
        "",
        f"A question is **reproduced** when this GPU's two times give the answer it ships with: \"about the same\" "
        f"within ±{SAME_SPEED:.0%} (faster or slower beyond it), a speedup within a factor of {SPEEDUP_FACTOR:g} "
        f"(judged on a log scale, as a student's guess is), the faster of two settings the same one, and for \"what "
        f"limits this setting\" the fix faster than the step beyond ±{SAME_SPEED:.0%} and the diagnosis of the step, "
        "placed on its measured time, ranking the answer first. Its expected answer rests on the recorded figures "
        "shipped with the question (presets/*.toml, `[preset.question]`); a question this GPU does not reproduce is "
        "rewritten or dropped.",
        "",
        f"**{reproduced} of {len(rows)} questions reproduced.**",
        "",
        "| lesson | step | question | expected answer (recorded figures) | measured | verdict |",
        "| --- | ---: | --- | --- | --- | --- |",
    ]
    questions = {q.preset.id: q for q in L.questions()}
    for r in rows:
        q = questions[r["preset"]]
        measured = r.get("measured_words") or f"— ({r['why']})"
        if r["diagnosis"] is not None:
            measured += f"; the diagnosis ranks first: {r['diagnosis']}"
        verdict = f"**{r['verdict']}**" + (f": {r['why']}" if r["why"] and r["measured"] is not None else "")
        lines.append(f"| {r['lesson']} | {r['step']} | {_cell(q.text)} | {expected_cell(q)} | {_cell(measured)} "
                     f"| {_cell(verdict)} |")
    return "\n".join(lines) + "\n"


def result(rows: list[dict], header: dict) -> Result:
    """docs/results.md's row: every shipped question reproduced on this GPU."""
    failed = [r["preset"] for r in rows if r["verdict"] != REPRODUCED]
    return Result("lessons", "every shipped question's answer reproduced on the GPU", "all",
                  f"{len(rows) - len(failed)} of {len(rows)} reproduced", "met" if not failed else
                  f"missed: {len(failed)} not reproduced ({', '.join(failed)})",
                  f"{header['device']}, {header['cpus']} cores", header["date"], header["command"],
                  str(DOC.relative_to(ROOT)))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="PRESET", help="the questions of these steps")
    parser.add_argument("--dry-run", action="store_true",
                        help="no GPU: the recorded figures stand in for the measurements (writes a temporary file "
                             "unless --out is given)")
    parser.add_argument("--no-diagnosis", action="store_true", help="skip the diagnosis of the limit questions")
    parser.add_argument("--out", type=Path, help=f"the document to write (default {DOC.relative_to(ROOT)})")
    parser.add_argument("--target", default=None, help="target name for the builds (default: this machine's GPU)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    questions = list(L.questions())
    if args.only:
        unknown = sorted(set(args.only) - {q.preset.id for q in questions})
        if unknown:
            print(f"error: no question at step {', '.join(unknown)}", file=sys.stderr)
            return 2
        questions = [q for q in questions if q.preset.id in args.only]
    progress = functools.partial(print, file=sys.stderr, flush=True)
    device = "the recorded figures (dry run)" if args.dry_run else local_gpu()
    if device is None:
        print("error: no CUDA device on this machine; run this script on the GPU machine, or try --dry-run.",
              file=sys.stderr)
        return NO_GPU_EXIT
    measurer = recorded_measurer(questions) if args.dry_run else gpu_measurer(args.target)
    try:
        times, errors = measured_times(questions, measurer, progress)
    finally:
        shutdown()
    rows = []
    for q in questions:
        diagnosis = None
        if q.question.kind == "limit" and not args.no_diagnosis:
            diagnosis = first_finding(q, times.get(q.preset.id), args.target)
            progress(f"diagnosis of {q.preset.id}: {diagnosis} first")
        rows.append(check(q, times, errors, device, diagnosis))
    settings = MeasureSettings()
    command = ["bench/questions_check.py", *(argv if argv is not None else sys.argv[1:])]
    header = {"device": device, "date": datetime.date.today().isoformat(), "elapsed_s": time.perf_counter() - start,
              "command": "python " + " ".join(shlex.quote(a) for a in command), "cpus": os.cpu_count(),
              "host": platform.node(), "tvm": metadata.version("apache-tvm"), "repeats": settings.repeats,
              "min_repeat_ms": settings.min_repeat_us / 1000, "dry_run": args.dry_run}
    out = args.out or (Path(tempfile.gettempdir()) / "questions-dry-run.md" if args.dry_run else DOC)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(rows, header))
    if not args.dry_run:
        if out == DOC and not args.only:  # the whole table: the target's current figure
            write_result(result(rows, header))
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"questions-{gpu_slug(device)}.json").write_text(json.dumps({"header": header, "questions": rows},
                                                                               indent=2))
    failed = [r["preset"] for r in rows if r["verdict"] != REPRODUCED]
    progress(f"wrote {out} ({header['elapsed_s']:.0f} s): {len(rows) - len(failed)} of {len(rows)} reproduced"
             + (f"; not reproduced: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
