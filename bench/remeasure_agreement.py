"""Does the server's full re-measurement of a setting first timed under load agree with a
measurement on an idle GPU? On this machine's GPU, through the server's own pipeline
(``explorer.server.in_process.MeasuringInProcess``): several sessions ask for the presets at once (the queue is long,
so they are timed with the short budget), the server measures each again in full once the
GPU is free, and then each preset is measured alone with the full budget.

    python bench/remeasure_agreement.py [--presets ID ...] [--write]

Prints a table (quick, full again, idle, the differences) and with ``--write`` puts it into
docs/benchmarks.md. The target: the full re-measurement within 3% of the idle one.
"""
from __future__ import annotations

import argparse
import platform
import sys
import time

from docs_section import write_section

from explorer.measure import MeasureSettings, measure
from explorer.presets import get_preset
from explorer.server.in_process import MeasuringInProcess

PRESETS = ("dw-blog-final-96", "dw-blog-threads-case2", "modern-vector-1024", "modern-async-1024",
           "conv2d-modern-async", "modern-tensorcore-fp16-4096")
AGREEMENT = 0.03


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
    agreed = [abs(r["again"] - r["idle"]) / r["idle"] <= AGREEMENT for r in table if r["again"] is not None]
    lines.append("")
    lines.append(f"Full re-measurements within {AGREEMENT:.0%} of the idle one: {sum(agreed)} of {len(agreed)}.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=list(PRESETS))
    parser.add_argument("--write", action="store_true", help="write the table into docs/benchmarks.md")
    args = parser.parse_args()
    text = describe(rows(tuple(args.presets)))
    print(text)
    if args.write:
        command = "python bench/remeasure_agreement.py " + " ".join(sys.argv[1:])
        write_section("remeasure-agreement", f"### A setting timed under load, measured again in full\n\n"
                      f"Machine: {platform.node()}. Date: {time.strftime('%Y-%m-%d')}. Command: `{command.strip()}`\n\n"
                      f"{text}\n")


if __name__ == "__main__":
    main()
