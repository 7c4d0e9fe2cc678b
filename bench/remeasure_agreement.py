"""Does the server's full re-measurement of a setting first timed under load agree with a
measurement on an idle GPU? On this machine's GPU, through the server's own pipeline
(``explorer.server.in_process.MeasuringInProcess``): several sessions ask for the presets at once (the queue is long,
so they are timed with the short budget), the server measures each again in full once the
GPU is free, and then each preset is measured alone with the full budget.

    python bench/remeasure_agreement.py [--presets ID ...] [--write]

Prints a table (quick, full again, idle, the differences); ``--write`` puts it in
bench/results/runs/remeasure-agreement.md and the target's row in docs/results.md. The target: the full
re-measurement within 3% of the idle one.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time

from docs_section import Result, run_file, write_result, write_section

from explorer.measure import MeasureSettings, local_gpu, measure
from explorer.presets import get_preset
from explorer.server.in_process import MeasuringInProcess

PRESETS = ("dw-blog-final-96", "dw-blog-threads-case2", "modern-vector-1024", "modern-async-1024",
           "conv2d-modern-async", "modern-tensorcore-fp16-4096")
AGREEMENT = 0.03
SECTION = "remeasure-agreement"


def under_load(measuring: MeasuringInProcess, specs: list, timeout_s: float = 300) -> dict:
    """Each spec asked for by its own session at once: {spec: the first result}."""
    jobs = {spec: measuring.request(f"student {i}", spec, "auto") for i, spec in enumerate(specs)}
    deadline = time.monotonic() + timeout_s
    for job in jobs.values():
        job.wait(max(0.0, deadline - time.monotonic()))
    return {spec: job.result for spec, job in jobs.items()}


def wait_idle(measuring: MeasuringInProcess, timeout_s: float = 300) -> None:
    """Until the server has nothing left to measure (its full re-measurements done)."""
    deadline = time.monotonic() + timeout_s
    while not measuring.scheduler.idle() and time.monotonic() < deadline:
        time.sleep(0.1)


def rows(presets: tuple[str, ...]) -> list[dict]:
    measuring = MeasuringInProcess()
    measuring.start()
    measuring.ready.wait(300)
    specs = [get_preset(p).spec for p in presets]
    first = under_load(measuring, specs)
    wait_idle(measuring)
    table = []
    for preset, spec in zip(presets, specs, strict=True):
        again = measuring.result(spec, "auto")
        idle = measure(spec, settings=MeasureSettings())
        quick = first[spec]
        table.append({"preset": preset, "quick": quick.median_us if getattr(quick, "quick", False) else None,
                      "again": again.median_us if again is not None and not again.quick else None,
                      "idle": idle.median_us})
    measuring.close()
    return table


def agreeing(table: list[dict]) -> list[bool]:
    """For each preset measured again in full: within AGREEMENT of the idle measurement."""
    return [abs(r["again"] - r["idle"]) / r["idle"] <= AGREEMENT for r in table if r["again"] is not None]


def result(table: list[dict], machine: str, date: str, command: str) -> Result:
    agreed = agreeing(table)
    return Result("measuring", "a setting timed with the short budget under load, measured again in full when the "
                  "GPU is free, against the same setting measured alone", f"within {AGREEMENT:.0%}",
                  f"{sum(agreed)} of {len(agreed)} presets within it", "met" if agreed and all(agreed) else
                  "not measured" if not agreed else f"missed by {len(agreed) - sum(agreed)} presets", machine, date,
                  command, run_file(SECTION))


def describe(table: list[dict]) -> str:
    def pct(value, idle):
        return f"{(value - idle) / idle * 100:+.1f}%" if value is not None else "—"

    lines = ["| preset | short budget under load (µs) | full, again when idle (µs) | idle, alone (µs) | "
             "again vs alone | short vs alone |", "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for row in table:
        quick = f"{row['quick']:.2f}" if row["quick"] is not None else "— (full at once)"
        again = f"{row['again']:.2f}" if row["again"] is not None else "—"
        lines.append(f"| {row['preset']} | {quick} | {again} | {row['idle']:.2f} | {pct(row['again'], row['idle'])} | "
                     f"{pct(row['quick'], row['idle'])} |")
    agreed = agreeing(table)
    lines.append("")
    lines.append(f"Full re-measurements within {AGREEMENT:.0%} of the idle one: {sum(agreed)} of {len(agreed)}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument("--write", action="store_true", help="write the table to bench/results/runs/"
                                                                 f"{SECTION}.md and its row to docs/results.md")
    args = parser.parse_args()
    table = rows(tuple(args.presets))
    text = describe(table)
    print(text)
    if args.write:
        command = ("python bench/remeasure_agreement.py " + " ".join(sys.argv[1:])).strip()
        machine, date = f"{local_gpu()} ({platform.node()})", time.strftime("%Y-%m-%d")
        write_section(SECTION, f"### A setting timed under load, measured again in full\n\n"
                      f"Machine: {machine}. Date: {date}. Command: `{command}`\n\n{text}\n")
        write_result(result(table, machine, date, command))


if __name__ == "__main__":
    main()
