"""The knee of one server: the moves per second it sustains before a p95 target breaks.

Reads the JSON reports of ``bench/classroom.py`` for classes of growing size on one lesson family
(``bench/classroom_gpu.sh knee``) and writes one table: each class's intended and delivered moves
per second, its p95 knob → code and knob → latency, the moves that never showed code, what its
load generator used and what limited the server; then the knee, the most moves per second
delivered by a class that met both targets. A class whose generator was saturated is listed but
gives no verdict.

    python bench/knee.py RESULTS/knee-30.json RESULTS/knee-50.json ... --family modern \\
        --machine 'NVIDIA H100 80GB HBM3, 16 cores' --write knee-modern
"""
from __future__ import annotations

import argparse
import datetime
import json
import time
from pathlib import Path

from docs_section import Result, run_file, write_result, write_section

CODE_P95_S, LATENCY_P95_S = 1.0, 3.0  # the class targets


def seconds(value) -> str:
    return "—" if value is None else f"{value:.2f}"


def verdict(report: dict, code_s: float = CODE_P95_S, latency_s: float = LATENCY_P95_S) -> str:
    """"met", "no verdict (...)" or what broke: one class's row."""
    if report.get("generator_limited"):
        return "no verdict (the load generator was saturated)"
    broke = []
    code, latency = report["knob_to_code"]["p95"], report["knob_to_latency"]["p95"]
    if code is None or code > code_s:
        broke.append(f"code p95 > {code_s:g} s")
    if latency is None or latency > latency_s:
        broke.append(f"latency p95 > {latency_s:g} s")
    if report["lost_moves"]:
        broke.append(f"{len(report['lost_moves'])} moves without code")
    return "; ".join(broke) or "met"


def knee(reports: list[dict]) -> str:
    """The sentence under the table: the most moves per second of a class that met the targets."""
    met = [r for r in reports if verdict(r) == "met"]
    if not met:
        smallest = min(reports, key=lambda r: r["students"])
        return (f"No class met both p95 targets: the knee lies below {smallest['students']} students "
                f"({smallest['delivered_moves_per_s']:.1f} moves/s delivered).")
    best = max(met, key=lambda r: r["delivered_moves_per_s"])
    broke = [r for r in reports if verdict(r) != "met" and not verdict(r).startswith("no verdict")]
    larger = [r for r in broke if r["students"] > best["students"]]
    after = (f"; the next class, {min(r['students'] for r in larger)} students, broke it" if larger else
             "; no larger class was tried")
    return (f"Knee: {best['delivered_moves_per_s']:.1f} moves/s delivered with {best['students']} students "
            f"met both p95 targets{after}.")


def result(knee_sentence: str, family: str, machine: str, date: str, command: str, run: str = "") -> Result:
    """docs/results.md's row of the family's knee (``knee_sentence``: what ``knee`` says): a figure to know, not a
    bound to meet."""
    return Result("class", f"the knee of one server: {family}",
                  f"the most moves/s a class delivers with knob → code p95 ≤ {CODE_P95_S:g} s, knob → latency p95 ≤ "
                  f"{LATENCY_P95_S:g} s and no move without code", knee_sentence, "measured", machine, date, command,
                  run)


def table(reports: list[dict]) -> list[str]:
    rows = ["| students | moves/s intended | moves/s delivered | knob → code p95 (s) | knob → latency p95 (s) "
            "| moves without code | load generator's busiest process: cores, samples ≥ 90% | limited by | verdict |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in sorted(reports, key=lambda r: r["students"]):
        busiest = max(r["generator"], key=lambda g: g["busy_share"])
        rows.append(f"| {r['students']} | {r['intended_moves_per_s']:.1f} | {r['delivered_moves_per_s']:.1f} "
                    f"| {seconds(r['knob_to_code']['p95'])} | {seconds(r['knob_to_latency']['p95'])} "
                    f"| {len(r['lost_moves'])} of {r['moves']} "
                    f"| {seconds(busiest['mean_cores'])}, {busiest['busy_share']:.0%} "
                    f"| {', '.join(r.get('limits', [])) or 'none'} | {verdict(r)} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", help="classroom.py JSON reports, one per class size")
    parser.add_argument("--family", required=True, help="the lessons the classes played, as the table names them")
    parser.add_argument("--machine", required=True)
    parser.add_argument("--command", default="", help="the command that made the reports, for the table")
    parser.add_argument("--write", metavar="LABEL",
                        help="write the table to bench/results/runs/LABEL.md and the knee's row of docs/results.md")
    args = parser.parse_args()
    reports = [json.loads(Path(path).read_text()) for path in args.reports]
    seconds_each = sorted({round(r["seconds"]) for r in reports})
    command = args.command or "python bench/knee.py " + " ".join(args.reports)
    text = "\n".join([
        f"### The knee of one server: {args.family}",
        "",
        f"Machine: {args.machine}. Date: {time.strftime('%Y-%m-%d')}. Command: `{command}`. "
        f"Classes of {', '.join(str(r['students']) for r in sorted(reports, key=lambda r: r['students']))} "
        f"students, {', '.join(map(str, seconds_each))} s each, a move every ~5 s each; targets p95 knob → code "
        f"≤ {CODE_P95_S:g} s and knob → latency ≤ {LATENCY_P95_S:g} s, no move without code.",
        "",
        *table(reports),
        "",
        knee(reports),
    ])
    print(text)
    if args.write:
        write_section(args.write, text)
        write_result(result(knee(reports), args.family, args.machine, datetime.date.today().isoformat(), command,
                            run_file(args.write)))


if __name__ == "__main__":
    main()
