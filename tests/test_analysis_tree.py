"""The reduction tree step by step (explorer.analysis.tree): counts worked out by hand for a block
of 256 threads (8 warps), the bank ways checked against the bank model's reading of the built
kernel, the figure, the CLI view and the app's tab."""
import json

import numpy as np
import pytest

from explorer import figures, style
from explorer.analysis import tree
from explorer.analysis.banks import analyze_banks, lane_map
from explorer.build import Spec, build
from explorer.cli import main
from explorer.errors import InvalidKnobs
from explorer.presets import get_preset
from explorer.schedules.reduce_tree import ReduceTreeKnobs
from explorer.workloads import Sum


def tree_of(**knobs) -> tree.TreeReport:
    base = dict(addressing="sequential", threads=256, last_warp="tree")
    return tree.tree_of(ReduceTreeKnobs(**{**base, **knobs}))


def by_s(report: tree.TreeReport) -> dict[int, tree.TreeStep]:
    return {t.s: t for t in report.steps}


def test_interleaved_divergent_spreads_the_working_threads_over_every_warp():
    report = tree_of(addressing="interleaved_divergent")
    steps = by_s(report)
    assert [t.s for t in report.steps] == [1, 2, 4, 8, 16, 32, 64, 128]
    first = steps[1]  # the even threads: 16 lanes of each warp
    assert (first.active_threads, first.idle_threads, first.idle_warps, first.divergent_warps) == (128, 128, 0, 8)
    active, _ = tree.loop_step("interleaved_divergent", 256, 64)
    assert np.flatnonzero(active).tolist() == [0, 128]  # in warps 0 and 4
    s64 = steps[64]
    assert (s64.active_threads, s64.divergent_warps, s64.idle_warps) == (2, 2, 6)
    assert (steps[16].divergent_warps, steps[32].divergent_warps, steps[32].idle_warps) == (8, 4, 4)
    # tid and tid + s of even lanes: distinct words in distinct banks
    assert {t.bank_ways for t in report.steps} == {1}
    assert {t.barrier for t in report.steps} == {"__syncthreads()"}


def test_interleaved_strided_idles_whole_warps_but_conflicts():
    report = tree_of(addressing="interleaved_strided")
    steps = by_s(report)
    active, (read, partner, write) = tree.loop_step("interleaved_strided", 256, 1)
    assert active.reshape(8, 32)[:4].all() and not active.reshape(8, 32)[4:].any()  # warps 0–3 work whole
    assert read[:3].tolist() == [0, 2, 4] and partner[:3].tolist() == [1, 3, 5] and (write == read).all()
    first = steps[1]
    assert (first.active_threads, first.idle_warps, first.divergent_warps) == (128, 4, 0)
    # lane l reads word 2·s·l: lanes 0 and 16 share bank 0 at s = 1 (2-way), four lanes at s = 2, eight at s = 4;
    # from s = 8 fewer lanes work (16 at s = 8, 8 at s = 16, …), all on banks 0 and 16, then bank 0 alone
    assert [steps[s].bank_ways for s in (1, 2, 4, 8, 16, 32, 64, 128)] == [2, 4, 8, 8, 8, 4, 2, 1]
    assert report.worst_bank_ways == 8
    assert (steps[2].idle_warps, steps[4].idle_warps, steps[8].divergent_warps) == (6, 7, 1)


def test_sequential_never_conflicts_and_diverges_only_below_32():
    report = tree_of()
    assert [t.s for t in report.steps] == [128, 64, 32, 16, 8, 4, 2, 1]
    assert {t.bank_ways for t in report.steps} == {1}
    assert [t.divergent_warps for t in report.steps] == [0, 0, 0, 1, 1, 1, 1, 1]
    assert [t.idle_warps for t in report.steps] == [4, 6, 7, 7, 7, 7, 7, 7]
    assert [t.active_threads for t in report.steps] == [128, 64, 32, 16, 8, 4, 2, 1]


def test_the_unrolled_last_warp_adds_with_all_32_lanes_between_warp_barriers():
    report = tree_of(last_warp="unrolled")
    assert [(t.s, t.stage) for t in report.steps[:2]] == [(128, tree.LOOP), (64, tree.LOOP)]
    warp = report.steps[2:]
    assert [t.s for t in warp] == [32, 16, 8, 4, 2, 1]
    assert {(t.stage, t.barrier, t.active_threads, t.idle_warps, t.divergent_warps, t.bank_ways) for t in warp} == {
        (tree.UNROLLED, "__syncwarp()", 32, 7, 0, 1)}
    assert [t.needed_threads for t in warp] == [32, 16, 8, 4, 2, 1]


def test_shuffle_steps_touch_no_shared_memory():
    report = tree_of(last_warp="shuffle")
    warp = report.steps[2:]
    assert [(t.s, t.bank_ways) for t in warp] == [(32, 1), (16, None), (8, None), (4, None), (2, None), (1, None)]
    assert {t.barrier for t in warp} == {"none"} and {t.divergent_warps for t in warp} == {0}
    assert [t.s for t in tree_of(threads=64, last_warp="shuffle").steps] == [32, 16, 8, 4, 2, 1]  # no loop step


def test_bank_ways_of_a_hand_made_access():
    active = np.ones(64, bool)
    assert tree.bank_ways((np.arange(64) * 32,), active) == 32  # every lane on bank 0
    assert tree.bank_ways((np.zeros(64, int),), active) == 1  # one word: broadcast
    assert tree.bank_ways((), active) is None
    assert tree.warp_states(np.arange(96) < 40) == (1, 1)  # warp 0 whole, warp 1 split, warp 2 idle


def test_other_templates_are_not_applicable_and_refused_knobs_are_refused():
    rfactor = get_preset("reduce-rfactor").spec
    assert tree.analyze_tree(rfactor) is None
    assert tree.format_tree(None) == tree.NOT_APPLICABLE and tree.NOT_APPLICABLE.count(". ") == 0
    spec = get_preset("reduce-shuffle").spec
    with pytest.raises(InvalidKnobs):
        tree.analyze_tree(spec.with_knobs(addressing="interleaved_strided"))


LOOPED = ("reduce-1-interleaved-divergent", "reduce-2-interleaved-strided", "reduce-3-sequential")


@pytest.mark.parametrize("preset", LOOPED)
def test_each_step_agrees_with_the_bank_model_of_the_built_kernel(preset):
    """The loop's first tree load (#2 in the kernel) evaluated by the bank model for each value of i:
    its worst warp is the step's bank ways, and its requests are the warps that work."""
    spec = get_preset(preset).spec
    built = build(spec, "h100")
    report = tree.analyze_tree(spec)
    kernel = analyze_banks(built).kernels[0]
    load = kernel.accesses[1]
    assert load.op == "load" and "threadIdx_x" in load.text
    for i, step in enumerate(report.steps):
        lanes = [lane_map(built, kernel.kernel, load.number, warp, {"i": i}) for warp in range(8)]
        assert lanes[0].iteration == {"i": i}  # the guard or the index follows the tree's loop
        assert max(lane.degree for lane in lanes) == step.bank_ways, (preset, step.s)
    blocks = kernel.grid[0]
    assert load.requests == blocks * sum(report.warps - t.idle_warps for t in report.steps)


@pytest.mark.parametrize("preset", [*LOOPED, "reduce-5-unroll-last-warp", "reduce-shuffle"])
def test_the_worst_step_is_the_bank_models_worst_access(preset):
    spec = get_preset(preset).spec
    for kernel in analyze_banks(build(spec, "h100")).kernels:
        assert max(a.max_degree for a in kernel.accesses) == tree.analyze_tree(spec).worst_bank_ways


def test_a_bigger_strided_tree_reaches_32_way_in_the_built_kernel_too():
    spec = Spec("reduce_tree", Sum(n=1 << 16), ReduceTreeKnobs(addressing="interleaved_strided", threads=1024,
                                                               elements_per_thread=2, last_warp="tree"))
    report = tree.analyze_tree(spec)
    assert by_s(report)[16].bank_ways == 32 and report.worst_bank_ways == 32
    assert max(a.max_degree for a in analyze_banks(build(spec, "h100")).kernels[0].accesses) == 32


def test_tree_figure_stacks_threads_and_marks_divergent_warps():
    report = tree_of(addressing="interleaved_divergent")
    needed, extra, idle, divergent = figures.tree_figure(report).data
    assert list(needed.y) == [t.active_threads for t in report.steps] and set(extra.y) == {0}
    assert [a + b for a, b in zip(needed.y, idle.y, strict=True)] == [256] * 8
    assert list(divergent.y) == [8, 8, 8, 8, 8, 4, 2, 1] and divergent.marker.color == style.TREE_COLOURS["divergent"]
    figure = figures.tree_figure(report)
    assert figure.layout.yaxis.dtick == 50 and figure.layout.yaxis2.dtick == 1  # whole threads, whole warps
    assert figures.alt(figure) == ("Threads of a 256-thread block that add a used sum, add an unused one or wait, at "
                                   "each of the tree's 8 steps; up to 8 of its 8 warps diverge in a step.")
    strided = figures.tree_figure(tree_of(addressing="interleaved_strided"))
    assert list(strided.layout.xaxis.ticktext)[:3] == ["s=1<br>2-way", "s=2<br>4-way", "s=4<br>8-way"]
    shuffle = figures.tree_figure(tree_of(last_warp="shuffle")).data
    assert list(shuffle[0].x)[2:] == [f"s={s} (warp 0)" for s in (32, 16, 8, 4, 2, 1)]
    assert list(shuffle[1].y) == [0, 0, 0, 16, 24, 28, 30, 31]  # lanes adding values no one reads
    assert "no shared memory" in shuffle[0].hovertext[3]


def test_cli_tree_view(capsys):
    assert main(["show", "reduce-2-interleaved-strided", "--view", "tree"]) == 0
    out = capsys.readouterr().out
    assert "interleaved_strided addressing" in out and "8-way" in out
    assert main(["show", "reduce-shuffle", "--view", "tree", "--json"]) == 0
    steps = json.loads(capsys.readouterr().out)["tree"]["steps"]
    assert [s["bank_ways"] for s in steps][-5:] == [None] * 5
    assert main(["show", "reduce-rfactor", "--view", "tree"]) == 2  # no tree written out: the view says why
    assert capsys.readouterr().err.strip() == f"error: {tree.NOT_APPLICABLE}"
    assert main(["show", "reduce-shuffle", "--view", "tree", "--set", "addressing=interleaved_divergent"]) == 2


def test_the_tab_shows_the_tree_of_kernel_1():
    from test_app import app, assert_clean

    at = app({"preset": "reduce-1-interleaved-divergent"}, view="Reduction tree").run()
    assert_clean(at)
    (table,) = [d.value for d in at.dataframe if "step size s" in d.value]
    assert table["step size s"].tolist() == [1, 2, 4, 8, 16, 32, 64, 128]
    assert table["divergent warps"].tolist() == [8, 8, 8, 8, 8, 4, 2, 1]
    assert table["active threads"].tolist()[-2:] == [2, 1]
    assert any("8 steps" in m.value for m in at.markdown)
    at = app({"preset": "reduce-rfactor"}, view="Reduction tree").run()  # a template with no tree: no such tab
    assert_clean(at)
    assert "Reduction tree" not in [t.label for t in at.tabs] and at.session_state["ui.view"] == "Scheduled TensorIR"
