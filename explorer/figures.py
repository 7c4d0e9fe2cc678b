"""Plotly figures of the analyses: plain data in, a ``go.Figure`` out (no streamlit).

Colours come from :mod:`explorer.style` and mean the same on the app's light and dark themes (the
figures set no background: Streamlit's Plotly theme gives each theme its own); hovering a lane
or an element shows its lane, thread ids, address and bank, or its block, vthread, thread and
iteration. Every figure carries a one-sentence text alternative, ``layout.meta["alt"]``, which
the app shows under it (:func:`alt`).
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from .analysis.banks import (
    BANK_BYTES,
    BANKS,
    CORE_MATRIX_ROWS,
    WAVEFRONT_BYTES,
    BankReport,
    LaneMap,
    core_matrix_ways,
)
from .analysis.resources import KernelResources
from .analysis.roofline import Point, Roofline
from .analysis.tiles import CHUNK_BYTES, swizzled
from .analysis.tiling import Tiling
from .analysis.tree import LOOP, TreeReport
from .analysis.written import WrittenTiling
from .style import (
    CATEGORICAL,
    CONFLICT_COLOUR,
    FIGURE_HEIGHT,
    FOOTPRINT_COLOURS,
    INACTIVE_COLOUR,
    LIMITER_COLOURS,
    OK_COLOUR,
    OP_PATTERNS,
    POINT_COLOURS,
    ROOF_COLOURS,
    SCOPE_COLOURS,
    SWEEP_COLORSCALE,
    TREE_COLOURS,
    TRIES_FIGURE_HEIGHT,
    degree_colour,
)
from .targets import WARP_SIZE
from .units import count

if TYPE_CHECKING:
    from .build import Spec


ALT = "alt"  # the key of a figure's text alternative in its layout's meta


def _layout(figure: go.Figure, title: str, alt: str, **extra) -> go.Figure:
    figure.update_layout(title={"text": title}, height=FIGURE_HEIGHT, margin={"l": 50, "r": 20, "t": 60, "b": 40},
                         meta={ALT: alt}, **extra)
    return figure


def alt(figure: go.Figure) -> str:
    """A figure's one-sentence text alternative ("" for one made elsewhere)."""
    meta = figure.layout.meta
    return meta.get(ALT, "") if isinstance(meta, dict) else ""


def integer_axis(high: float, ticks: int = 8) -> dict:
    """An axis of whole numbers from 0 to ``high``: ticks every 1, 2 or 5 × 10^k, at most
    ``ticks`` of them, never between two whole numbers."""
    step = 1
    while high / step > ticks:
        step *= {1: 2, 2: 2.5, 5: 2}[int(str(step)[0])]
        step = int(step)
    return {"tick0": 0, "dtick": step, "tickformat": ",d"}


def _short(value: float) -> str:
    """A power of ten as a tick reads it: 0.01, 1, 100, 10k, 1M."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:g}{unit}"
    return f"{value:g}"


def log_axis(low: float, high: float) -> dict:
    """A log axis from ``low`` to ``high`` labelled at each power of ten only (1, 10, 100, 1k…):
    Plotly's own ticks on a log axis read "5 2 10k 5 2 1000"."""
    first, last = math.floor(math.log10(low)), math.ceil(math.log10(high))
    decades = [10.0 ** k for k in range(first, last + 1)]
    return {"type": "log", "tickvals": decades, "ticktext": [_short(d) for d in decades]}


# -- banks -------------------------------------------------------------------------------


def bank_figure(lanes: LaneMap, title: str = "") -> go.Figure:
    """The 32 banks across, the wavefronts a request needs down: each distinct word is a
    marker in its bank's column, one row per wavefront (a second row = a 2-way conflict, in
    the conflict's colour and named so in the legend). Lanes reading the same word share its
    marker (broadcast)."""
    words: dict[int, list[int]] = {}
    for lane in lanes.lane:
        if lanes.active[lane]:
            words.setdefault(lanes.address[lane] // BANK_BYTES, []).append(lane)
    row_in_bank: dict[int, int] = {}
    rows: dict[bool, list] = {False: [], True: []}  # conflict-free first wavefront, extra wavefronts
    for word in sorted(words):
        bank = word % BANKS
        row = row_in_bank.get(bank, 0)
        row_in_bank[bank] = row + 1
        members = words[word]
        threads = "<br>".join(f"lane {l}: threadIdx ({', '.join(map(str, lanes.thread[l]))}), element "
                              f"{lanes.element[l]}" for l in members[:8])
        more = f"<br>… {len(members) - 8} more lanes" if len(members) > 8 else ""
        rows[row > 0].append((bank, row + 1, ",".join(str(l) for l in members) if len(members) <= 3
                              else f"{members[0]}…({len(members)})",
                              f"bank {bank}, word {word} (byte address {word * BANK_BYTES})<br>{threads}{more}"))
    figure = go.Figure()
    for extra, name, colour, symbol in ((False, "first wavefront", OK_COLOUR, "square"),
                                        (True, "extra wavefront: a bank conflict", CONFLICT_COLOUR, "diamond-wide")):
        if not rows[extra] and extra:
            continue
        xs, ys, text, hover = (list(column) for column in zip(*rows[extra], strict=True)) if rows[extra] else \
            ([], [], [], [])
        figure.add_trace(go.Scatter(
            x=xs, y=ys, mode="markers+text", text=text, textposition="middle center", name=name,
            marker={"size": 26, "color": colour, "symbol": symbol}, textfont={"size": 9, "color": "white"},
            hovertext=hover, hoverinfo="text",
        ))
    inactive = [l for l in lanes.lane if not lanes.active[l]]
    where = ", ".join(f"{k}={v}" for k, v in lanes.iteration.items()) or "every iteration"
    subtitle = (f"warp {lanes.warp}, {where}: {count(lanes.wavefronts, 'wavefront')}, {lanes.degree}-way"
                + (f", {len(inactive)} lanes inactive" if inactive else "")
                + (f"; {lanes.words * BANK_BYTES}-byte accesses, first word shown" if lanes.words > 1 else ""))
    depth = max(row_in_bank.values(), default=1)
    figure.update_xaxes(title="bank", range=[-0.7, BANKS - 0.3], dtick=1, tickfont={"size": 9})
    figure.update_yaxes(title="wavefront", range=[depth + 0.5, 0.5], tick0=1, dtick=1)
    conflict = "no bank conflict" if lanes.degree <= 1 else f"a {lanes.degree}-way bank conflict"
    text = (f"The {len(words)} distinct word(s) that warp {lanes.warp}'s lanes access, each in its bank's column: "
            f"{lanes.wavefronts} wavefront(s), {conflict}"
            + (f", {len(inactive)} lanes inactive." if inactive else "."))
    _layout(figure, f"{title}<br><sup>{subtitle}</sup>" if title else subtitle, text,
            legend={"orientation": "h", "y": -0.35})
    # As tall as its rows: a conflict-free warp is one row of markers, not a mostly empty square.
    figure.update_layout(height=200 + 40 * depth)
    return figure


def lanes_figure(lanes: LaneMap, title: str = "") -> go.Figure:
    """Lane → bank: one marker per lane at its bank; inactive lanes grey crosses."""
    colours = [SCOPE_COLOURS["shared"] if a else INACTIVE_COLOUR for a in lanes.active]
    hover = [f"lane {l}<br>threadIdx ({', '.join(map(str, lanes.thread[l]))})<br>element {lanes.element[l]}, "
             f"byte address {lanes.address[l]}<br>bank {lanes.bank[l]}" + ("" if lanes.active[l] else "<br>inactive")
             for l in lanes.lane]
    figure = go.Figure(go.Scatter(
        x=list(lanes.lane), y=list(lanes.bank), mode="markers+lines", line={"color": INACTIVE_COLOUR, "width": 1},
        marker={"size": 10, "color": colours, "symbol": ["circle" if a else "x" for a in lanes.active]},
        hovertext=hover, hoverinfo="text", showlegend=False,
    ))
    figure.update_xaxes(title="lane", dtick=4, range=[-0.5, 31.5])
    figure.update_yaxes(title="bank", range=[-0.5, BANKS - 0.5], dtick=4)
    active = [l for l in lanes.lane if lanes.active[l]]
    banks = len({lanes.bank[l] for l in active})
    inactive = len(lanes.lane) - len(active)
    text = (f"The bank each lane of warp {lanes.warp} accesses: {len(active)} active lanes over {banks} bank(s)"
            + (f", {inactive} inactive lanes drawn as grey crosses." if inactive else "."))
    return _layout(figure, title or f"lane → bank, warp {lanes.warp}", text)


def conflicts_figure(report: BankReport) -> go.Figure:
    """Wavefronts per request of every shared access (1 = conflict-free for 4-byte accesses),
    coloured by its worst conflict's degree (conflict-free blue) and labelled with it; stores
    hatched."""
    bars = [a for k in report.kernels for a in k.accesses if not a.not_modelled]
    labels = [f"{a.kernel} #{a.number} {a.op} {a.buffer}" if len(report.kernels) > 1
              else f"#{a.number} {a.op} {a.buffer}"
              for a in bars]
    figure = go.Figure(go.Bar(
        y=labels, x=[a.wavefronts_per_request for a in bars], orientation="h",
        marker={"color": [degree_colour(a.max_degree) for a in bars],
                "pattern": {"shape": [OP_PATTERNS[a.op] for a in bars]}},
        text=[f"reuses #{a.duplicate_of}" if a.duplicate_of else
              ("conflict-free" if a.max_degree <= 1 else f"{a.max_degree}-way") for a in bars],
        textposition="outside", cliponaxis=False,
        hovertext=[f"{a.text}<br>{a.max_degree}-way max, {a.mean_degree:.2f} mean<br>{a.requests:,} requests, "
                   f"{a.conflicts:,} conflicts" + (f"<br>reuses #{a.duplicate_of}" if a.duplicate_of else "")
                   for a in bars],
        hoverinfo="text", showlegend=False,
    ))
    figure.update_xaxes(title="wavefronts per request", rangemode="tozero")
    figure.update_yaxes(autorange="reversed")
    conflicted = [a for a in bars if a.max_degree > 1]
    worst = max((a.max_degree for a in bars), default=1)
    text = (f"Wavefronts per request of the {len(bars)} modelled shared-memory access(es), stores hatched: "
            + (f"{len(conflicted)} with bank conflicts, the worst {worst}-way." if conflicted
               else "none has a bank conflict."))
    return _layout(figure, "Shared-memory accesses: wavefronts per request", text)


def swizzle_figure(row_bytes: int) -> go.Figure:
    """Eight rows of a tile ``row_bytes`` wide, each 16-byte chunk coloured by the 4 banks it lands in,
    as laid out without a swizzle (left) and as TMA writes it under the swizzle of that row width (right):
    a column of chunks is one 8 × 16-byte core matrix, conflict-free where its 8 colours differ."""
    chunks = row_bytes // CHUNK_BYTES
    rows = np.arange(CORE_MATRIX_ROWS)[:, None] * row_bytes + np.arange(chunks)[None, :] * CHUNK_BYTES
    figure = make_subplots(rows=1, cols=2, horizontal_spacing=0.08, subplot_titles=(
        f"without a swizzle: {core_matrix_ways(row_bytes, swizzle=False)}-way",
        f"{row_bytes}-byte swizzle: {core_matrix_ways(row_bytes)}-way"))
    for col, address in ((1, rows), (2, swizzled(rows, row_bytes))):
        group = address % WAVEFRONT_BYTES // CHUNK_BYTES  # which 4 banks of the 32: 0 … 7
        text = [[f"{4 * g}–{4 * g + 3}" for g in line] for line in group]
        figure.add_trace(dict(
            type="heatmap", z=group.tolist(), x=[f"chunk {c}" for c in range(chunks)], y=list(range(CORE_MATRIX_ROWS)),
            zmin=-0.5, zmax=7.5, colorscale=_categorical_scale(8), showscale=False, xgap=2, ygap=2, text=text,
            texttemplate="%{text}", hovertemplate="row %{y}, %{x} (bytes of the row's 16-byte chunk)<br>banks "
                                                  "%{text}<extra></extra>"), row=1, col=col)
    figure.update_yaxes(autorange="reversed", title="row of the tile", dtick=1)
    _layout(figure, f"Where a tile's 16-byte chunks land: a column is one core matrix<br><sup>rows "
                    f"{row_bytes} bytes wide; each cell names the 4 banks its chunk uses</sup>",
            f"Eight rows of a tile {row_bytes} bytes wide, each 16-byte chunk labelled with the 4 banks it uses: a "
            f"core matrix (a column) reads {core_matrix_ways(row_bytes, swizzle=False)}-way without a swizzle and "
            f"{core_matrix_ways(row_bytes)}-way with the {row_bytes}-byte swizzle.")
    figure.update_layout(margin={"t": 110})  # the title and the two panels' own
    return figure


# -- reduction tree ----------------------------------------------------------------------


def tree_figure(report: TreeReport) -> go.Figure:
    """A block's threads at each tree step, stacked: those whose sum is used, those of the last
    warp that add a value no one reads, the idle ones; the divergent warps as diamonds on the
    right axis (0: every warp either adds with all its lanes or waits whole)."""
    steps = report.steps
    labels = [f"s={t.s}" if t.stage == LOOP else f"s={t.s} (warp 0)" for t in steps]
    hover = [f"{t.stage}, s = {t.s}: {t.active_threads} threads add ({t.needed_threads} needed), {t.idle_threads} "
             f"idle<br>{t.idle_warps} warps idle, {t.divergent_warps} divergent<br>banks: "
             + ("no shared memory" if t.bank_ways is None else f"{t.bank_ways}-way") + f"<br>then {t.barrier}"
             for t in steps]
    figure = go.Figure()
    for name, values in (("needed", [t.needed_threads for t in steps]),
                         ("extra", [t.active_threads - t.needed_threads for t in steps]),
                         ("idle", [t.idle_threads for t in steps])):
        title = {"needed": "threads adding a sum that is used", "extra": "last-warp lanes adding unused values",
                 "idle": "idle threads"}[name]
        figure.add_trace(go.Bar(x=labels, y=values, name=title, marker={"color": TREE_COLOURS[name]},
                                hovertext=hover, hoverinfo="text"))
    figure.add_trace(go.Scatter(
        x=labels, y=[t.divergent_warps for t in steps], yaxis="y2", mode="markers+text", name="divergent warps",
        text=[str(t.divergent_warps) if t.divergent_warps else "" for t in steps], textposition="top center",
        marker={"color": TREE_COLOURS["divergent"], "symbol": "diamond", "size": 12}, hovertext=hover,
        hoverinfo="text"))
    warps = report.warps
    banks = ["registers" if t.bank_ways is None else f"{t.bank_ways}-way" for t in steps]
    figure.update_xaxes(tickvals=labels, ticktext=[f"{label}<br>{ways}" for label, ways in zip(labels, banks,
                                                                                               strict=True)])
    divergent = max((t.divergent_warps for t in steps), default=0)
    text = (f"Threads of a {report.threads}-thread block that add a used sum, add an unused one or wait, at each "
            f"of the tree's {len(steps)} steps; " + (f"up to {divergent} of its {warps} warps diverge in a step."
                                                   if divergent else f"none of its {warps} warps diverges."))
    return _layout(figure, f"Tree of {report.threads} threads ({warps} warps): {report.addressing} addressing, "
                           f"last warp {report.last_warp}<br><sup>under each step: its shared-memory bank ways</sup>",
                   text, barmode="stack", legend={"orientation": "h", "y": -0.25},
                   yaxis={"title": "threads", "range": [0, report.threads * 1.08], **integer_axis(report.threads)},
                   yaxis2={"title": "divergent warps", "overlaying": "y", "side": "right", "showgrid": False,
                           "range": [0, warps * 1.08], **integer_axis(warps)})


# -- tiling ------------------------------------------------------------------------------

_OWNER_FIELDS = {"block": "block", "vthread": "vthread", "thread": "thread", "iteration": "iteration"}


def _categorical_scale(count: int) -> list:
    """A step colourscale giving ids 0…count-1 (at most the palette's length) the categorical palette."""
    count = max(count, 1)
    scale = []
    for i in range(count):
        colour = CATEGORICAL[i]
        scale += [[i / count, colour], [(i + 1) / count, colour]]
    return scale


def ownership_figure(tiling: Tiling, colour_by: str = "block", block: int | None = None) -> go.Figure:
    """The output plane coloured by the block (or vthread, thread, inner iteration) that
    computes each element; with ``block``, only that block's elements."""
    if colour_by not in _OWNER_FIELDS:
        raise ValueError(f"colour_by must be one of {', '.join(_OWNER_FIELDS)}")
    own = tiling.ownership
    ids = getattr(own, _OWNER_FIELDS[colour_by]).astype(float)
    mask = own.block >= 0 if block is None else own.block == block
    rows, cols = np.nonzero(mask)
    if rows.size:
        r0, r1, c0, c1 = rows.min(), rows.max() + 1, cols.min(), cols.max() + 1
    else:
        r0 = r1 = c0 = c1 = 0
    z = np.where(mask, ids, np.nan)[r0:r1, c0:c1]
    count = int(np.nanmax(z)) + 1 if np.isfinite(z).any() else 1
    y = np.arange(r0, r1) + own.origin[0]
    x = np.arange(c0, c1) + own.origin[1]
    custom = np.stack([getattr(own, f)[r0:r1, c0:c1] for f in
                       ("block", "vthread", "thread_x", "thread_y", "thread_z", "iteration", "owners")], axis=-1)
    wrapped = z.shape[0] == 1 and z.shape[1] > WRAP  # a vector of outputs (a row reduction's): drawn in rows
    if wrapped:
        z, custom = _wrap(z[0], np.nan), _wrap(custom[0], -1)
        y, x = np.arange(z.shape[0]), np.arange(WRAP)
    # The heatmap's value is the id's colour, the palette cycled (id mod its length), and its text the id: a
    # colourscale of two stops per id took plotly seconds to check and copy for thousands of blocks.
    colours = min(count, len(CATEGORICAL))
    cells = [[None if np.isnan(v) else int(v) % colours for v in row] for row in z]  # None: not in the figure
    text = [["" if np.isnan(v) else str(int(v)) for v in row] for row in z] if z.size <= 1024 else None
    # The trace as a dict: plotly validates it once, in the figure (a go.Heatmap is validated on its
    # own and again in the figure).
    figure = go.Figure(dict(
        type="heatmap", z=cells, x=x, y=y, customdata=custom, zmin=-0.5, zmax=colours - 0.5,
        colorscale=_categorical_scale(colours), text=text,
        showscale=False, xgap=1, ygap=1, texttemplate="%{text}" if text is not None else None,
        hovertemplate=("output (%{y}, %{x})<br>block %{customdata[0]}, vthread %{customdata[1]}<br>"
                       "threadIdx (%{customdata[2]}, %{customdata[3]}, %{customdata[4]})<br>"
                       "inner iteration %{customdata[5]}<br>written %{customdata[6]}×<extra></extra>"),
    ))
    if wrapped:
        figure.update_yaxes(autorange="reversed", title=f"element ({WRAP} a row)", scaleanchor="x")
        figure.update_xaxes(title="+ element", **integer_axis(WRAP))
        _label_wrapped_rows(figure, len(y), c0 + own.origin[1])
    else:
        figure.update_yaxes(autorange="reversed", title="row", scaleanchor="x", **integer_axis(max(r1 - r0, 1)))
        figure.update_xaxes(title="column", **integer_axis(max(c1 - c0, 1)))
    where = f"block {block}" if block is not None else own.plane + (" (first blocks)" if own.cropped else "")
    ids = "each cell writes its id" if text is not None else "hover a cell for its ids"
    description = (f"The outputs of {where}, each coloured by the {colour_by} that computes it: {count} "
                   f"{colour_by} id(s); {ids}.")
    return _layout(figure, f"Outputs by {colour_by}: {where}", description)


WRAP = 64  # a single row longer than this is drawn wrapped, this many elements a row


def _wrap(values: np.ndarray, fill) -> np.ndarray:
    """A row of values (or of value tuples) in rows of WRAP, the last padded with ``fill``."""
    rows = -(-len(values) // WRAP)
    out = np.full((rows * WRAP, *values.shape[1:]), fill, dtype=values.dtype)
    out[:len(values)] = values
    return out.reshape(rows, WRAP, *values.shape[1:])


def _label_wrapped_rows(figure: go.Figure, rows: int, first: int) -> None:
    """Name a wrapped figure's rows by the element each starts at (every eighth row)."""
    ticks = list(range(0, rows, 8))
    figure.update_yaxes(tickvals=ticks, ticktext=[f"{first + WRAP * r:,}" for r in ticks])


def footprint_figure(tiling: Tiling, buffer: int = 0) -> go.Figure:
    """The input elements (last two dimensions) the chosen block reads, and among them
    those the chosen thread reads: the tile plus its halo."""
    f = tiling.footprints[buffer]
    cells = f.block_cells
    if not len(cells):
        return _layout(go.Figure(), f"{f.buffer}: nothing read", f"Block {tiling.chosen_block} reads nothing of "
                                                                f"{f.buffer}.")
    r0, c0 = cells.min(axis=0)
    r1, c1 = cells.max(axis=0) + 1
    z = np.zeros((r1 - r0, c1 - c0))
    z[cells[:, 0] - r0, cells[:, 1] - c0] = 1
    if len(f.thread_cells):
        z[f.thread_cells[:, 0] - r0, f.thread_cells[:, 1] - c0] = 2
    x, y = np.arange(c0, c1), np.arange(r0, r1)
    wrapped = z.shape[0] == 1 and z.shape[1] > WRAP  # one row of a row-wise reduction: drawn in rows
    if wrapped:
        z, y, x = _wrap(z[0], 0.0), np.arange(-(-z.shape[1] // WRAP)), np.arange(WRAP)
    labels = np.array(["not read", "read by the block", "read by the thread"])[z.astype(int)]
    scale = [[0, FOOTPRINT_COLOURS[0]], [0.33, FOOTPRINT_COLOURS[0]], [0.33, FOOTPRINT_COLOURS[1]],
             [0.67, FOOTPRINT_COLOURS[1]], [0.67, FOOTPRINT_COLOURS[2]], [1, FOOTPRINT_COLOURS[2]]]
    where = f"{f.buffer}[…, {r0}, row %{{y}} + %{{x}}]" if wrapped else f"{f.buffer}[…, %{{y}}, %{{x}}]"
    figure = go.Figure(go.Heatmap(
        z=z, x=x, y=y, zmin=0, zmax=2, colorscale=scale, showscale=False, customdata=labels, xgap=1, ygap=1,
        hovertemplate=f"{where}<br>%{{customdata}}<extra></extra>",
    ))
    if wrapped:
        figure.update_yaxes(autorange="reversed", title=f"column ({WRAP} a row)", scaleanchor="x")
        figure.update_xaxes(title="+ column", **integer_axis(WRAP))
        _label_wrapped_rows(figure, len(y), c0)
    else:
        figure.update_yaxes(autorange="reversed", title="row", scaleanchor="x", **integer_axis(max(r1 - r0, 1)))
        figure.update_xaxes(title="column", **integer_axis(max(c1 - c0, 1)))
    t = tiling.chosen_thread
    description = (f"The elements of {f.buffer} that block {tiling.chosen_block} reads ({f.block_elements}, in "
                   f"orange) and among them those thread ({t[0]}, {t[1]}, {t[2]}) reads ({f.thread_elements}, "
                   "in blue).")
    return _layout(figure, f"{f.buffer}: block {tiling.chosen_block} reads {f.block_elements}, thread "
                           f"({t[0]}, {t[1]}, {t[2]}) reads {f.thread_elements}<br><sup>{f.loads_per_block} loads per "
                           f"block = {f.loads_per_output:.2f} per output</sup>", description)


# -- the tiling of a written kernel ------------------------------------------------------------


def walk_figure(t: WrittenTiling) -> go.Figure:
    """FlashAttention's figure, from the kernel: query tiles of one head down, key and value tiles across,
    each cell the step of its block's loop that computes it (blank: never, above the causal diagonal)."""
    z = np.where(t.walk >= 0, t.walk, np.nan)
    owners = [f"block {b}" if b >= 0 else "block not evaluated" for b in t.tile_owner]
    rows = [f"rows {q * t.block_q:,}–{(q + 1) * t.block_q - 1:,}" for q in range(t.walk.shape[0])]
    custom = np.array([[[owners[q], rows[q], f"keys {k * t.block_kv:,}–{(k + 1) * t.block_kv - 1:,}"]
                        for k in range(t.walk.shape[1])] for q in range(t.walk.shape[0])])
    figure = go.Figure(dict(
        type="heatmap", z=[[None if np.isnan(v) else int(v) for v in row] for row in z], customdata=custom,
        colorscale=SWEEP_COLORSCALE, xgap=1, ygap=1, colorbar={"title": "step"},
        hovertemplate="query %{customdata[1]} (%{customdata[0]})<br>%{customdata[2]}: step %{z}<extra></extra>"))
    chosen = np.flatnonzero(t.tile_owner == t.chosen_block)
    for q in chosen:
        figure.add_shape(type="rect", x0=-0.5, x1=t.walk.shape[1] - 0.5, y0=q - 0.5, y1=q + 0.5,
                         line={"color": CONFLICT_COLOUR, "width": 2})
    figure.update_yaxes(autorange="reversed", title=f"query tile ({t.block_q} rows)")
    figure.update_xaxes(title=f"key and value tile ({t.block_kv} keys)")
    steps = int(np.nanmax(z)) + 1 if np.isfinite(z).any() else 0
    return _layout(figure, f"The key and value tiles each block of query rows walks<br><sup>block {t.chosen_block} "
                           f"outlined; a cell is the step of its block's loop over key tiles</sup>",
                   f"{t.walk.shape[0]} query tiles of {t.block_q} rows down and {t.walk.shape[1]} key and value tiles "
                   f"of {t.block_kv} keys across; each cell is coloured by the step of its block's loop that computes "
                   f"it ({steps} steps at most; a blank cell is never computed); block {t.chosen_block}'s rows are "
                   "outlined.")


def written_owners_figure(t: WrittenTiling, colour_by: str = "warp") -> go.Figure:
    """The chosen block's part of the plane (its outputs, or the sum's elements it reads), each element
    coloured by the warp or the thread that writes (or reads) it."""
    ids = t.warp if colour_by == "warp" else t.thread
    r0, c0 = (int(t.rows.min()), int(t.cols.min())) if t.rows.size else (0, 0)
    shape = (int(t.rows.max()) - r0 + 1, int(t.cols.max()) - c0 + 1) if t.rows.size else (0, 0)
    z = np.full(shape, np.nan)
    thread = np.full(shape, -1)
    z[t.rows - r0, t.cols - c0] = ids
    thread[t.rows - r0, t.cols - c0] = t.thread
    colours = min(int(np.nanmax(z)) + 1 if np.isfinite(z).any() else 1, len(CATEGORICAL))
    cells = [[None if np.isnan(v) else int(v) % colours for v in row] for row in z]
    figure = go.Figure(dict(
        type="heatmap", z=cells, x=np.arange(c0, c0 + shape[1]), y=np.arange(r0, r0 + shape[0]),
        customdata=np.stack([thread, thread // WARP_SIZE], axis=-1), zmin=-0.5, zmax=colours - 0.5,
        colorscale=_categorical_scale(colours), showscale=False, xgap=0, ygap=0,
        hovertemplate=("row %{y}, column %{x}<br>thread %{customdata[0]}, warp %{customdata[1]}<extra></extra>")))
    figure.update_yaxes(autorange="reversed", title="row" if t.family != "sum" else "run of the block's elements")
    figure.update_xaxes(title="column" if t.family != "sum" else "element of the run")
    what = "reads" if t.family == "sum" else "writes"
    return _layout(figure, f"Block {t.chosen_block}: who {what} each element of {t.buffer}, by {colour_by}",
                   f"The {len(t.rows):,} elements of {t.buffer} that block {t.chosen_block} {what}, each coloured by "
                   f"the {colour_by} that {what} it; hover a cell for its thread and warp.")


def cells_figure(t: WrittenTiling) -> go.Figure:
    """C in tiles of block_m × block_n: the block that computes each (blank: not among the blocks evaluated)."""
    owner = t.cell_owner
    figure = go.Figure(dict(
        type="heatmap", z=[[None if v < 0 else int(v) % len(CATEGORICAL) for v in row] for row in owner],
        text=[["" if v < 0 else str(int(v)) for v in row] for row in owner] if owner.size <= 1024 else None,
        texttemplate="%{text}" if owner.size <= 1024 else None, zmin=-0.5, zmax=len(CATEGORICAL) - 0.5,
        colorscale=_categorical_scale(len(CATEGORICAL)), showscale=False, xgap=1, ygap=1,
        customdata=owner, hovertemplate="tile (%{y}, %{x})<br>block %{customdata}<extra></extra>"))
    figure.update_yaxes(autorange="reversed", title=f"tile row ({t.cell[0]} rows of C)")
    figure.update_xaxes(title=f"tile column ({t.cell[1]} columns)")
    return _layout(figure, f"{t.plane}: the block that computes each tile",
                   f"{t.plane} in tiles of {t.cell[0]} × {t.cell[1]}, each coloured by the block that computes it "
                   f"({owner.shape[0]} × {owner.shape[1]} tiles; a blank tile is not among the blocks evaluated).")


# -- resources ---------------------------------------------------------------------------


def occupancy_figure(kernel: KernelResources) -> go.Figure:
    """Blocks per SM each resource allows; the lowest one limits occupancy."""
    occ = kernel.occupancy
    names = list(occ.limits)
    values = [occ.limits[n] if occ.limits[n] is not None else 0 for n in names]
    colours = [LIMITER_COLOURS[n] if n == occ.limiter else INACTIVE_COLOUR for n in names]
    text = [str(occ.limits[n]) if occ.limits[n] is not None else "not compiled" for n in names]
    figure = go.Figure(go.Bar(x=names, y=values, marker={"color": colours}, text=text, textposition="outside",
                              hovertemplate="%{x}: %{text} blocks per SM<extra></extra>", showlegend=False))
    figure.update_yaxes(title="blocks per SM allowed", rangemode="tozero", **integer_axis(max(values, default=1)))
    limits = ", ".join(f"{n} {t}" for n, t in zip(names, text, strict=True))
    blocks = count(occ.blocks_per_sm, "block")
    return _layout(figure, f"{kernel.kernel}: {blocks}/SM, {occ.occupancy:.0%} occupancy, "
                           f"limited by {occ.limiter}",
                   f"Blocks per SM each resource allows for {kernel.kernel} ({limits}): {occ.limiter} limits it to "
                   f"{blocks} per SM, {occ.occupancy:.0%} occupancy.")


# -- roofline ----------------------------------------------------------------------------


def roofline_figure(r: Roofline) -> go.Figure:
    """Log-log roofline: GFLOP/s against FLOP per compulsory byte. The compute roof, each
    bandwidth roof up to where it meets it, the workload's intensity (dotted), the current
    setting (a star; grey when it is a static estimate) and this session's tries; dotted, the tensor
    cores' peak where the kernel multiplies 16-bit inputs on the CUDA cores instead."""
    c = r.ceilings
    peak, compute = r.compute_roof  # FP32, or the tensor cores' for a kernel that multiplies there
    roofs = {"HBM": c.hbm_gbps, **({"L2-resident": c.l2_gbps} if c.l2_gbps is not None else {})}
    intensities = [r.intensity, *(p.intensity for p in r.tries)]
    low = min(min(intensities) / 4, 0.1)
    high = max(max(intensities) * 4, max(r.ridge(b) for b in roofs.values()) * 4)
    figure = go.Figure()
    for name, bandwidth in roofs.items():
        ridge = r.ridge(bandwidth)
        figure.add_trace(go.Scatter(
            x=[low, ridge, high], y=[low * bandwidth, peak, peak], mode="lines",
            name=f"{name} {bandwidth:,.0f} GB/s", line={"color": ROOF_COLOURS[name], "width": 3},
            hovertemplate=f"{name} roof: %{{y:,.0f}} GFLOP/s at %{{x:.2f}} FLOP/B<extra></extra>"))
    figure.add_trace(go.Scatter(
        x=[low, high], y=[peak] * 2, mode="lines", name=f"{compute} peak {peak:,.0f} GFLOP/s",
        line={"color": ROOF_COLOURS["compute"], "dash": "dash"}, hoverinfo="skip"))
    if r.unused_tensor_roof is not None:
        tensor, name = r.unused_tensor_roof
        figure.add_trace(go.Scatter(
            x=[low, high], y=[tensor] * 2, mode="lines", name=f"{name} peak {tensor:,.0f} GFLOP/s (not used here)",
            line={"color": ROOF_COLOURS["compute"], "dash": "dot"}, hoverinfo="skip"))
    figure.add_vline(x=r.intensity, line={"color": INACTIVE_COLOUR, "dash": "dot"})
    if r.tries:
        figure.add_trace(_points(r.tries, "this session's tries", POINT_COLOURS["tries"], "circle", 9))
    current = r.current
    figure.add_trace(_points((current,), f"{current.label} ({current.kind})", POINT_COLOURS[current.kind],
                             "star", 16))
    kind = "measured" if current.kind == "measured" else "placed on the roof, not measured"
    bandwidth = f"{' and '.join(roofs)} bandwidth roof" + ("s" if len(roofs) > 1 else "")
    description = (f"{r.workload} at {r.intensity:.2f} FLOP per byte under the {compute} roof of {peak:,.0f} GFLOP/s "
                   f"and the {bandwidth}; this setting ({kind}) at {current.gflops:,.0f} GFLOP/s, "
                   f"{current.percent_of_attainable:.0f}% of what its intensity allows.")
    lowest = min(low * min(roofs.values()), *(p.gflops for p in (current, *r.tries)))
    return _layout(figure, f"{r.workload} — {c.source}", description,
                   xaxis={**log_axis(low, high), "title": "FLOP per compulsory byte"},
                   yaxis={**log_axis(lowest, peak * 1.5), "title": "GFLOP/s"}, legend={"orientation": "h", "y": -0.2})


def _points(points: tuple[Point, ...], name: str, colour: str, symbol: str, size: int) -> go.Scatter:
    return go.Scatter(
        x=[p.intensity for p in points], y=[p.gflops for p in points], mode="markers", name=name,
        marker={"color": colour, "symbol": symbol, "size": size, "line": {"width": 1, "color": INACTIVE_COLOUR}},
        hovertext=[f"{p.label}: {p.latency_us:.2f} µs, {p.percent_of_attainable:.0f}% of attainable" for p in points],
        hovertemplate="%{hovertext}<br>%{y:,.0f} GFLOP/s<extra></extra>")


# -- a session's tries ---------------------------------------------------------------------


def tries_figure(tries: Sequence[tuple[Spec, float | None]]) -> go.Figure:
    """A session's tries in order, (setting, latency in µs or None when not measured): the
    measured ones as a line; hover lists the knobs of each."""
    measured = [(i, spec, us) for i, (spec, us) in enumerate(tries, start=1) if us is not None]
    hover = ["<br>".join(f"{name} = {value}" for name, value in spec.knobs.to_strings().items())
             for _, spec, _ in measured]
    figure = go.Figure(go.Scatter(
        x=[i for i, _, _ in measured], y=[us for _, _, us in measured], mode="lines+markers",
        hovertext=hover, hovertemplate="try %{x}: %{y:.2f} µs<br>%{hovertext}<extra></extra>",
    ))
    figure.update_layout(xaxis_title="try", yaxis_title="latency (µs)", height=TRIES_FIGURE_HEIGHT,
                         margin={"l": 10, "r": 10, "t": 10, "b": 10})
    figure.update_xaxes(**integer_axis(len(tries)))
    times = [us for _, _, us in measured]
    description = (f"Latency of this session's {len(measured)} measured tries of {len(tries)}, in order"
                   + (f": from {times[0]:.2f} µs to {times[-1]:.2f} µs, the best {min(times):.2f} µs." if times
                      else "."))
    figure.update_layout(meta={ALT: description})
    return figure
