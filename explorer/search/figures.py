"""Plotly figures for sweeps and tuning: plain data in, a figure out (no streamlit)."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ..style import SWEEP_COLORSCALE
from .results import SweepResult


def heatmap_figure(result: SweepResult, x: str, y: str) -> go.Figure:
    """Best value over the other swept knobs for each (x, y) pair; hover names the point
    behind each cell. Empty cells had no valid combination."""
    h = result.heatmap(x, y)
    others = [name for name in result.grid.knob_names if name not in (x, y)]
    hover = []
    for i, y_value in enumerate(h.y_values):
        row = []
        for j, x_value in enumerate(h.x_values):
            lines = [f"{x} = {x_value}, {y} = {y_value}"]
            if h.z[i][j] is None:
                lines.append(f"no valid combination ({h.total[i][j]} tried)")
            else:
                lines.append(f"{h.value}: {h.z[i][j]:.3g}")
                lines.append(f"{h.valid[i][j]} of {h.total[i][j]} valid")
                best = h.best[i][j]
                lines += [f"{name} = {best.field(name).format(getattr(best, name))}" for name in others]
            row.append("<br>".join(lines))
        hover.append(row)
    figure = go.Figure(
        go.Heatmap(
            z=[list(row) for row in h.z],
            x=list(h.x_values),
            y=list(h.y_values),
            text=hover,
            hoverinfo="text",
            texttemplate="%{z:.3g}",
            colorscale=SWEEP_COLORSCALE,
            reversescale=True,  # lower is better: the best cells are the bright ones
            colorbar={"title": {"text": h.value}},
            hoverongaps=False,
        )
    )
    figure.update_xaxes(title_text=x, type="category")
    figure.update_yaxes(title_text=y, type="category")
    figure.update_layout(title=result.ranking, margin={"t": 60})
    return figure


def tuning_figure(history_us: Sequence[float | None], budget: int) -> go.Figure:
    """Best latency so far after each batch of MetaSchedule candidates."""
    batches = list(range(1, len(history_us) + 1))
    figure = go.Figure(go.Scatter(x=batches, y=list(history_us), mode="lines+markers", line_shape="hv",
                                  hovertemplate="batch %{x}: best %{y:.2f} µs<extra></extra>"))
    figure.update_xaxes(title_text=f"batch of candidates (budget {budget} trials)")
    figure.update_yaxes(title_text="best latency so far (µs)", rangemode="tozero")
    return figure
