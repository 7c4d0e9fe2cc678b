"""Where the measuring worker's time went, per template: the median of each phase of a measurement
(load or compile, data, copy, check, time, graph: ms) from the worker's own run log
(explorer/measure/worker.py, ``EXPLORER_RUN_LOG``; the class bench and bench/worker_profile.py
write one), with the median time the GPU was held beside the target: at most 3× the kernel's own
time plus 5 ms (issue 50). A measurement is held for all its phases (the worker takes one at a
time); its kernel's time is the median it measured. Wrong kernels are never timed: counted apart.

    python bench/worker_phases.py /tmp/explorer-kernel-runs.log [--since-ns NS] [--write LABEL] [--machine TEXT]

With --write, the table goes to bench/results/runs/worker-phases-LABEL.md and the target's rows (one per budget)
to docs/results.md.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

from docs_section import Result, run_file, write_result, write_section

try:
    from explorer.measure.worker import RunLine, read_run_line
except ImportError:  # a tree from before the run log had facts (the "before" of bench/worker_profile.py)
    from dataclasses import dataclass, field

    @dataclass(frozen=True)
    class RunLine:
        start_ns: int
        template: str
        phases_ms: dict
        facts: dict = field(default_factory=dict)

        @property
        def held_ms(self) -> float:
            return sum(self.phases_ms.values())

    def read_run_line(line: str) -> RunLine:
        head, _, phases = line.partition("|")
        words = head.split()
        return RunLine(int(words[1]), words[3], {name: float(ms) for name, _, ms in
                                                  (word.partition("=") for word in phases.split())})

# The phases in the order a measurement goes through them; an older log's ("upload",
# "check_and_time") come after, as found.
PHASES = ("load", "compile", "data", "copy", "check", "time", "graph")
TIMES, PLUS_MS = 3, 5.0  # the target: held <= TIMES × the kernel's time + PLUS_MS


def read_log(path: str, since_ns: int = 0) -> list[RunLine]:
    return [run for run in map(read_run_line, Path(path).read_text().splitlines() if Path(path).exists() else [])
            if run.start_ns >= since_ns]


def target_ms(kernel_us: float) -> float:
    return TIMES * kernel_us / 1e3 + PLUS_MS


def phase_rows(runs: list[RunLine]) -> list[dict]:
    """One row per (template, budget): its timed runs' median of each phase, of the time held and of
    the kernel's time, and its wrong runs' count and median time held."""
    groups = defaultdict(list)
    for run in runs:
        groups[run.template, run.facts.get("budget", "-")].append(run)
    rows = []
    for (template, budget), group in sorted(groups.items()):
        timed = [run for run in group if run.facts.get("check") != "wrong"]
        wrong = [run for run in group if run.facts.get("check") == "wrong"]
        names = phase_names(timed or group)
        kernels = [float(run.facts["kernel_us"]) for run in timed if "kernel_us" in run.facts]
        row = {"template": template, "budget": budget, "runs": len(timed), "wrong": len(wrong),
               "wrong_held_ms": statistics.median(run.held_ms for run in wrong) if wrong else None,
               "phases_ms": {name: statistics.median(run.phases_ms.get(name, 0.0) for run in timed)
                             for name in names} if timed else {},
               "held_ms": statistics.median(run.held_ms for run in timed) if timed else None,
               "kernel_us": statistics.median(kernels) if kernels else None,
               "made": sum(run.facts.get("data") == "made" for run in group)}
        row["target_ms"] = target_ms(row["kernel_us"]) if row["kernel_us"] is not None else None
        row["met"] = None if row["target_ms"] is None else row["held_ms"] <= row["target_ms"]
        # Each run against its own kernel's bound: the share within it.
        within = [run.held_ms <= target_ms(float(run.facts["kernel_us"])) for run in timed if "kernel_us" in run.facts]
        row["within"] = sum(within) / len(within) if within else None
        rows.append(row)
    return rows


def phase_names(runs: list[RunLine]) -> list[str]:
    seen = []
    for run in runs:
        seen += [name for name in run.phases_ms if name not in seen]
    return [name for name in PHASES if name in seen] + [name for name in seen if name not in PHASES]


def describe(rows: list[dict]) -> str:
    names = []
    for row in rows:
        names += [name for name in row["phases_ms"] if name not in names]
    names = [name for name in PHASES if name in names] + [name for name in names if name not in PHASES]
    head = ["template", "budget", "timed runs", *(f"{name} ms" for name in names), "held ms (median)",
            "kernel µs (median)", f"target: {TIMES}× kernel + {PLUS_MS:g} ms", "met", "runs within their own",
            "data made", "wrong runs (held ms)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        cell = lambda value, spec=".2f": "—" if value is None else format(value, spec)  # noqa: E731
        met = ("—" if row["met"] is None else "yes" if row["met"]
               else f"**no** ({row['held_ms'] / row['target_ms']:.1f}×)")
        wrong = f"{row['wrong']} ({cell(row['wrong_held_ms'], '.1f')})" if row["wrong"] else "0"
        lines.append("| " + " | ".join([
            row["template"], row["budget"], str(row["runs"]), *(cell(row["phases_ms"].get(name)) for name in names),
            cell(row["held_ms"]), cell(row["kernel_us"], ".1f"), cell(row["target_ms"]), met,
            "—" if row["within"] is None else f"{row['within']:.0%}", str(row["made"]), wrong]) + " |")
    return "\n".join(lines)


def results(rows: list[dict], where: str, machine: str, date: str, command: str, run: str = "") -> list[Result]:
    """docs/results.md's rows, one per budget: how many templates' median time held is within the target, and
    the one furthest from it."""
    out = []
    for budget in dict.fromkeys(row["budget"] for row in rows if row["met"] is not None):
        judged = [row for row in rows if row["budget"] == budget and row["met"] is not None]
        missed = [row for row in judged if not row["met"]]
        furthest = max(judged, key=lambda row: row["held_ms"] / row["target_ms"])
        ratio = furthest["held_ms"] / furthest["target_ms"]
        out.append(Result(
            "measuring", f"the GPU held per measurement, every template ({budget} budget, {where})",
            f"median ≤ {TIMES}× the kernel's time + {PLUS_MS:g} ms",
            f"{len(judged) - len(missed)} of {len(judged)} templates within it; the furthest "
            f"{furthest['template']}, {furthest['held_ms']:.1f} ms for a {furthest['kernel_us']:,.1f} µs kernel "
            f"({ratio:.1f}× its bound)", "met" if not missed else f"missed by {len(missed)} templates",
            machine, date, command, run))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("log", help="the measuring worker's run log (EXPLORER_RUN_LOG)")
    parser.add_argument("--since-ns", type=int, default=0, help="only runs that started at or after this time")
    parser.add_argument("--write", metavar="LABEL",
                        help="write the table to bench/results/runs/worker-phases-LABEL.md and its rows of "
                             "docs/results.md")
    parser.add_argument("--machine", default="", help="the machine, for the docs")
    parser.add_argument("--where", default="a class's run log",
                        help="where the log's measurements come from, as docs/results.md's rows name it")
    args = parser.parse_args(argv)
    runs = read_log(args.log, args.since_ns)
    if not runs:
        print(f"No measurement in {args.log}.", file=sys.stderr)
        return 1
    text = describe(phase_rows(runs))
    print(text)
    if args.write:
        section = f"worker-phases-{args.write}"
        write_section(section, f"### The measuring worker's phases: {args.write}\n\n"
                      f"{args.machine + '. ' if args.machine else ''}`python bench/worker_phases.py {args.log}`: "
                      f"{len(runs)} measurements, medians per template (ms).\n\n{text}")
        command = "python bench/worker_phases.py " + " ".join(argv if argv is not None else sys.argv[1:])
        write_result(*results(phase_rows(runs), args.where, args.machine, time.strftime("%Y-%m-%d"), command,
                              run_file(section)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
