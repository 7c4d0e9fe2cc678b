"""A leaderboard submission's time from the click to the board, on the GPU machine.

The path is the Class page's: ``explorer.classroom.submit`` (display name checked, the kernel
checked against NumPy and timed through the measurement queue, the entry written to SQLite)
then ``explorer.classroom.board`` (each student's best, read back from SQLite). The first
submission is reported apart (the worker process starts, the kernel compiles, PyTorch is
measured once for the workload); then ``--runs`` submissions one after the other give the
p50. ``--students N`` then submits N at once from threads, as a class would after the
teacher says "go": each one's click-to-board time includes its wait in the queue.

    python bench/classroom_submit.py [--preset best-dw-96] [--runs 20] [--students 30] [--write]
    python bench/classroom_submit.py --rpc HOST:PORT --key KEY   # through a tracker's GPU servers
"""
from __future__ import annotations

import argparse
import datetime
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from explorer import classroom
from explorer.measure import Remote, local_gpu, shutdown
from explorer.presets import get_preset

SECTION = "classroom-submit"


def click_to_board(store: classroom.Store, name: str, spec, remote=None) -> tuple[float, classroom.Entry]:
    start = time.perf_counter()
    entry = classroom.submit(store, name, spec, remote=remote)
    places = classroom.board(store, entry.workload)
    elapsed = time.perf_counter() - start
    assert any(p.entry.name == name for p in places), "the submission is not on the board"
    return elapsed, entry


def at_once(store: classroom.Store, spec, students: int, remote=None) -> list[float]:
    times, errors, start = [], [], threading.Barrier(students)

    def student(i: int) -> None:
        try:
            start.wait()
            times.append(click_to_board(store, f"student {i}", spec, remote)[0])
        except Exception as error:  # noqa: BLE001 (reported below)
            errors.append(error)

    threads = [threading.Thread(target=student, args=(i,)) for i in range(students)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return times


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="best-dw-96")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--students", type=int, default=30, help="submitters at once (0: skip)")
    parser.add_argument("--rpc", metavar="HOST:PORT", help="measure through this tracker's GPU servers")
    parser.add_argument("--key", help="the servers' key at the tracker")
    parser.add_argument("--write", action="store_true",
                        help="write the report to bench/results/runs/classroom-submit.md")
    args = parser.parse_args()
    remote = Remote.parse(args.rpc, args.key) if args.rpc else None
    gpu = f"the GPU servers of {remote}" if remote else local_gpu()
    if gpu is None:
        sys.exit("No GPU here: a submission is measured on the server's GPU (or give --rpc HOST:PORT --key KEY).")
    spec = get_preset(args.preset).spec
    with tempfile.TemporaryDirectory() as tmp:
        store = classroom.Store(Path(tmp) / "class.sqlite3")
        first, entry = click_to_board(store, "first", spec, remote)
        runs = [click_to_board(store, f"run {i}", spec, remote)[0] for i in range(args.runs)]
        crowd = at_once(store, spec, args.students, remote) if args.students else []
        pytorch = store.pytorch_us(entry.workload, entry.device)
    shutdown()
    ms = [t * 1e3 for t in runs]
    lines = [
        "## Leaderboard submission: click to board" + (" (through a tracker)" if remote else ""),
        "",
        f"`python bench/classroom_submit.py --preset {args.preset} --runs {args.runs} --students {args.students}"
        f"{f' --rpc {args.rpc} --key {args.key}' if remote else ''} --write` on {gpu}, {datetime.date.today()}: "
        "`explorer.classroom.submit` (checked against NumPy, timed through the measurement queue, written to "
        "SQLite) then `explorer.classroom.board` (read back), as the Class page does; the page's own rerun is not "
        "included.",
        "",
        "| | p50 ms | p90 ms | min ms | max ms |",
        "| --- | --- | --- | --- | --- |",
        f"| {args.runs} submissions, one after the other | {statistics.median(ms):.0f} | {percentile(ms, 90):.0f} "
        f"| {min(ms):.0f} | {max(ms):.0f} |",
    ]
    if crowd:
        c = [t * 1e3 for t in crowd]
        lines.append(f"| {args.students} submitted at once (queue wait included) | {statistics.median(c):.0f} | "
                     f"{percentile(c, 90):.0f} | {min(c):.0f} | {max(c):.0f} |")
    lines += [
        "",
        f"The first submission took {first * 1e3:.0f} ms (worker start, compile, PyTorch measured once: "
        f"{pytorch:.2f} µs)." if pytorch else f"The first submission took {first * 1e3:.0f} ms (worker start, "
        "compile; PyTorch not measured).",
        f"The kernel ({args.preset}): {entry.score_us:.2f} µs ({'CUDA graph' if entry.graph_us else 'back to back'}).",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        from docs_section import write_section

        write_section(SECTION + ("-rpc" if remote else ""), text)


if __name__ == "__main__":
    main()
