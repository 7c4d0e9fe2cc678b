"""Figures: built from hand-made data (pure functions), hover text and colours."""
import numpy as np

from explorer import figures, style
from explorer.analysis.banks import LaneMap, analyze_banks
from explorer.analysis.resources import KernelResources, occupancy
from explorer.analysis.tiling import analyze_tiling
from explorer.build import build
from explorer.gpus import GPUS
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
    first, extra = figures.bank_figure(lanes(2)).data
    assert len(first.x) + len(extra.x) == 32  # 32 distinct words
    assert set(first.y) == {1} and list(extra.y) == [2] * 16  # 16 words wait for a second wavefront
    # The conflict in its colour, its own marker and its name in the legend, not in colour alone.
    assert first.marker.color == style.OK_COLOUR and extra.marker.color == style.CONFLICT_COLOUR
    assert first.marker.symbol != extra.marker.symbol and "conflict" in extra.name
    hover = first.hovertext[0]
    assert "lane 0" in hover and "threadIdx (0, 0, 0)" in hover and "bank 0" in hover and "byte address 0" in hover


def test_a_conflict_free_warp_is_one_row_of_markers_not_a_square():
    figure = figures.bank_figure(lanes(1))
    (trace,) = figure.data
    assert len(trace.x) == 32 and set(trace.y) == {1} and trace.marker.color == style.OK_COLOUR
    assert list(figure.layout.yaxis.range) == [1.5, 0.5]  # the one row, no empty row 0
    assert figure.layout.height < figures.bank_figure(lanes(4)).layout.height < style.FIGURE_HEIGHT + 100
    assert figures.alt(figure).endswith("no bank conflict.")


def test_bank_figure_broadcast_is_one_marker():
    trace = figures.bank_figure(lanes(0)).data[0]
    assert list(trace.x) == [0] and list(trace.y) == [1]
    assert "32" in trace.text[0]


def test_lanes_figure_greys_inactive_lanes():
    figure = figures.lanes_figure(lanes(1, [True] * 16 + [False] * 16))
    trace = figure.data[0]
    assert trace.marker.color[0] == style.SCOPE_COLOURS["shared"] and trace.marker.color[31] == style.INACTIVE_COLOUR
    assert trace.marker.symbol[0] == "circle" and trace.marker.symbol[31] == "x"  # not by colour alone
    assert "inactive" in trace.hovertext[31] and "bank 31" in trace.hovertext[31]
    assert figures.alt(figure) == ("The bank each lane of warp 0 accesses: 16 active lanes over 16 bank(s), "
                                   "16 inactive lanes drawn as grey crosses.")


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


def test_conflicts_figure_colours_each_access_by_its_conflict_not_its_operation():
    """dw-blog-final-96: its two stores and one load are conflict-free, two loads 2-way, one load reuses
    another's value (the analysis's own degrees, read from the table of the Bank conflicts tab)."""
    report = analyze_banks(build(get_preset("dw-blog-final-96").spec))
    figure = figures.conflicts_figure(report)
    bars = figure.data[0]
    accesses = report.kernels[0].accesses
    assert len(bars.y) == len(accesses)
    by_label = dict(zip(bars.y, zip(bars.marker.color, bars.marker.pattern.shape, bars.text, strict=True),
                        strict=True))
    assert by_label["#1 store PaddedInput_shared"] == (style.OK_COLOUR, "/", "conflict-free")  # not red
    assert by_label["#3 load PaddedInput_shared"] == (style.ORANGE, "", "2-way")
    assert by_label["#6 load Filter_shared"][2] == "reuses #4"
    assert style.CONFLICT_COLOUR not in bars.marker.color
    assert figures.alt(figure) == ("Wavefronts per request of the 6 modelled shared-memory access(es), stores "
                                   "hatched: 2 with bank conflicts, the worst 2-way.")


def test_degree_colours_go_from_conflict_free_to_the_worst():
    assert [style.degree_colour(d) for d in (1, 1.5, 2, 3, 4, 8, 32)] == [
        style.BLUE, style.ORANGE, style.ORANGE, style.VERMILLION, style.VERMILLION, style.WINE, style.WINE]


def test_every_colour_of_meaning_reads_on_both_themes():
    """At least 3:1 (WCAG 2's contrast for the parts of a graphic) against Streamlit's light and dark
    backgrounds."""
    for colour in (*style.MEANING_COLOURS, style.INACTIVE_COLOUR):
        assert all(style.contrast(colour, background) >= 3 for background in style.THEME_BACKGROUNDS), colour


def test_contrast_is_wcags():
    assert style.contrast("#000000", "#ffffff") == 21 and style.contrast("#777777", "#777777") == 1
    assert round(style.contrast("#767676", "#ffffff"), 2) == 4.54  # the lightest grey at AA on white
    assert style.readable("#767676", ["#ffffff"]) == "#767676"
    darker = style.readable("#999999", ["#ffffff"])
    assert style.contrast(darker, "#ffffff") >= 4.5 and darker < "#999999"


def test_integer_axes_tick_only_whole_numbers():
    assert figures.integer_axis(3) == {"tick0": 0, "dtick": 1, "tickformat": ",d"}
    assert [figures.integer_axis(high)["dtick"] for high in (8, 9, 16, 40, 256, 1024)] == [1, 2, 2, 5, 50, 200]


def test_log_axes_label_powers_of_ten_only():
    axis = figures.log_axis(0.05, 20_000)
    assert axis["type"] == "log" and axis["tickvals"] == [0.01, 0.1, 1, 10, 100, 1000, 10_000, 100_000]
    assert axis["ticktext"] == ["0.01", "0.1", "1", "10", "100", "1k", "10k", "100k"]


def test_occupancy_figure_highlights_the_limiter():
    kernel = KernelResources("k", (1, 1, 1), (256, 1, 1), 256, 4096, 48, 0,
                             occupancy(GPUS["sm_90"].limits, 256, 4096, 48))
    bars = figures.occupancy_figure(kernel).data[0]
    colour = dict(zip(bars.x, bars.marker.color, strict=False))
    assert colour["registers"] == style.LIMITER_COLOURS["registers"]
    assert colour["threads"] == style.INACTIVE_COLOUR
