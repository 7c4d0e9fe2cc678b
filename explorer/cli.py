"""``python -m explorer``: list presets and knobs, show code and analyses.

Exit status: 0 ok, 2 invalid input (one line on stderr, never a traceback); ``measure``
also: 1 the kernel's output is wrong, 3 no CUDA device (and no --rpc).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import NamedTuple

from . import measure, urlstate
from .analysis import ncu
from .analysis.diagnosis import counters_of, diagnose, diagnosis_json, format_diagnosis, ncu_metrics
from .analysis.ranking import static_score
from .analysis.sass import compile_binary
from .build import Spec, build
from .errors import EXIT_INVALID, ExplorerError, PresetError
from .export import file_name, snippet
from .measure.errors import NoDevice, RemoteError
from .presets import all_presets, get_preset
from .schedules import TEMPLATES
from .search import sweep
from .search.grid import Grid
from .search.tune import tune
from .server import launcher, prepare
from .tabs import ANALYSES, measured_here

EXIT_WRONG = 1
EXIT_NO_DEVICE = 3
EXIT_CLOSED_PIPE = 141  # what a shell reports for a command its pipe's reader stopped (128 + SIGPIPE)


class _Start(NamedTuple):
    """What a command starts from: a preset, or a template at its defaults."""

    id: str
    title: str


def _spec_from_args(args):
    if args.preset in TEMPLATES and args.preset not in all_presets():
        template = TEMPLATES[args.preset]
        start = _Start(template.name, template.title)
        spec = Spec(template.name, template.default_workload(), template.knobs())
    else:
        try:
            preset = get_preset(args.preset)
        except PresetError as error:  # the command line's own hint (the app names its lessons instead)
            raise PresetError(f"{error} List them with: python -m explorer presets") from None
        start, spec = _Start(preset.id, preset.title), preset.spec
    overrides = {}
    for item in args.set or []:
        if "=" not in item:
            raise ExplorerError(f"--set expects knob=value, got '{item}'.")
        name, value = item.split("=", 1)
        overrides[name.strip()] = value
    if overrides:
        import dataclasses

        spec = dataclasses.replace(spec, knobs=spec.knobs.from_strings(overrides, spec.knobs))
    return start, spec


def cmd_presets(args) -> int:
    rows = [
        {"id": p.id, "template": p.spec.template, "workload": p.spec.workload.label(), "lesson": p.lesson,
         "step": p.step, "title": p.title}
        for p in all_presets().values()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        width = max(len(r["id"]) for r in rows)
        twidth = max(len(r["template"]) for r in rows)
        for r in rows:
            print(f"{r['id']:<{width}}  {r['template']:<{twidth}}  {r['workload']}")
    return 0


def cmd_knobs(args) -> int:
    preset, spec = _spec_from_args(args)
    rows = [
        {
            "name": knob.name,
            "value": knob.format(getattr(spec.knobs, knob.name)),
            "allowed": knob.describe_domain(),
            "help": knob.help,
        }
        for knob in spec.knobs.fields()
    ]
    if args.json:
        print(json.dumps({"preset": preset.id, "template": spec.template, "knobs": rows}, indent=2))
    else:
        width = max(len(r["name"]) for r in rows)
        for r in rows:
            print(f"{r['name']:<{width}}  = {r['value']:<10}  [{r['allowed']}]  {r['help']}")
    return 0


# --view name -> function(spec, args) -> (text, json-able): the build's code and its diagnosis here;
# the analyses come from their registry (views()).
VIEWS: dict[str, Callable] = {}


def views() -> dict[str, Callable]:
    """Every --view: the ones above and one per analysis (explorer/tabs.py)."""
    return {**VIEWS, **{name: analysis.view for name, analysis in ANALYSES.items()}}


def view(name: str):
    def register(fn):
        VIEWS[name] = fn
        return fn

    return register


@view("tir")
def _view_tir(spec, args):
    b = build(spec, args.target)
    return b.tensorir, {"tensorir": b.tensorir, "trace": b.trace}


@view("lowered")
def _view_lowered(spec, args):
    b = build(spec, args.target)
    return b.lowered, {"lowered": b.lowered}


@view("cuda")
def _view_cuda(spec, args):
    b = build(spec, args.target)
    return b.cuda, {"cuda": b.cuda}


@view("diagnosis")
def _view_diagnosis(spec, args):
    b = build(spec, args.target)  # a refused setting stops here with its one sentence (exit 2)
    measured = measured_here(spec) if args.target in (None, "", "auto") else None
    measured = measured if measured is not None and measured.correct else None
    counters = None
    if args.ncu:  # one launch profiled by Nsight Compute on this machine's GPU
        launch = ncu.launch_of(ncu.profile(spec, metrics=ncu_metrics()), b.kernels[0].name)
        counters = counters_of(launch) if launch is not None else None
    d = diagnose(b, binary=compile_binary(b), ceilings=measured.ceilings if measured else None,
                 measured_us=measured.median_us if measured else None, counters=counters)
    text = format_diagnosis(d, f"python -m explorer show {args.preset}")
    return text, {"diagnosis": diagnosis_json(d, urlstate.to_query)}  # each suggestion with its link's parameters


def cmd_show(args) -> int:
    _, spec = _spec_from_args(args)
    text, data = views()[args.view](spec, args)
    if args.json:
        print(json.dumps({"template": spec.template, "workload": spec.workload.label(), "view": args.view, **data},
                         indent=2, default=str))
    else:
        print(text)
    return 0


def _progress_bar(fraction: float, text: str) -> None:
    """A progress bar on stderr, so that stdout stays clean for --json."""
    filled = round(30 * fraction)
    print(f"\r[{'#' * filled}{'.' * (30 - filled)}] {text}", end="\n" if fraction >= 1 else "", file=sys.stderr,
          flush=True)


def _print_table(rows: list[dict], columns: list[str]) -> None:
    cells = [[("" if r.get(c) is None else f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c])) for c in columns]
             for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    for line in [columns, *cells]:
        print("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=False)).rstrip())


def cmd_sweep(args) -> int:
    preset, spec = _spec_from_args(args)
    grid = Grid.parse(spec, args.grid)
    remote = None
    if args.rpc:
        remote = measure.Remote.parse(args.rpc, args.key)
    # None without a GPU or --rpc: then ranked by the static analyses.
    measurer = measure.gpu_measurer(args.target, remote)
    if measurer is None and spec.template_def.pipeline == "tirx":
        raise ExplorerError(f"The static analyses read the compute stages of scheduled TensorIR, and a kernel "
                            f"written in TIRx has none: sweep {spec.template} on a GPU (or with --rpc) to rank "
                            f"by measurement.")
    result = sweep.run(
        grid, target=args.target, measurer=measurer, scorer=static_score, sample=args.sample, workers=args.workers,
        on_progress=lambda p: _progress_bar(p.fraction, p.describe(measurer is not None)),
    )
    if args.json:
        print(json.dumps({"preset": preset.id, **result.to_json()}, indent=2, default=str))
        return 0
    print(result.ranking)
    value = "latency_us" if result.measured else "static_cost"
    rows = [r for r in result.table() if r["rank"] is not None][: args.top]
    _print_table(rows, ["rank", *grid.knob_names, value])
    print(f"{len(result.ranked())} valid of {len(result.points)} in {result.elapsed_s:.1f} s "
          f"({result.per_minute:.0f}/min).")
    for status, count, example in result.skipped_reasons():
        print(f"skipped {count} ({status}), e.g.: {example}")
    best = result.best
    if best is not None:
        changed = " ".join(f"--set {k}={v}" for k, v in best.knobs.to_strings().items() if k in grid.knob_names)
        print(f"best: python -m explorer show {preset.id} {changed} --view cuda")
    return 0


def cmd_tune(args) -> int:
    preset, spec = _spec_from_args(args)
    result = tune(
        spec.workload, args.trials, target=args.target, strategy=args.strategy, work_dir=args.work_dir,
        workers=args.workers, on_progress=lambda p: _progress_bar(p.fraction, p.describe()),
    )
    hand_trace = str(spec.template_def.apply(spec.workload, spec.knobs).trace)  # the preset's, for comparison
    if args.json:
        print(json.dumps({"preset": preset.id, **result.to_json(), "hand_trace": hand_trace}, indent=2, default=str))
        return 0
    print(f"MetaSchedule on {result.workload.label()} ({result.target}): best {result.best_us:.2f} µs, "
          f"{result.trials} trials measured in {result.elapsed_s:.0f} s, {result.strategy} search, "
          f"{result.cost_model} cost model.")
    print(result.trace)
    return 0


def cmd_export(args) -> int:
    preset, spec = _spec_from_args(args)
    code = snippet(spec, args.target, title=preset.title if not args.set else f"{preset.title} (modified)")
    if args.output == "-":
        print(code, end="")
        return 0
    path = args.output or file_name(spec, preset.id)
    with open(path, "w") as f:
        f.write(code)
    print(f"wrote {path}: python {path} prints the TIR and CUDA, and checks and times the kernel on a GPU",
          file=sys.stderr)
    return 0


def cmd_measure(args) -> int:
    preset, spec = _spec_from_args(args)
    if args.key and not args.rpc:
        raise RemoteError("--key goes with --rpc HOST:PORT (the tracker).")
    remote = measure.Remote.parse(args.rpc, args.key) if args.rpc else None
    if remote is not None and args.baseline:
        raise RemoteError("The PyTorch baseline runs on a local GPU only; drop --baseline with --rpc.")
    settings = measure.MeasureSettings(time_limit_s=args.time_limit, repeats=args.repeats, seed=args.seed,
                                cold_l2=args.cold_l2)
    try:
        result = measure.measure(spec, target=args.target, remote=remote, settings=settings,
                                 on_wait=lambda ahead: print(f"waiting: {ahead} ahead of you", file=sys.stderr))
    except NoDevice as error:
        if remote is not None:
            raise
        print(f"error: {error}", file=sys.stderr)  # NO_GPU: "no CUDA device found; use --rpc ..."
        return EXIT_NO_DEVICE
    torch = measure.baseline(spec.workload, settings=settings) if args.baseline and result.correct else None
    if args.json:
        print(json.dumps({"preset": preset.id, "knobs": spec.knobs.to_strings(), **result.to_dict(),
                          "baseline": torch.to_dict() if torch else None}, indent=2))
    else:
        print(result.summary())
        if torch is not None and torch.timing is not None:
            tvm_us, how = result.versus_pytorch
            ratio = torch.median_us / tvm_us
            verdict = f"TVM is {ratio:.2f}x faster" if ratio >= 1 else f"TVM is {1 / ratio:.2f}x slower"
            print(f"{torch.library} on {torch.device}: median {torch.median_us:.2f} µs (CUDA graphs, TF32 off); "
                  f"{verdict} ({how}).")
    return 0 if result.correct else EXIT_WRONG


def _add_spec_args(parser):
    parser.add_argument("preset", help="preset id (python -m explorer presets), or a template's name for its defaults")
    parser.add_argument("--set", action="append", metavar="KNOB=VALUE", help="override a knob; repeatable")
    parser.add_argument("--target", default=None, help="auto (default: local GPU, else H100), h100, sm_80, a TVM tag")


def _processes(text: str) -> int:
    """A number of processes: a whole number, 1 or more."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"a number of processes is a whole number of 1 or more, not '{text}'")
    return int(text)


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m explorer", description="Explore TVM GPU kernel schedules.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("presets", help="list the presets")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_presets)
    p = sub.add_parser("knobs", help="list a preset's template knobs")
    _add_spec_args(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_knobs)
    p = sub.add_parser("show", help="print a view of a preset's build")
    _add_spec_args(p)
    p.add_argument("--view", required=True, choices=sorted(views()))
    p.add_argument("--json", action="store_true")
    p.add_argument("--ncu", action="store_true",
                   help="with --view banks or diagnosis: measure the counters with Nsight Compute (GPU)")
    p.set_defaults(func=cmd_show)
    p = sub.add_parser("sweep", help="build (and measure) every combination of some knobs; rank them")
    _add_spec_args(p)
    p.add_argument("--grid", action="append", required=True, metavar="KNOB=V1,V2,...",
                   help="a knob and its values (or KNOB=all); repeatable; splits are written 8x2x4x1")
    p.add_argument("--sample", type=int, default=None, help="run this many random points of the grid")
    p.add_argument("--workers", type=_processes, default=None, help="compile processes (default: one per CPU core)")
    p.add_argument("--top", type=int, default=10, help="rows of the ranking to print")
    p.add_argument("--rpc", metavar="HOST:PORT", help="measure on a remote GPU through this TVM RPC tracker")
    p.add_argument("--key", help="the device key at the tracker (with --rpc)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sweep)
    p = sub.add_parser("tune", help="search with TVM's MetaSchedule on the preset's workload")
    _add_spec_args(p)
    p.add_argument("--trials", type=int, required=True, help="trial budget (candidates built and run)")
    p.add_argument("--strategy", default="evolutionary", choices=("evolutionary", "replay-trace"))
    p.add_argument("--work-dir", default=None, help="keep MetaSchedule's records and logs here (resumable)")
    p.add_argument("--workers", type=_processes, default=None, help="build processes (default: one per CPU core)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_tune)
    p = sub.add_parser("measure", help="check a preset's kernel against NumPy, then time it on a GPU")
    _add_spec_args(p)
    p.add_argument("--rpc", metavar="HOST:PORT", help="measure on a remote GPU through this TVM RPC tracker")
    p.add_argument("--key", help="the device key at the tracker (with --rpc)")
    p.add_argument("--baseline", action="store_true", help="also time the workload in PyTorch (local GPU)")
    p.add_argument("--time-limit", type=int, default=10, metavar="S", help="stop a kernel running longer (seconds)")
    p.add_argument("--repeats", type=int, default=20, help="timed repeats (each at least 1 ms of launches)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    p.add_argument("--cold-l2", action="store_true",
                   help="one launch per repeat after writing four times the L2 (the baseline too): inputs from device "
                        "memory")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_measure)
    p = sub.add_parser("export", help="write a standalone TVM + NumPy script of a preset's schedule")
    _add_spec_args(p)
    p.add_argument("-o", "--output", default=None, help="file to write (default PRESET_schedule.py; - for stdout)")
    p.set_defaults(func=cmd_export)
    p = launcher.add_arguments(sub.add_parser("serve", help=launcher.HELP))
    p.set_defaults(func=launcher.command)
    p = launcher.add_worker_arguments(sub.add_parser("worker", help=launcher.WORKER_HELP))
    p.set_defaults(func=launcher.worker)
    p = prepare.add_arguments(sub.add_parser("prepare", help=prepare.HELP))
    p.set_defaults(func=prepare.command)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    try:
        status = args.func(args)
        sys.stdout.flush()  # here, where a closed pipe is caught, not at exit
        return status
    except ExplorerError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:
        # The reader closed the pipe (`python -m explorer presets | head`): what it did not read is not
        # written, and Python's flush of stdout at exit must not fail again (the Python docs' recipe).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_CLOSED_PIPE
