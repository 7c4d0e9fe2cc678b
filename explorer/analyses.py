"""The analyses of a build, one entry each, in the order of the Explorer's tabs.

An entry names its analysis (``python -m explorer show --view NAME``, and the key of its panel
in ``app/panels.py``), its tab's title, how it reads a build, its text for the terminal, its
figure and its JSON form, and the templates it describes. The command line's views and the
Explorer's tabs iterate :data:`ANALYSES`: a template gets a tab for each analysis that applies to
it, and the command line says in a sentence why one does not; an entry without a panel of its own
is shown by the app's default panel (its figure, then its text). A new analysis is its module in
``explorer/analysis/`` and one entry here.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import plotly.graph_objects as go

from . import figures, measure
from .analysis import ncu, vthread
from .analysis.banks import analyze_banks, format_report
from .analysis.races import analyze_races, format_races
from .analysis.resources import analyze_resources, format_resources
from .analysis.roofline import compute_types, format_roofline, published_ceilings, roofline
from .analysis.sass import analyze_sass, compile_binary, format_sass
from .analysis.tiling import analyze_tiling, format_tiling
from .analysis.tree import analyze_tree, format_tree, tree_not_applicable
from .analysis.written import WrittenTiling, analyze_written, format_written, is_written
from .build import Build, Spec, build
from .errors import ExplorerError
from .schedules.common import Template
from .targets import resolve_target


def plain_data(result: Any) -> Any:
    """A result's JSON form: its ``to_dict()`` where it has one, else the result as it is."""
    to_dict = getattr(result, "to_dict", None)
    return to_dict() if to_dict is not None else result


@dataclass(frozen=True)
class Analysis:
    """One analysis of a build. ``analyze`` may raise an ExplorerError (its one sentence is what
    the tab and the command line show) or return None where it does not apply (``text`` says so)."""

    name: str  # python -m explorer show --view NAME; the key of its panel in the app
    title: str  # the Explorer's tab
    analyze: Callable[[Build], Any]  # the result, plain data
    text: Callable[[Any, Build], str]  # the result for the terminal (the build for what it quotes, e.g. CUDA lines)
    figure: Callable[[Any], go.Figure] | None = None  # the result drawn, where one figure says it
    data: Callable[[Any], Any] = plain_data  # the result for --json
    # The command line's own view (spec, parsed arguments) -> (text, JSON-able), where it reads more
    # than the build: a measurement on this machine's GPU, Nsight Compute's counters.
    command_line: Callable[[Spec, Any], tuple[str, dict]] | None = None
    # Why the analysis does not describe a template's kernels (a sentence), or None where it does (the
    # default: every template). The app shows no tab for it; the command line says the sentence.
    not_applicable: Callable[[Template], str | None] = lambda template: None

    def applies(self, template: Template) -> bool:
        return self.not_applicable(template) is None

    def view(self, spec: Spec, args) -> tuple[str, dict]:
        """``python -m explorer show --view NAME``: the text and the JSON of ``spec`` built for ``args.target``."""
        if reason := self.not_applicable(spec.template_def):
            raise ExplorerError(reason)
        if self.command_line is not None:
            return self.command_line(spec, args)
        built = build(spec, args.target)
        result = self.analyze(built)
        return self.text(result, built), {self.name: self.data(result)}


def measured_here(spec: Spec):
    """The setting measured on this machine's GPU (its ceilings included), or None without one."""
    if not measure.local_gpu():
        return None
    measure.ceilings()  # once per process; the measurement below carries them
    return measure.measure(spec)


def _banks_view(spec: Spec, args) -> tuple[str, dict]:
    """The race check, then the bank model; with --ncu, beside the same kernels measured by Nsight Compute
    on this machine's GPU."""
    built = build(spec, args.target)
    report, races = analyze_banks(built), analyze_races(built)
    text = f"{format_races(races, assumptions=False)}\n\n{format_report(report)}\n{format_races(races, races=False)}"
    data = {"banks": report.to_dict(), "races": races.to_dict()}
    if args.ncu:
        rows = ncu.compare(report, ncu.profile(spec))
        text += "\n\nNsight Compute (this GPU):\n" + ncu.format_comparison(rows)
        data["ncu"] = [vars(r) for r in rows]
    return text, data


def _static_roofline(built: Build):
    """The workload under the target's published roofs, placed on the roof (not measured)."""
    return roofline(built.spec.workload, published_ceilings(str(built.target.arch)), types=compute_types(built.spec))


def _roofline_view(spec: Spec, args) -> tuple[str, dict]:
    """On this machine's GPU: the measured setting under the measured roofs; else the published ones."""
    measured = measured_here(spec) if args.target in (None, "", "auto") else None
    if measured is not None and measured.correct and measured.ceilings is not None:
        r = roofline(spec.workload, measured.ceilings, measured.median_us, types=compute_types(spec))
    else:
        r = roofline(spec.workload, published_ceilings(str(resolve_target(args.target).arch)),
                     types=compute_types(spec))
    return format_roofline(r), {"roofline": r.to_dict()}


def tiling_of(built: Build, block: int = 0, thread: tuple[int, int, int] = (0, 0, 0)):
    """The tiling of a build: its compute stage's (a scheduled template), or what each block and thread of
    a kernel written out owns, read from its loads and stores (explorer/analysis/written.py)."""
    if is_written(built.spec.template_def):
        return analyze_written(built, block)
    return analyze_tiling(built, block, thread)


def _tiling_text(tiling, _built) -> str:
    return format_written(tiling) if isinstance(tiling, WrittenTiling) else format_tiling(tiling)


def _tiling_figure(tiling) -> go.Figure:
    if isinstance(tiling, WrittenTiling):
        return figures.written_owners_figure(tiling)
    return figures.ownership_figure(tiling, "block")


def _counters_data(counters: dict) -> dict:
    return {kernel: None if rows is None else [vars(r) for r in rows] for kernel, rows in counters.items()}


ANALYSES: dict[str, Analysis] = {a.name: a for a in (
    Analysis("sass", "SASS", analyze_sass, format_sass),
    Analysis("tiling", "Tiling", tiling_of, _tiling_text, _tiling_figure),
    Analysis("banks", "Bank conflicts", analyze_banks, lambda report, _: format_report(report),
             figures.conflicts_figure, command_line=_banks_view),
    Analysis("tree", "Reduction tree", lambda built: analyze_tree(built.spec), lambda report, _: format_tree(report),
             figures.tree_figure, not_applicable=tree_not_applicable),
    Analysis("resources", "Resources", lambda built: analyze_resources(built, compile_binary(built)),
             lambda report, _: format_resources(report)),
    Analysis("vthread", "vthread", lambda built: vthread.compare_vthreads(built.spec, built.target),
             lambda comparison, _: vthread.format_comparison(comparison), not_applicable=vthread.not_applicable),
    Analysis("roofline", "Roofline", _static_roofline, lambda r, _: format_roofline(r), figures.roofline_figure,
             command_line=_roofline_view),
    Analysis("counters", "Counters", ncu.counters, lambda counters, _: ncu.format_counters(counters),
             data=_counters_data),
)}
