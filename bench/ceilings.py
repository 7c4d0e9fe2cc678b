"""The roofline's ceilings measured on this machine's GPU, and every shipped best preset placed
under them.

    python bench/ceilings.py            # on the GPU machine: print the tables
    python bench/ceilings.py --write    # ... and write them (bench/results/runs/ceilings.md, docs/results.md)

The ceilings come from the measuring worker, as in the app and ``python -m explorer measure``
(``explorer/measure/ceilings.py``: float4 stream reads of a 1 GiB buffer for HBM and of a
few MiB read many times for L2, FMA chains for FP32, a wgmma chain per 16-bit input type for the
tensor cores on a Hopper GPU), measured once per device. Each best
preset (``presets/best.toml``) is then checked against NumPy and timed the usual way (back to
back, and from a CUDA graph where PyTorch is installed); its placement is the roofline's least
time over its latency. A preset above 100% would beat a ceiling, i.e. the ceiling is too low:
the script lists such presets and exits with status 1.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

from docs_section import Result, run_file, write_result, write_section

import explorer.measure
from explorer.analysis.roofline import MB, published_ceilings
from explorer.measure import measure
from explorer.presets import all_presets

SECTION = "ceilings"
COMMAND = "python bench/ceilings.py --write"


def best_presets() -> list:
    return [p for p in all_presets().values() if p.lesson == "best"]


def ceilings_first(target: str | None = None) -> None:
    """Measure the GPU's roofline ceilings before a table's kernels, which then carry them (the
    benchmark scripts call this first); without them the table has no roofline column, and a
    warning on stderr says why."""
    if explorer.measure.ceilings(target) is None:
        print(f"warning: no roofline column: {explorer.measure.ceilings_error(target)}", file=sys.stderr)


def measure_all() -> tuple[dict, list[dict]]:
    if explorer.measure.ceilings() is None:
        raise SystemExit(f"The ceilings could not be measured: {explorer.measure.ceilings_error()}")
    rows, ceilings, arch = [], None, ""
    for preset in best_presets():
        m = measure(preset.spec)
        if not m.correct:
            rows.append({"preset": preset.id, "workload": m.workload, "correct": False})
            continue
        if m.ceilings is None:  # 16-bit inputs, and the ceilings have no tensor-core peak (not a Hopper GPU)
            rows.append({"preset": preset.id, "workload": m.workload, "correct": True, "no_roof": True})
            continue
        ceilings, arch = m.ceilings, json.loads(m.target).get("arch", "")
        print(f"{preset.id}: {m.median_us:.2f} µs, {m.percent_of_roofline:.0f}% of the roofline", flush=True)
        bandwidth, roof = ceilings.bandwidth_for(m.compulsory_bytes)
        rows.append({
            "preset": preset.id, "workload": m.workload, "correct": True, "device": m.device,
            "intensity": m.flops / m.compulsory_bytes, "roof": roof, "roof_gbps": bandwidth, "bound_us": m.roofline_us,
            "median_us": m.median_us, "percent": m.percent_of_roofline, "graph_us": m.graph_us,
            "graph_percent": m.graph_percent_of_roofline,
        })
    return {"measured": ceilings.to_dict() if ceilings else None,
            "published": published_ceilings(arch).to_dict() if arch else None}, rows


def above_a_ceiling(rows: list[dict]) -> list[str]:
    return [r["preset"] for r in rows if r.get("correct") and not r.get("no_roof")
            and max(r["percent"], r["graph_percent"] or 0) > 100]


def result(rows: list[dict], date: str) -> Result:
    """docs/results.md's row: every shipped best preset right and at or under the measured roofline."""
    above, wrong = above_a_ceiling(rows), [r["preset"] for r in rows if not r["correct"]]
    device = next((r["device"] for r in rows if r.get("device")), "the GPU")
    placed = sum(r["correct"] and not r.get("no_roof") for r in rows)
    return Result("measuring", "the measured roofline: every shipped best preset at or under it",
                  "none above a ceiling, none wrong",
                  f"{placed} of {len(rows)} placed; above a ceiling: {', '.join(above) or 'none'}; wrong: "
                  f"{', '.join(wrong) or 'none'}", "met" if not above and not wrong else "missed", device, date,
                  COMMAND, run_file(SECTION))


def _f(value, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def tables(ceilings: dict, rows: list[dict]) -> str:
    measured, published = ceilings["measured"], ceilings["published"]
    lines = ["## Roofline ceilings (measured on the GPU)", "",
             f"`{COMMAND}`. FP32: FMA chains in registers (2 FLOPs each); HBM: float4 reads of a 1 GiB buffer, "
             "each read once; L2: float4 reads of a buffer of at most half the L2 (8 MiB on an H100) read 64 times; "
             "tensor cores (Hopper only): wgmma m64n256k16 chains from shared memory, float32 accumulators. "
             "Timed like a kernel (median of repeats of ≥ 1 ms). Published: the vendor's datasheet.", "",
             "| ceiling | measured | published |", "| --- | ---: | ---: |"]
    if measured:
        lines.append(f"| source | {measured['source']} | {published['source'] if published else '—'} |")
        lines.append(f"| FP32 GFLOP/s | {_f(measured['fp32_gflops'], 0)} | "
                     f"{_f(published and published['fp32_gflops'], 0)} |")
        lines.append(f"| HBM GB/s | {_f(measured['hbm_gbps'], 0)} | {_f(published and published['hbm_gbps'], 0)} |")
        lines.append(f"| L2-resident GB/s | {_f(measured['l2_gbps'], 0)} | not published |")
        lines += tensor_rows(measured, published)
        published_l2 = f"{published['l2_bytes'] / MB:.0f} MiB" if published else "—"
        lines.append(f"| L2 size | {measured['l2_bytes'] / MB:.0f} MiB | {published_l2} |")
    lines += ["", "### Shipped best presets under the ceilings", "",
              "% of roofline = the roofline's least time (FLOPs at the inputs' compute peak, FP32 or tensor cores, or "
              "compulsory bytes at the roof's bandwidth; L2 when they fit in it) ÷ the kernel's median time. Above "
              "100% a kernel beats a ceiling.",
              "", "| preset | workload | FLOP/B | roof | bound µs | back to back µs | % of roofline | CUDA graph µs "
              "| % of roofline |", "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        if not r["correct"]:
            lines.append(f"| `{r['preset']}` | {r['workload']} | WRONG | | | | | | |")
            continue
        if r.get("no_roof"):
            lines.append(f"| `{r['preset']}` | {r['workload']} | no tensor-core roof on this GPU | | | | | | |")
            continue
        lines.append(f"| `{r['preset']}` | {r['workload']} | {_f(r['intensity'])} | {r['roof']} "
                     f"{_f(r['roof_gbps'], 0)} GB/s | {_f(r['bound_us'])} | {_f(r['median_us'])} | "
                     f"{_f(r['percent'], 0)}% | {_f(r['graph_us'])} | {_f(r['graph_percent'], 0)}% |")
    above = above_a_ceiling(rows)
    lines += ["", "Above a ceiling: " + (", ".join(f"`{p}`" for p in above) if above else "none.")]
    return "\n".join(lines)


def tensor_rows(measured: dict, published: dict | None) -> list[str]:
    """The tensor cores' peaks (float32 accumulation) per input type, or why none was measured."""
    published_peaks = (published or {}).get("tensor_gflops", {})
    dtypes = sorted({*measured.get("tensor_gflops", {}), *published_peaks})
    rows = [f"| {dtype} tensor cores GFLOP/s | {_f(measured.get('tensor_gflops', {}).get(dtype), 0)} | "
            f"{_f(published_peaks.get(dtype), 0)} |" for dtype in dtypes]
    if not measured.get("tensor_gflops"):
        rows.append(f"| tensor cores | not measured: {measured.get('no_tensor_peak', '')} | |")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true",
                        help="write the tables to bench/results/runs/ceilings.md and the row of docs/results.md")
    parser.add_argument("--json", type=Path, default=None, help="also save the figures as JSON here")
    args = parser.parse_args(argv)
    ceilings, rows = measure_all()
    text = tables(ceilings, rows)
    print(text)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"ceilings": ceilings, "presets": rows}, indent=2))
    if args.write:
        write_section(SECTION, text)
        write_result(result(rows, datetime.date.today().isoformat()))
    return 1 if above_a_ceiling(rows) else 0


if __name__ == "__main__":
    sys.exit(main())
