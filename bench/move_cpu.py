"""The CPU a new setting costs a class server, by process: its page's build (a build process), its
kernel's compile for the measuring worker (a compile process: NVRTC and the library's export) and its
diagnosis (the diagnosing process), each in a process of the kind a server runs (the server's own
pools, explorer/server/), and the app process's share (reading the build the build process sent).

Settings new to the server, as a class makes them: the one-knob neighbours of the chosen lessons'
steps (a student moves one knob from a step), one per step and template in turn, each asked as a page
asks: its measurement first (the compile), its build beside it, then its diagnosis. The caches start
empty (a folder of their own), and each process is warm first (one setting of each template through the
whole chain, not counted), as in a class past its first minute. Each process's CPU is read before and
after each setting (its own and its children's: the linker the export runs).

    python bench/move_cpu.py [--lessons matmul_modern conv2d_modern matmul_hopper] [--settings 12]
                             [--profile DIR] [--write LABEL]

``--profile DIR`` records every process with py-spy (one raw file per kind: bench/profile_summary.py
reads them). On the 2-core machine: about 2 minutes for 12 settings (without a GPU, a server's compile
processes are not started: the bench starts one itself). Before/after: the same command in a checkout
of the older tree with this file copied in.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

from docs_section import write_section

KINDS = ("build", "compile", "diagnose", "app")  # the processes a new setting costs CPU in
TEMPLATES_FIRST = 1  # warm-up settings per template (not counted)


def new_settings(lesson_ids: list[str], count: int) -> tuple[list, list]:
    """(one step of each template, warm-up; ``count`` one-knob neighbours of the lessons' steps, new
    to a server that has seen the steps, taken round-robin over the templates)."""
    from explorer.analysis.diagnosis.search import neighbours
    from explorer.lessons import lessons

    steps = [step.preset.spec for lesson in lessons() if lesson.id in lesson_ids for step in lesson.steps]
    if not steps:
        raise SystemExit(f"No lesson among {lesson_ids}.")
    warm = list({spec.template: spec for spec in reversed(steps)}.values())
    seen, by_template = set(steps), defaultdict(list)
    for spec in steps:
        for moves in neighbours(spec):
            moved = moves[0][0]
            if moved not in seen:
                seen.add(moved)
                by_template[moved.template].append(moved)
    chosen, queues = [], [list(queue) for queue in by_template.values()]
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop(len(queue) // 2))  # from the middle: not always the first knob
    return warm, chosen


def cpu_s(process) -> float:
    """A process's CPU seconds, its waited-for children's (the export's linker) included."""
    times = process.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


class Pools:
    """The server's three kinds of worker processes, one each, started as a server starts them."""

    def __init__(self):
        from explorer.server.builds import BuildService
        from explorer.server.compiles import CompileService
        from explorer.server.diagnosing import diagnosing_process
        from explorer.server.settings import ServerSettings

        self.settings = ServerSettings(build_workers=1, compile_workers=1, highlight_ahead=False)
        self.builds = BuildService(self.settings)
        self.compiles = CompileService(self.settings)
        self.diagnosing = diagnosing_process(self.settings)

    def start(self, warm: list, target: str) -> None:
        threads = [threading.Thread(target=pool.start, args=(tuple(warm), target))
                   for pool in (self.builds, self.compiles)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def processes(self) -> dict:
        """Each kind's process (psutil), by the name explorer/processes.py gives it."""
        import psutil

        found = {}
        for child in psutil.Process().children(recursive=True):
            try:
                name = child.name()
            except psutil.Error:
                continue
            kind = name.removesuffix(" worker")
            if kind in KINDS and kind not in found:
                found[kind] = child
        return {**found, "app": psutil.Process()}

    def move(self, spec, target: str) -> dict:
        """One new setting as a page asks for it; what each step said (its outcome)."""
        from explorer.errors import ExplorerError
        from explorer.server.diagnosing import diagnose_in

        said = {}

        def compile_it() -> None:
            try:
                said["compile"] = "ok" if self.compiles.compile(spec, target) else "no library"
            except ExplorerError as error:
                said["compile"] = f"refused: {error}"

        compiling = threading.Thread(target=compile_it)
        compiling.start()  # a page asks for its measurement before it builds
        try:
            self.builds.build(spec, target)
            said["build"] = "ok"
        except ExplorerError as error:
            said["build"] = f"refused: {error}"
        compiling.join()
        # As the server asks (explorer/server/api.py), the page's build on disk where it reads it (an older tree
        # builds the setting again).
        disk = {"disk": self.builds.disk} if "disk" in inspect.signature(diagnose_in).parameters else {}
        outcome = diagnose_in(self.diagnosing, spec, target, None, None, **disk) if said["build"] == "ok" else None
        said["diagnose"] = type(outcome).__name__ if outcome is not None else "-"
        return said

    def close(self) -> None:
        for pool in (self.builds, self.compiles, self.diagnosing):
            pool.close()


def profile(processes: dict, directory: Path) -> list[subprocess.Popen]:
    """py-spy on every process of the run, one raw file per kind, until stopped."""
    directory.mkdir(parents=True, exist_ok=True)
    return [subprocess.Popen(["py-spy", "record", "--pid", str(process.pid), "--rate", "100", "--nonblocking",
                              "--format", "raw", "--output", str(directory / f"py-spy-{kind}.txt")],
                             stdout=subprocess.DEVNULL, stderr=open(directory / f"py-spy-{kind}.log", "w"))
            for kind, process in processes.items()]


def table(rows: list[dict]) -> list[str]:
    """CPU seconds per new setting that builds, by process kind, per template and for all: mean (median);
    then the refused settings' (a sentence, no build to keep)."""
    refused = [row for row in rows if row["said"]["build"] != "ok"]
    rows = [row for row in rows if row["said"]["build"] == "ok"]
    def cell(values: list[float]) -> str:
        return f"{statistics.mean(values):.3f} ({statistics.median(values):.3f})"

    out = ["| template | settings | " + " | ".join(f"{kind} s" for kind in KINDS) + " | all s |",
           "| --- | ---: | " + " | ".join("---:" for _ in KINDS) + " | ---: |"]
    groups = defaultdict(list)
    for row in rows:
        groups[row["template"]].append(row)
    for name, group in [*sorted(groups.items()), ("all", rows)]:
        out.append(f"| {name} | {len(group)} | " + " | ".join(cell([r["cpu"][k] for r in group]) for k in KINDS)
                   + f" | {cell([sum(r['cpu'].values()) for r in group])} |")
    if refused:
        out.append(f"| refused (not in the rows above) | {len(refused)} | "
                   + " | ".join(cell([r["cpu"][k] for r in refused]) for k in KINDS)
                   + f" | {cell([sum(r['cpu'].values()) for r in refused])} |")
    return out


def compare(before: list[dict], after: list[dict]) -> list[str]:
    """Mean CPU seconds per new setting by process kind, before and after, over the settings that built in
    both runs (the same settings: the selection is the same in both trees)."""
    built = lambda rows: {(r["template"], r["knobs"]): r for r in rows if r["said"]["build"] == "ok"}  # noqa: E731
    old, new = built(before), built(after)
    both = [key for key in new if key in old]
    out = [f"| process ({len(both)} settings) | before s | after s | change |", "| --- | ---: | ---: | ---: |"]
    for kind in (*KINDS, "all"):
        take = (lambda r: sum(r["cpu"].values())) if kind == "all" else (lambda r, k=kind: r["cpu"][k])
        a, b = (statistics.mean(take(rows[key]) for key in both) for rows in (old, new))
        out.append(f"| {kind} | {a:.3f} | {b:.3f} | {100 * (b - a) / a:+.0f}% |" if a else f"| {kind} | {a:.3f} | "
                   f"{b:.3f} | — |")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", nargs="*", default=["matmul_modern", "conv2d_modern", "matmul_hopper"])
    parser.add_argument("--settings", type=int, default=12, help="new settings to time")
    parser.add_argument("--target", default="auto")
    parser.add_argument("--machine", help="the machine, as the table should name it (default: its GPU and cores)")
    parser.add_argument("--profile", metavar="DIR", help="record every process with py-spy into DIR")
    parser.add_argument("--json", metavar="PATH", help="each setting's CPU by process, as JSON")
    parser.add_argument("--before", metavar="PATH", help="another run's --json (an older tree): a before/after table")
    parser.add_argument("--before-label", default="an older tree", help="what the --before run was, for the table")
    parser.add_argument("--write", metavar="LABEL", help="write the table to bench/results/runs/move-cpu-LABEL.md")
    args = parser.parse_args(argv)
    begun = time.time()

    def progress(message: str) -> None:
        print(f"[{time.time() - begun:6.1f} s] {message}", file=sys.stderr, flush=True)

    scratch = tempfile.mkdtemp(prefix="move-cpu-")
    for variable, name in (("EXPLORER_CUDA_CACHE", "cuda"), ("EXPLORER_BUILD_DIR", "builds"),
                           ("EXPLORER_LIBRARY_DIR", "libraries")):
        os.environ[variable] = os.path.join(scratch, name)  # empty caches, before the explorer reads them
    warm, specs = new_settings(args.lessons, args.settings)
    progress(f"{len(specs)} new settings of {len({s.template for s in specs})} templates; caches in {scratch}")
    pools = Pools()
    pools.start(warm, args.target)
    for spec in warm:
        pools.move(spec, args.target)
    progress(f"warm: {len(warm)} settings through every process (not counted)")
    processes = pools.processes()
    spies = profile(processes, Path(args.profile)) if args.profile else []
    rows = []
    try:
        for spec in specs:
            before = {kind: cpu_s(process) for kind, process in processes.items()}
            started = time.time()
            said = pools.move(spec, args.target)
            cpu = {kind: cpu_s(process) - before[kind] for kind, process in processes.items()}
            rows.append({"template": spec.template, "knobs": repr(spec.knobs), "said": said,
                         "cpu": cpu, "wall_s": time.time() - started})
            progress(f"{spec.template}: " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
                     + f" CPU-s; {said}")
    finally:
        for spy in spies:
            spy.send_signal(2)  # py-spy writes its file on SIGINT
            spy.wait()
        pools.close()
    text = "\n".join(table(rows))
    if args.before:
        text += (f"\n\nBefore ({args.before_label}: the same command with this file copied in, its `--json` "
                 f"given as `--before`) and after:\n\n"
                 + "\n".join(compare(json.loads(Path(args.before).read_text()), rows)))
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    if args.write:
        import tvm

        nvrtc = ("The compile processes compile the kernels (NVRTC); the diagnosis reads the same cubin from the disk."
                 if tvm.cuda(0).exist else
                 "Without a GPU the compile processes export libraries of CUDA source (no CUDA runtime to compile "
                 "into), so the one NVRTC compile of each setting is the diagnosis's (its registers and SASS); on a "
                 "GPU machine the compile process makes that cubin first and the diagnosis reads it from the disk "
                 "(one compile per setting either way: the same key).")
        gpu = tvm.cuda(0).device_name if tvm.cuda(0).exist else "no GPU"
        write_section(f"move-cpu-{args.write}", f"### CPU per new setting: {args.write}\n\n"
                      f"{args.machine or f'{gpu}, {os.cpu_count()} cores'}, TVM {tvm.__version__}; "
                      f"`python bench/move_cpu.py {' '.join(argv if argv is not None else sys.argv[1:])}`, "
                      f"{time.strftime('%Y-%m-%d')}, {time.time() - begun:.0f} s. CPU seconds per new setting "
                      "(one-knob neighbours of the lessons' steps, caches empty, every process warm), by process: "
                      f"mean (median). {nvrtc}\n\n" + text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
