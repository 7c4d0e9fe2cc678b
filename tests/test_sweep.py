"""The sweep engine on the CPU: grid validation, invalid-combination reasons, parallel
compilation in worker processes, ranking (stand-in measurer; static scorer), heatmap data."""
import os
import sys

import cloudpickle
import pytest
import tvm

import explorer.search.sweep as sweep_module
from explorer.analysis.ranking import StaticScore
from explorer.build import Spec, build
from explorer.errors import ExplorerError, InvalidKnobs
from explorer.schedules.depthwise_blog import DepthwiseBlogKnobs
from explorer.search.grid import Grid
from explorer.search.results import FAILED, INVALID, VALID, Point
from explorer.search.sweep import compile_pool, refine, run
from explorer.workloads import DepthwiseConv2d

# The stand-in scorer runs in the worker processes, which cannot import this test module.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

SMALL = Spec("depthwise_blog", DepthwiseConv2d(channels=8, height=16, width=16),
             DepthwiseBlogKnobs(blocking_h=16, blocking_w=16))
GRID = ["num_thread_x=4,8,16", "num_thread_y=1,4,8", "num_vthread_x=1,2"]


def threads_scorer(built):
    """Stand-in static scorer: prefers more threads; records which process scored."""
    (kernel,) = built.kernels
    return StaticScore(1.0 / kernel.threads_per_block, (("pid", os.getpid()),), "stand-in: 1 / threads per block")


def stand_in_latency(spec):
    """Stand-in measurer (µs): a made-up function of the knobs, so the ranking is known."""
    k = spec.knobs
    if k.num_thread_x == 4 and k.num_thread_y == 1:
        raise ExplorerError("The kernel's output does not match NumPy (stand-in failure).")
    return 10.0 + abs(k.num_thread_x - 8) + abs(k.num_thread_y - 4) + (0.5 if k.num_vthread_x == 2 else 0.0)


@pytest.fixture(scope="module")
def pool():
    """Two compile workers shared by this module's sweeps (each worker imports TVM once)."""
    workers = compile_pool(workers=2)
    yield workers
    workers.shutdown()


@pytest.fixture
def sweeps_share_the_pool(pool, monkeypatch):
    """The sweeps that the CLI and the page start use this module's workers (each new worker imports
    TVM: a second of CPU) and leave them running for the next test."""

    class Shared:
        submit = pool.submit

        def shutdown(self, wait=True):
            pass

    monkeypatch.setattr(sweep_module, "compile_pool", lambda *args, **kwargs: Shared())


@pytest.fixture(scope="module")
def measured(pool):
    seen = []
    result = run(Grid.parse(SMALL, GRID), target="h100", measurer=stand_in_latency, pool=pool, on_progress=seen.append)
    return result, seen


@pytest.fixture(scope="module")
def scored(pool):
    return run(Grid.parse(SMALL, GRID), target="h100", scorer=threads_scorer, pool=pool)


# -- grid ---------------------------------------------------------------------------


def test_grid_parses_values_in_order_and_counts_points():
    grid = Grid.parse(SMALL, GRID)
    assert grid.axes == (("num_thread_x", (4, 8, 16)), ("num_thread_y", (1, 4, 8)), ("num_vthread_x", (1, 2)))
    assert grid.size == 18
    assert grid.knobs_at(0) == SMALL.knobs.replace(num_thread_x=4, num_thread_y=1, num_vthread_x=1)
    assert grid.knobs_at(17) == SMALL.knobs.replace(num_thread_x=16, num_thread_y=8, num_vthread_x=2)
    assert grid.knobs_at(1) == SMALL.knobs.replace(num_thread_x=4, num_thread_y=1, num_vthread_x=2)  # last axis fastest


def test_all_expands_to_the_knobs_allowed_values():
    grid = Grid.parse(SMALL, ["input_cache=all", "unroll=all"])
    assert grid.axes == (("input_cache", ("shared", "local", "none")), ("unroll", (False, True)))


def test_split_knob_values_are_written_with_x():
    from explorer.schedules.conv2d import Conv2dAutoTVMKnobs
    from explorer.workloads import Conv2d

    base = Spec("conv2d_autotvm", Conv2d(), Conv2dAutoTVMKnobs())
    grid = Grid.parse(base, ["tile_f=64x2x4x1,32x2x8x1"])
    assert grid.axes == (("tile_f", ((64, 2, 4, 1), (32, 2, 8, 1))),)
    assert grid.to_strings() == ["tile_f=64x2x4x1,32x2x8x1"]
    with pytest.raises(InvalidKnobs, match="8x2x4x1"):
        Grid.parse(base, ["tile_f=64,2,4,1"])


@pytest.mark.parametrize(
    "items, message",
    [
        (["num_thread_x=3"], "not allowed"),
        (["no_such_knob=1"], "has no knob 'no_such_knob'"),
        (["num_thread_x"], "knob=v1,v2"),
        (["num_thread_x="], "knob=v1,v2"),
        (["num_thread_x=8", "num_thread_x=16"], "appears twice"),
        ([], "at least one knob"),
    ],
)
def test_bad_grids_are_rejected_with_one_sentence(items, message):
    with pytest.raises(InvalidKnobs, match=message):
        Grid.parse(SMALL, items)


def test_duplicate_values_collapse():
    assert Grid.parse(SMALL, ["num_thread_x=8,8,16"]).axes == (("num_thread_x", (8, 16)),)


def test_too_large_a_grid_must_be_sampled():
    from explorer.schedules.conv2d import Conv2dAutoTVMKnobs
    from explorer.workloads import Conv2d

    grid = Grid.parse(Spec("conv2d_autotvm", Conv2d(), Conv2dAutoTVMKnobs()),
                      ["tile_f=all", "tile_rc=all", "tile_y=all"])
    assert grid.size == 220 * 55 * 4  # ordered factorizations of 2^9 into 4 and 3 parts, of 7 into 4
    with pytest.raises(InvalidKnobs, match="sample"):
        grid.indices()
    sample = grid.indices(sample=100, seed=1)
    assert len(sample) == len(set(sample)) == 100
    assert sample == grid.indices(sample=100, seed=1) != grid.indices(sample=100, seed=2)


def test_round_trip_through_strings():
    grid = Grid.parse(SMALL, GRID)
    assert Grid.parse(SMALL, grid.to_strings()) == grid


# -- running ------------------------------------------------------------------------


def test_invalid_combinations_are_skipped_with_their_reason(measured):
    result, _ = measured
    invalid = [p for p in result.points if p.status == INVALID]
    # 16 columns per block: num_vthread_x * num_thread_x must not exceed 16 -> (16, vthread 2) is out.
    assert {(p.knobs.num_thread_x, p.knobs.num_vthread_x) for p in invalid} == {(16, 2)}
    assert len(invalid) == 3
    assert all("num_vthread_x × num_thread_x = 32" in p.reason for p in invalid)
    assert all(set(p.fault) == {"blocking_w", "num_vthread_x", "num_thread_x"} for p in invalid)
    status, count, example = result.skipped_reasons()[0]
    assert (status, count) == (INVALID, 3) and "some threads would have no output" in example


def test_a_failed_measurement_is_kept_with_its_reason(measured):
    result, _ = measured
    failed = [p for p in result.points if p.status == FAILED]
    assert {(p.knobs.num_thread_x, p.knobs.num_thread_y) for p in failed} == {(4, 1)}
    assert all("stand-in failure" in p.reason and p.latency_us is None for p in failed)
    assert (FAILED, 2, failed[0].reason) in result.skipped_reasons()


def test_ranking_follows_the_measurer(measured):
    result, _ = measured
    assert result.measured and "measured latency" in result.ranking
    latencies = [p.latency_us for p in result.ranked()]
    assert latencies == sorted(latencies) and len(latencies) == 18 - 3 - 2
    assert result.best.knobs == SMALL.knobs.replace(num_thread_x=8, num_thread_y=4, num_vthread_x=1)
    assert result.best.latency_us == 10.0
    assert result.best_spec() == Spec(SMALL.template, SMALL.workload, result.best.knobs)


def test_progress_is_reported_once_per_point(measured):
    result, seen = measured
    assert [p.done for p in seen] == list(range(1, 19))
    assert seen[-1].fraction == 1.0 and seen[-1].valid == 13 and seen[-1].skipped == 5
    assert seen[-1].best == result.best


def test_points_compile_in_parallel_worker_processes(scored):
    pids = {dict(p.static.metrics)["pid"] for p in scored.points if p.status == VALID}
    assert len(pids) == 2 and os.getpid() not in pids


def test_worker_builds_match_in_process_builds(scored):
    point = next(p for p in scored.points if p.status == VALID)
    assert point.kernels == build(Spec(SMALL.template, SMALL.workload, point.knobs), "h100").kernels


def test_without_a_measurer_the_ranking_is_static_and_says_so(scored):
    assert not scored.measured
    assert scored.ranking.startswith("No GPU: ranked by the static analyses") and "stand-in" in scored.ranking
    costs = [p.static.cost for p in scored.ranked()]
    assert costs == sorted(costs)
    assert scored.best.kernels[0].threads_per_block == 16 * 8  # the most threads any valid point has


def test_table_lists_ranked_rows_then_skipped_ones(measured):
    result, _ = measured
    rows = result.table()
    assert [r["rank"] for r in rows[:13]] == list(range(1, 14))
    expected = {"num_thread_x": "8", "num_thread_y": "4", "num_vthread_x": "1", "latency_us": 10.0, "status": VALID}
    assert {k: rows[0][k] for k in expected} == expected
    assert rows[0]["threads"] == 32
    assert all(r["rank"] is None and r["reason"] for r in rows[13:])


def test_heatmap_takes_the_best_over_the_other_knobs(measured):
    result, _ = measured
    h = result.heatmap("num_thread_x", "num_thread_y")
    assert h.x_values == ("4", "8", "16") and h.y_values == ("1", "4", "8")
    # latency = 10 + |tx - 8| + |ty - 4| (+0.5 for vthread 2): the minimum takes vthread 1.
    assert h.z == ((None, 13.0, 21.0), (14.0, 10.0, 18.0), (18.0, 14.0, 22.0))
    assert h.valid == ((0, 2, 1), (2, 2, 1), (2, 2, 1)) and h.total == ((2, 2, 2),) * 3
    assert h.best[1][1] == result.best.knobs
    with pytest.raises(InvalidKnobs, match="not one of the swept knobs"):
        result.heatmap("num_thread_x", "unroll")


def test_previous_points_are_reused_not_rebuilt(pool):
    grid = Grid.parse(SMALL, ["num_thread_x=4,8"])
    done = grid.knobs_at(0)
    previous = {done: Point(done, VALID, latency_us=1.0)}
    fresh = []
    result = run(grid, target="h100", measurer=stand_in_latency, pool=pool, previous=previous, on_point=fresh.append)
    assert [p.knobs for p in fresh] == [grid.knobs_at(1)]
    assert result.best.knobs == done and result.points[0] is previous[done]


def test_a_sweep_without_gpu_needs_a_scorer():
    with pytest.raises(ExplorerError, match="static scorer"):
        run(Grid.parse(SMALL, ["num_thread_x=4"]), target="h100")


def test_refine_walks_one_knob_at_a_time_to_the_best_neighbour(pool):
    calls = []

    def measurer(spec):
        calls.append(spec.knobs)
        return stand_in_latency(spec)

    result = refine(SMALL, ["num_thread_x", "num_thread_y", "num_vthread_x"], target="h100", measurer=measurer,
                    pool=pool)
    # From (tx 16, ty 8, vx 2), invalid on 16 columns: tx -> 8 (14.5 µs), ty -> 4 (10.5), vx -> 1 (10.0);
    # the second round changes nothing and stops.
    assert result.best.knobs == SMALL.knobs.replace(num_thread_x=8, num_thread_y=4, num_vthread_x=1)
    assert result.best.latency_us == 10.0
    assert len(calls) == len(set(calls))  # no point measured twice
    tried = {p.knobs for p in result.points}
    assert len(tried) == len(result.points) and SMALL.knobs.replace(num_thread_x=64) in tried


def test_points_survive_a_json_round_trip(measured):
    import json

    result, _ = measured
    for point in result.points:
        assert Point.from_json(DepthwiseBlogKnobs, json.loads(json.dumps(point.to_json()))) == point


def test_a_point_keeps_its_kernels_cluster_through_json():
    import json

    from explorer.build import Kernel

    point = Point(DepthwiseBlogKnobs(), VALID, kernels=(Kernel("k", (8, 1, 1), (128, 1, 1), 0, (2, 1, 1)),))
    assert Point.from_json(DepthwiseBlogKnobs, json.loads(json.dumps(point.to_json()))) == point


def test_static_analyses_rank_the_blogs_conflict_free_threads_first(pool):
    """The blog's claim on [1,256,32,32] (here 8 channels), blocking 32×32: threads (y=1,
    x=32) read shared memory without bank conflicts, (y=32, x=1) with; the same loads per
    output and warps, so the static ranking puts (1, 32) first by the conflict factor."""
    from explorer.analysis.ranking import static_score

    base = Spec("depthwise_blog", DepthwiseConv2d(channels=8, height=32, width=32),
                DepthwiseBlogKnobs(num_vthread_x=1))
    result = run(Grid.parse(base, ["num_thread_y=1,32", "num_thread_x=1,32"]), target="h100", scorer=static_score,
                 pool=pool)
    by_threads = {(p.knobs.num_thread_y, p.knobs.num_thread_x): p for p in result.points}
    row, column = by_threads[1, 32].static, by_threads[32, 1].static
    assert dict(row.metrics)["conflict_factor"] == 1.0 < dict(column.metrics)["conflict_factor"]
    assert dict(row.metrics)["loads_per_output"] == dict(column.metrics)["loads_per_output"]
    assert column.cost / row.cost == pytest.approx(dict(column.metrics)["conflict_factor"], rel=1e-3)
    ranked = [(p.knobs.num_thread_y, p.knobs.num_thread_x) for p in result.ranked()]
    assert ranked.index((1, 32)) < ranked.index((32, 1))
    assert "rough model" in result.ranking


def test_cli_sweep_prints_json_and_rejects_a_bad_grid(capsys, sweeps_share_the_pool):
    import json

    from explorer.cli import main

    assert main(["sweep", "dw-blog-channel-21", "--grid", "num_thread_x=4,8", "--grid", "num_thread_y=4,32",
                 "--workers", "1", "--target", "h100", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["preset"] == "dw-blog-channel-21" and out["points"] == 4
    assert out["grid"] == ["num_thread_x=4,8", "num_thread_y=4,32"]
    assert out["valid"] == 2 and out["skipped"][0]["count"] == 2  # 32 rows of threads > 21 rows
    assert main(["sweep", "dw-blog-channel-21", "--grid", "num_thread_x=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "not allowed" in err[0]


def test_sweep_page_runs_ranks_statically_and_applies_the_best(sweeps_share_the_pool):
    from pathlib import Path

    from streamlit.testing.v1 import AppTest

    if tvm.cuda(0).exist:
        pytest.skip("with a GPU the page measures; this test covers the static ranking")
    main = str(Path(__file__).resolve().parent.parent / "app" / "main.py")
    at = AppTest.from_file(main, default_timeout=120)
    at.query_params["preset"] = "dw-blog-channel-21"
    at.run()
    at.switch_page("views/sweep.py").run()
    assert not at.exception and at.title[0].value == "Sweep"
    at.multiselect(key="sweep.knobs.depthwise_blog").set_value(["num_thread_x", "num_thread_y"]).run()
    at.multiselect(key="sweep.values.depthwise_blog.num_thread_x").set_value([4, 8]).run()
    at.multiselect(key="sweep.values.depthwise_blog.num_thread_y").set_value([4, 8, 32]).run()
    run_button = next(b for b in at.button if b.label.startswith("Run sweep"))
    assert run_button.label == "Run sweep · 6 points"
    run_button.click().run()
    assert not at.exception, [e.value for e in at.exception]
    result = at.session_state["sweep.result"]
    assert len(result.points) == 6 and len(result.ranked()) == 4  # 32 rows of threads > 21
    assert any("No GPU: ranked by the static analyses" in w.value for w in at.warning)
    assert any(c.value.startswith("Best: ") for c in at.caption)
    assert len(at.get("plotly_chart")) == 1  # the heatmap over the two swept knobs
    best = result.best_spec()
    next(b for b in at.button if b.label == "Apply best").click().run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.session_state["spec"] == best
    assert at.title[0].value == best.template_def.title  # back on the Explorer page


def test_processes_reaching_one_new_source_at_once_compile_it_once(tmp_path):
    """A class server's compile and diagnosing processes often reach a new setting together:
    one compiles it, the others wait for its binary on disk."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    from explorer.cuda_compile import CUBINS, cached_cuda_compile

    calls = []
    together = threading.Barrier(3)
    before = dict(CUBINS)

    def slow_compile(code):
        calls.append(code)
        time.sleep(0.2)  # the others arrive meanwhile
        return f"binary of {code}".encode()

    compile_cached = cached_cuda_compile(slow_compile, str(tmp_path))

    def compile_at_once(_):
        with tvm.target.Target("nvidia/nvidia-h100"):
            together.wait()
            return compile_cached("kernel A")

    with ThreadPoolExecutor(3) as threads:
        assert list(threads.map(compile_at_once, range(3))) == [b"binary of kernel A"] * 3
    assert calls == ["kernel A"]
    # The compile log counts one binary compiled and two waited for (neither found it on the disk first).
    assert {kind: CUBINS[kind] - before.get(kind, 0) for kind in ("compiled", "waited", "read")} == \
        {"compiled": 1, "waited": 2, "read": 0}


def test_cuda_binaries_are_compiled_once_per_source_and_architecture(tmp_path, monkeypatch):
    """The measuring worker rebuilds what a sweep worker compiled: the disk cache makes its
    CUDA compile free (a GPU machine calls the callback during code generation)."""
    from explorer.cuda_compile import CUBINS, cached_cuda_compile

    calls = []
    before = dict(CUBINS)

    def fake_compile(code):
        calls.append(code)
        return f"binary of {code}".encode()

    compile_cached = cached_cuda_compile(fake_compile, str(tmp_path))
    with tvm.target.Target("nvidia/nvidia-h100"):
        assert compile_cached("kernel A") == compile_cached("kernel A") == b"binary of kernel A"
        compile_cached("kernel B")
    with tvm.target.Target("nvidia/nvidia-a100"):
        compile_cached("kernel A")  # another architecture: another binary
    assert calls == ["kernel A", "kernel B", "kernel A"]
    assert (CUBINS["compiled"] - before.get("compiled", 0), CUBINS["read"] - before.get("read", 0)) == (3, 1)
    monkeypatch.setenv("TVM_KERNEL_DUMP", str(tmp_path / "dump"))
    with tvm.target.Target("nvidia/nvidia-h100"):
        compile_cached("kernel A")  # dumping files is a side effect a cache hit would skip
    assert len(calls) == 4 and len(list(tmp_path.glob("*.bin"))) == 3


def test_the_cache_is_installed_as_tvms_cuda_compile_callback(monkeypatch):
    import uuid
    from pathlib import Path

    from explorer.cuda_compile import CUDA_CACHE, nvcc_path
    from explorer.presets import get_preset

    if nvcc_path() is None:
        pytest.skip("needs nvcc to compile CUDA without a GPU")
    monkeypatch.setenv("TVM_CUDA_COMPILE_MODE", "nvcc")
    # A comment no other run has: a guaranteed miss, then a hit.
    source = build(get_preset("dw-blog-channel-21").spec, "h100").cuda + f"\n// {uuid.uuid4()}\n"
    before = set(Path(CUDA_CACHE).glob("*.bin")) if Path(CUDA_CACHE).exists() else set()
    callback = tvm.get_global_func("tvm_callback_cuda_compile")
    with tvm.target.Target("nvidia/nvidia-h100"):
        first = bytes(callback(source))
        assert bytes(callback(source)) == first and len(first) > 1000
    # Other test workers may add binaries to the same cache meanwhile: this source's is the one with its bytes.
    (new,) = [path for path in set(Path(CUDA_CACHE).glob("*.bin")) - before if path.read_bytes() == first]
    new.unlink()


def test_search_best_prints_a_preset_block_the_loader_accepts(tmp_path):
    """bench/search_best.py's output is pasted into presets/*.toml: it must load as is."""
    import argparse

    from search_best import PLANS, preset_block  # bench/search_best.py (pytest's pythonpath)

    from explorer.presets import load_file
    plan = PLANS["conv2d-resnet-last"]  # split knobs (tuples) and booleans
    spec = plan.base().with_knobs(tile_f=(16, 2, 16, 1), unroll_explicit=False)
    args = argparse.Namespace(sample=None, rounds=2)
    block = preset_block(plan, spec, 98.76, "NVIDIA H100 80GB HBM3", 1234, args)
    path = tmp_path / "best.toml"
    path.write_text('[lesson]\nid = "best"\ntitle = "Best"\n\n' + block)
    (preset,) = load_file(path).presets
    assert preset.id == "best-conv2d-resnet-last" and preset.spec == spec
    assert preset.found_by == "python bench/search_best.py conv2d-resnet-last"
    assert preset.reported[0].value_us == 98.76 and preset.reported[0].this_schedule
    assert preset.reported[0].hardware == "NVIDIA H100 80GB HBM3"


def test_heatmap_figure_shows_the_cells_and_names_the_point_behind_each(measured):
    from explorer.figures import alt
    from explorer.search.figures import heatmap_figure, tuning_figure

    result, _ = measured
    (trace,) = heatmap_figure(result, "num_thread_x", "num_thread_y").data
    assert [list(r) for r in trace.z] == [[None, 13.0, 21.0], [14.0, 10.0, 18.0], [18.0, 14.0, 22.0]]
    assert list(trace.x) == ["4", "8", "16"] and list(trace.y) == ["1", "4", "8"]
    assert trace.reversescale  # lower latency is better: the best cells are the bright ones
    assert trace.hovertext[1][1].split("<br>") == ["num_thread_x = 8, num_thread_y = 4", "latency (µs): 10",
                                                   "2 of 2 valid", "num_vthread_x = 1"]
    assert trace.hovertext[0][0].endswith("no valid combination (2 tried)")
    # Each cell reads its value, the empty one says why it is empty (not "None").
    assert [list(r) for r in trace.text] == [["none valid", "13", "21"], ["14", "10", "18"], ["18", "14", "22"]]
    figure = heatmap_figure(result, "num_thread_x", "num_thread_y")
    assert figure.layout.title.text == "Best latency (µs) for each num_thread_x and num_thread_y"  # one short line
    assert alt(figure) == ("The best latency (µs) over the other swept knobs for each pair of num_thread_x and "
                           "num_thread_y: 8 of 9 pairs have a valid setting, the best (10) at num_thread_x = 8, "
                           "num_thread_y = 4.")
    tuning = tuning_figure((None, 5.0, 4.0), budget=96)  # no working candidate in the first batch
    (line,) = tuning.data
    assert list(line.y) == [None, 5.0, 4.0] and list(line.x) == [1, 2, 3]
    assert tuning.layout.xaxis.dtick == 1 and alt(tuning).endswith("4.00 µs at the end.")


@pytest.mark.gpu
def test_a_sweep_on_the_gpu_times_every_valid_point_and_ranks_by_latency():
    """The real measurer: each valid point is checked against NumPy and timed on this GPU."""
    from explorer.measure import gpu_measurer

    measurer = gpu_measurer()
    assert measurer is not None
    result = run(Grid.parse(SMALL, ["num_thread_x=4,8", "num_thread_y=1,4"]), measurer=measurer, workers=2)
    assert result.measured and result.ranking.startswith("Ranked by measured latency on the GPU")
    ranked = result.ranked()
    assert len(ranked) + len(result.skipped()) == 4 and ranked
    assert all(p.latency_us > 0 for p in ranked)
    assert [p.latency_us for p in ranked] == sorted(p.latency_us for p in ranked)
