"""Figures: built from hand-made data (pure functions), hover text and colours."""
import numpy as np

from explorer import figures, style
from explorer.analysis.banks import LaneMap, analyze_banks
from explorer.analysis.resources import KernelResources, occupancy
from explorer.analysis.tiling import analyze_tiling
from explorer.build import build
from explorer.gpus import ARCHITECTURES
from explorer.presets import get_preset


def lanes(stride, active=None):
    active = active or [True] * 32
    return LaneMap(
        warp=0, iteration={"i": 0}, lane=tuple(range(32)), thread=tuple((l, 0, 0) for l in range(32)),
        active=tuple(active), element=tuple(stride * l for l in range(32)),
        address=tuple(4 * stride * l for l in range(32)), bank=tuple(stride * l % 32 for l in range(32)),
        words=1, wavefronts=max(1, stride if stride <= 32 else 32) if stride else 1, degree=stride or 1,
    )


def test_bank_figure_puts_conflicting_words_on_a_second_wavefront():
    trace = figures.bank_figure(lanes(2)).data[0]
    assert len(trace.x) == 32  # 32 distinct words
    assert sorted(set(trace.y)) == [1, 2] and list(trace.y).count(2) == 16
    second = [c for c, y in zip(trace.marker.color, trace.y, strict=False) if y == 2]
    assert set(second) == {style.CONFLICT_COLOUR}
    hover = trace.hovertext[0]
    assert "lane 0" in hover and "threadIdx (0, 0, 0)" in hover and "bank 0" in hover and "byte address 0" in hover


def test_bank_figure_broadcast_is_one_marker():
    trace = figures.bank_figure(lanes(0)).data[0]
    assert list(trace.x) == [0] and list(trace.y) == [1]
    assert "32" in trace.text[0]


def test_lanes_figure_greys_inactive_lanes():
    trace = figures.lanes_figure(lanes(1, [True] * 16 + [False] * 16)).data[0]
    assert trace.marker.color[0] == style.SCOPE_COLOURS["shared"] and trace.marker.color[31] == style.INACTIVE_COLOUR
    assert "inactive" in trace.hovertext[31] and "bank 31" in trace.hovertext[31]


def test_ownership_and_footprint_figures_follow_the_tiling():
    tiling = analyze_tiling(build(get_preset("dw-blog-final-96").spec))
    heat = figures.ownership_figure(tiling, "thread", block=4).data[0]
    z = np.array(heat.z, dtype=float)
    assert np.isfinite(z).sum() == tiling.outputs_per_block
    assert "threadIdx" in heat.hovertemplate and "vthread" in heat.hovertemplate
    full = figures.ownership_figure(tiling).data[0]
    assert np.array(full.z, dtype=float).shape == (96, 96)
    foot = figures.footprint_figure(tiling).data[0]
    cells = np.array(foot.z)
    assert (cells == 2).sum() == tiling.footprints[0].thread_elements
    assert (cells >= 1).sum() == tiling.footprints[0].block_elements


def test_ownership_figure_cycles_the_palette_and_writes_each_id():
    """Thread ids of one block of dw-blog-final-96 (8 × 16 threads, more than the palette's colours): each
    cell takes the palette's colour of its id, cycled, and shows the id itself."""
    tiling = analyze_tiling(build(get_preset("dw-blog-final-96").spec))
    heat = figures.ownership_figure(tiling, "thread", block=4).data[0]
    own = tiling.ownership
    rows, cols = np.nonzero(own.block == 4)
    threads = own.thread[rows.min():rows.max() + 1, cols.min():cols.max() + 1]
    assert threads.max() + 1 == 8 * 16 > len(style.CATEGORICAL)
    stops = [(float(at), colour) for at, colour in heat.colorscale]

    def colour(value):  # where a value falls between zmin and zmax on the step colourscale
        at = (value - heat.zmin) / (heat.zmax - heat.zmin)
        return next(c for (start, c), (end, _) in zip(stops[::2], stops[1::2], strict=True) if start <= at <= end)

    assert [[colour(v) for v in row] for row in heat.z] == \
        [[style.CATEGORICAL[t % len(style.CATEGORICAL)] for t in row] for row in threads]
    assert heat.texttemplate == "%{text}" and [list(row) for row in heat.text] == threads.astype(str).tolist()


def test_conflicts_figure_has_a_bar_per_access():
    report = analyze_banks(build(get_preset("dw-blog-final-96").spec))
    bars = figures.conflicts_figure(report).data[0]
    assert len(bars.y) == len(report.kernels[0].accesses)
    assert style.OP_COLOURS["store"] in bars.marker.color


def test_occupancy_figure_highlights_the_limiter():
    kernel = KernelResources("k", (1, 1, 1), (256, 1, 1), 256, 4096, 48, 0,
                             occupancy(ARCHITECTURES["sm_90"].limits, 256, 4096, 48))
    bars = figures.occupancy_figure(kernel).data[0]
    colour = dict(zip(bars.x, bars.marker.color, strict=False))
    assert colour["registers"] == style.LIMITER_COLOURS["registers"]
    assert colour["threads"] == style.INACTIVE_COLOUR
