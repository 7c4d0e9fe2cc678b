"""Plotly figures for sweeps and tuning: plain data in, a figure out (no streamlit)."""
from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from ..figures import ALT, integer_axis
from ..style import SWEEP_COLORSCALE
from .results import SweepResult


def heatmap_figure(result: SweepResult, x: str, y: str) -> go.Figure:
    """Best value over the other swept knobs for each (x, y) pair; hover names the point
    behind each cell. A cell with no valid combination is left empty and reads "none valid"."""
    h = result.heatmap(x, y)
    others = [name for name in result.grid.knob_names if name not in (x, y)]
    hover, text = [], []
    for i, y_value in enumerate(h.y_values):
        row, labels = [], []
        for j, x_value in enumerate(h.x_values):
            lines = [f"{x} = {x_value}, {y} = {y_value}"]
            if h.z[i][j] is None:
                lines.append(f"no valid combination ({h.total[i][j]} tried)")
                labels.append("none valid")
            else:
                lines.append(f"{h.value}: {h.z[i][j]:.3g}")
                lines.append(f"{h.valid[i][j]} of {h.total[i][j]} valid")
                best = h.best[i][j]
                lines += [f"{name} = {best.field(name).format(getattr(best, name))}" for name in others]
                labels.append(f"{h.z[i][j]:.3g}")
            row.append("<br>".join(lines))
        hover.append(row)
        text.append(labels)
    figure = go.Figure(
        go.Heatmap(
            z=[list(row) for row in h.z],
            x=list(h.x_values),
            y=list(h.y_values),
            text=text,
            hovertext=hover,
            hoverinfo="text",
            texttemplate="%{text}",
            colorscale=SWEEP_COLORSCALE,
            reversescale=True,  # lower is better: the best cells are the bright ones
            colorbar={"title": {"text": h.value}},
            hoverongaps=False,
        )
    )
    figure.update_xaxes(title_text=x, type="category")
    figure.update_yaxes(title_text=y, type="category")
    # The ranking's sentence is the page's, above the figure: the title only says what the cells are.
    figure.update_layout(title=f"Best {h.value} for each {x} and {y}", margin={"t": 60})
    cells = [(h.z[i][j], h.x_values[j], h.y_values[i]) for i in range(len(h.y_values))
             for j in range(len(h.x_values)) if h.z[i][j] is not None]
    count = len(h.x_values) * len(h.y_values)
    if cells:
        value, bx, by = min(cells)
        description = (f"The best {h.value} over the other swept knobs for each pair of {x} and {y}: {len(cells)} of "
                       f"{count} pairs have a valid setting, the best ({value:.3g}) at {x} = {bx}, {y} = {by}.")
    else:
        description = f"No pair of {x} and {y} has a valid setting among the {count} swept."
    figure.update_layout(meta={ALT: description})
    return figure


def tuning_figure(history_us: Sequence[float | None], budget: int) -> go.Figure:
    """Best latency so far after each batch of MetaSchedule candidates."""
    batches = list(range(1, len(history_us) + 1))
    figure = go.Figure(go.Scatter(x=batches, y=list(history_us), mode="lines+markers", line_shape="hv",
                                  hovertemplate="batch %{x}: best %{y:.2f} µs<extra></extra>"))
    figure.update_xaxes(title_text=f"batch of candidates (budget {budget} trials)", **integer_axis(len(batches)))
    figure.update_yaxes(title_text="best latency so far (µs)", rangemode="tozero")
    timed = [us for us in history_us if us is not None]
    description = (f"MetaSchedule's best latency after each of its {len(batches)} batches of candidates"
                   + (f": {timed[-1]:.2f} µs at the end." if timed else ": none timed."))
    figure.update_layout(meta={ALT: description})
    return figure
