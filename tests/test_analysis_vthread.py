"""vthreads side by side: the same block and threads without vthreads, checked against
hand-worked layouts of the blog's vthread cases (8×8 threads, 32×32 blocks, 96×96)."""
import json
import math

import pytest

from explorer.analysis.vthread import compare_vthreads, format_comparison, without_vthreads
from explorer.cli import main
from explorer.errors import ExplorerError
from explorer.presets import get_preset

CASE2 = get_preset("dw-blog-vthread-case2").spec  # vthread.x = 4
CASE1 = get_preset("dw-blog-vthread-case1").spec  # the same block and threads, no vthreads


@pytest.fixture(scope="module")
def case2():
    return compare_vthreads(CASE2)


def test_depthwise_without_vthreads_is_the_blogs_case_one():
    assert without_vthreads(CASE2) == CASE1
    assert without_vthreads(CASE1) is None


def test_matmul_folds_the_vthreads_into_the_thread_tile():
    spec = get_preset("matmul-tiled-1024").spec.with_knobs(vthread_x=2, thread_n=2, vthread_y=4, thread_m=1)
    plain = without_vthreads(spec).knobs
    assert (plain.vthread_x, plain.thread_n, plain.vthread_y, plain.thread_m) == (1, 4, 1, 4)


def test_matmul_says_when_it_cannot_express_the_setting():
    spec = get_preset("matmul-tiled-1024").spec.with_knobs(block_n=128, vthread_x=2, thread_n=16)
    with pytest.raises(ExplorerError, match="thread_n goes up to 16"):
        without_vthreads(spec)
    comparison = compare_vthreads(spec)
    assert comparison.sides == () and "cannot express" in comparison.missing


def test_conv2d_moves_the_vthread_factor_into_the_inner_factor():
    spec = get_preset("conv2d-autotvm-resnet-last").spec
    assert spec.knobs.tile_f == (64, 2, 4, 1)
    assert without_vthreads(spec).knobs.tile_f == (64, 1, 4, 2)


def test_nothing_to_compare_is_said_not_faked():
    assert "no vthread above 1" in compare_vthreads(CASE1).missing
    assert "no vthread knobs" in compare_vthreads(get_preset("conv1d-naive").spec).missing
    assert format_comparison(compare_vthreads(CASE1)) == compare_vthreads(CASE1).missing


def test_same_launch_and_work_on_both_sides(case2):
    with_v, without_v = case2.sides
    assert with_v.vthreads == {"vthread.x": 4} and without_v.vthreads == {}
    assert with_v.tiling.threads == without_v.tiling.threads == {"threadIdx.y": 8, "threadIdx.x": 8}
    assert with_v.tiling.outputs_per_thread == without_v.tiling.outputs_per_thread == 16
    assert with_v.tiling.outputs_per_block == without_v.tiling.outputs_per_block == 32 * 32


def test_the_vthread_loop_is_scheduled_then_lowered_away(case2):
    with_v, without_v = case2.sides
    assert any("range(4):  # vthread.x" in line for line in with_v.scheduled)
    assert not any("vthread" in line for line in with_v.lowered + without_v.lowered)
    # The accumulation is written once per virtual thread: 4 copies against 1.
    updates = [line for line in with_v.lowered if "DepthwiseConv2d_local[ax0 + 12] = DepthwiseConv2d_local" in line]
    assert len(updates) == 1 and "threadIdx_x + ax2 + 24] * Filter_shared[ax1 * 3 + ax2]" in updates[0]
    assert with_v.stores > without_v.stores


def test_thread_zero_owns_strided_columns_with_vthreads_and_adjacent_ones_without(case2):
    with_v, without_v = case2.sides
    rows = [0, 1, 2, 3]
    assert sorted(map(tuple, with_v.thread_outputs.tolist())) == [(r, c) for r in rows for c in (0, 8, 16, 24)]
    assert sorted(map(tuple, without_v.thread_outputs.tolist())) == [(r, c) for r in rows for c in (0, 1, 2, 3)]
    # threadIdx.x = 1 starts one column further with vthreads, four without.
    assert with_v.neighbour_outputs[:, 1].min() == 1 and without_v.neighbour_outputs[:, 1].min() == 4


def test_one_warps_shared_load_and_its_banks(case2):
    with_v, without_v = case2.sides
    a, b = with_v.shared_load, without_v.shared_load
    assert a.buffer == b.buffer == "PaddedInput_shared"
    # Lane = threadIdx.x + 8 threadIdx.y; a row of the 34-wide padded tile is 4 output rows
    # (136 words) further per threadIdx.y.
    lanes = range(32)
    assert list(a.lanes.address) == [4 * (lane % 8 + 136 * (lane // 8)) for lane in lanes]
    assert list(b.lanes.address) == [4 * (4 * (lane % 8) + 136 * (lane // 8)) for lane in lanes]
    assert sorted(a.lanes.bank) == list(range(32)) and a.lanes.degree == 1
    assert b.lanes.degree == 4 and {b.lanes.bank.count(bank) for bank in set(b.lanes.bank)} == {4}
    assert a.conflicts == 0 and b.conflicts > 0 and (a.max_degree, b.max_degree) == (1, 4)


def test_explanation_states_the_data(case2):
    text = " ".join(case2.explanation)
    assert "vthread.x = 4" in text and "ax3_1 (extent 4)" in text
    assert "columns 0, 8, 16, 24 (8 apart) with vthreads, columns 0, 1, 2, 3 (adjacent) without" in text
    assert "1-way with vthreads; without, words 4 apart and 4-way" in text
    conflicts = case2.sides[1].shared_load.conflicts
    assert f"0 bank conflicts with vthreads, {conflicts:,} without" in text


def test_matmul_thread_tiles_of_two_columns_are_a_half_block_apart():
    # block_n 64, vthread_x 2, thread_n 2: thread 0 owns columns 0-1 and 32-33; without, 0-3.
    spec = get_preset("matmul-tiled-1024").spec.with_knobs(vthread_x=2, thread_n=2)
    text = " ".join(compare_vthreads(spec).explanation)
    assert "columns 0, 1, 32, 33 (2 groups of 2 adjacent, 32 apart) with vthreads, columns 0, 1, 2, 3 (adjacent)" \
        in text
    assert "starts 2 columns further with vthreads and 4 columns without" in text


def test_vthreads_on_another_dimension_say_so():
    text = " ".join(compare_vthreads(get_preset("conv2d-autotvm-resnet-last").spec).explanation)
    assert "vthread.z = 2" in text and "split another output dimension" in text


def test_cli_view_json(capsys):
    assert main(["show", "dw-blog-vthread-case2", "--view", "vthread", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["vthread"]
    with_v, without_v = data["sides"]
    assert (with_v["vthreads"], without_v["vthreads"]) == ({"vthread.x": 4}, {})
    assert (with_v["shared_load"]["degree"], without_v["shared_load"]["degree"]) == (1, 4)
    assert main(["show", "dw-blog-vthread-case1", "--view", "vthread"]) == 0
    assert "nothing to compare" in capsys.readouterr().out


@pytest.mark.gpu
def test_both_sides_are_correct_and_timed_on_the_gpu(case2):
    from explorer.measure import measure

    for side in case2.sides:
        result = measure(side.spec)
        assert result.correct and math.isfinite(result.median_us) and result.median_us > 0


# -- the Explorer's vthread tab ------------------------------------------------------------

MAIN = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "app" / "main.py")


def vthread_tab(preset: str):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(MAIN, default_timeout=60)
    at.query_params["preset"] = preset
    at.session_state["ui.view"] = "vthread"
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    return at


def test_vthread_tab_shows_both_sides(monkeypatch):
    from app import latency

    monkeypatch.setattr(latency, "can_measure", lambda: False)
    at = vthread_tab("dw-blog-vthread-case2")
    sides = ["**With vthreads**", "**Without vthreads**"]
    assert [m.value for m in at.markdown if m.value in sides] == sides  # no heading under the page's title
    assert any("columns 0, 8, 16, 24 (8 apart)" in m.value for m in at.markdown)
    codes = [c.value for c in at.code]
    assert any("# vthread.x" in c and "range(4):  # vthread.x" in c for c in codes)
    assert any("range(1):  # vthread.x" in c for c in codes)
    assert sum("needs a GPU" in c.value for c in at.caption) == 2
    charts = [e for e in at.get("plotly_chart")]
    assert len(charts) == 4  # per side: the block's owners, the warp's banks


def test_vthread_tab_measures_both_sides(monkeypatch):
    from live_fakes import fake_measurements, settle

    fake_measurements(monkeypatch, lambda spec: 100.0 if spec.knobs.num_vthread_x == 4 else 130.0)
    at = settle(vthread_tab("dw-blog-vthread-case2"))
    values = [m.value for m in at.metric if m.label == "Latency (median)"]
    # The Explorer's own latency panel (this setting) and the two sides of the tab.
    assert values[-2:] == ["100.00 µs", "130.00 µs"]


def test_vthread_tab_without_vthreads_offers_nothing_fake():
    at = vthread_tab("dw-blog-vthread-case1")
    assert "nothing to compare" in at.info[0].value
    assert "**With vthreads**" not in [m.value for m in at.markdown] and not at.get("plotly_chart")
