"""The GPU benchmarks' selection and time limits, without a GPU: bench/kernels.py --only picks
rows and keeps earlier ones; bench/search_best.py --max-minutes stops a search and still
prints the best point so far."""
import argparse
import json

import kernels  # bench/ (pytest's pythonpath)
import search_best

import explorer.measure
from explorer.schedules.conv2d_async import Conv2dAsyncKnobs
from explorer.search.results import INVALID, VALID, Point


def labels(targets):
    return [t.workload.label() for t in targets]


def test_only_picks_rows_by_part_of_their_label_or_the_whole_label():
    assert labels(kernels.selected(["conv2d"])) == ["conv2d [1,512,7,7] x [512,512,3,3] s1 p1"]
    assert labels(kernels.selected(["matmul 4096"])) == ["matmul 4096x4096x4096", "matmul 4096x4096x4096 float16",
                                                         "matmul 4096x4096x4096 bfloat16"]
    assert labels(kernels.selected(["MATMUL 4096x4096x4096"])) == ["matmul 4096x4096x4096"]  # a whole label
    assert labels(kernels.selected(["matmul 4096x4096x4096 float16", "1024"])) == [
        "matmul 1024x1024x1024", "matmul 4096x4096x4096 float16"]
    assert len(kernels.selected(["float16"])) == 2  # bfloat16 contains it too
    assert kernels.selected(["no such workload"]) == ()
    assert kernels.selected(None) == kernels.BENCHMARKS


def test_the_conv2d_goal_is_half_of_cudnns_time():
    (conv,) = kernels.selected(["conv2d"])
    assert conv.verdict(50.0, 107.8) == "yes"
    assert conv.verdict(80.7, 107.8) == "no: 0.75× PyTorch's time (goal ≤ 0.5×)"


def test_runs_with_only_add_up_to_the_whole_table(tmp_path, monkeypatch):
    monkeypatch.setattr(kernels, "RESULTS", tmp_path)
    matmul = {"workload": "matmul 1024x1024x1024", "best": "a"}
    conv = {"workload": "conv2d [1,512,7,7] x [512,512,3,3] s1 p1", "best": "b"}
    assert kernels.merged_rows("NVIDIA H100 80GB HBM3", [matmul], write=True) == [matmul]
    newer = dict(matmul, best="c")
    # In the order of BENCHMARKS (conv2d before matmul), the newer matmul row replacing the older one.
    assert kernels.merged_rows("NVIDIA H100 80GB HBM3", [conv, newer], write=True) == [conv, newer]
    saved = json.loads((tmp_path / "kernels-nvidia-h100-80gb-hbm3.json").read_text())
    assert set(saved) == {matmul["workload"], conv["workload"]}
    assert kernels.merged_rows("NVIDIA H100 80GB HBM3", [], write=False) == [conv, newer]


def test_fastest_ignores_points_without_a_time():
    points = [Point(Conv2dAsyncKnobs(block_f=b), VALID, latency_us=t) for b, t in ((16, 9.0), (32, 4.0), (64, None))]
    assert search_best.fastest(points).knobs.block_f == 32
    assert search_best.fastest([Point(Conv2dAsyncKnobs(), INVALID, "too many threads")]) is None


def test_max_minutes_stops_the_search_and_prints_the_best_point_so_far(tmp_path, monkeypatch, capsys):
    # A stand-in GPU whose time for a point is its block_f: the first point recorded ends the run.
    monkeypatch.setattr(search_best, "gpu_measurer", lambda: lambda spec: float(spec.knobs.block_f))
    monkeypatch.setattr(explorer.measure, "local_gpu", lambda: "Test GPU")
    args = argparse.Namespace(static=False, results=tmp_path, workers=1, compile_timeout=120.0, sample=3, seed=0,
                              rounds=1, max_minutes=1e-9)
    search_best.search(search_best.PLANS["conv2d-async-resnet-last"], args)
    out, err = capsys.readouterr()
    assert "stopped after --max-minutes" in err
    recorded = (tmp_path / "conv2d-async-resnet-last-test-gpu.jsonl").read_text().splitlines()
    assert len(recorded) == 1  # nothing started after the deadline was seen
    point = json.loads(recorded[0])  # one worker: the first point of seed 0's sample, a valid one
    assert point["status"] == VALID, point["reason"]
    assert 'id = "best-conv2d-async-resnet-last"' in out and 'template = "conv2d_async"' in out
    assert f"value_us = {float(point['knobs']['block_f']):.2f}" in out


def test_the_table_says_when_each_row_was_measured():
    matmul = {"workload": "matmul 1024x1024x1024", "date": "2026-11-23"}
    conv = {"workload": "conv2d [1,512,7,7] x [512,512,3,3] s1 p1", "date": "2026-11-21"}
    assert kernels.measured_on([matmul]) == "2026-11-23"
    assert kernels.measured_on([matmul, dict(conv, date="2026-11-23")]) == "2026-11-23"
    assert kernels.measured_on([matmul, conv]) == ("2026-11-21: conv2d [1,512,7,7] x [512,512,3,3] s1 p1; "
                                                   "2026-11-23: matmul 1024x1024x1024")
    assert kernels.measured_on([{"workload": "matmul 1024x1024x1024"}]) == "date not recorded"


def test_the_table_measures_the_roofline_before_the_kernels(tmp_path, monkeypatch, capsys):
    events = []
    monkeypatch.setattr(kernels, "RESULTS", tmp_path)
    monkeypatch.setattr(kernels, "local_gpu", lambda: "Test GPU")
    monkeypatch.setattr(explorer.measure, "ceilings", lambda target=None: events.append("ceilings"))
    monkeypatch.setattr(explorer.measure, "ceilings_error", lambda target=None: "no ceilings on a test GPU")
    monkeypatch.setattr(kernels, "row", lambda benchmark: events.append("row") or {
        "workload": benchmark.workload.label(), "best": "x", "back_to_back_us": 2.0, "graph_us": 1.0, "tvm_us": 1.0,
        "torch_us": 2.0, "percent_of_roofline": None, "goal": benchmark.goal, "presets": 1, "failed": [],
        "ratio": 0.5, "tvm_tflops": None, "torch_tflops": None, "met": "yes", "date": "2026-11-23"})
    assert kernels.main(["--only", "conv1d", "--no-write"]) == 0
    assert events == ["ceilings", "row"]
    assert "no roofline column: no ceilings on a test GPU" in capsys.readouterr().err


def test_a_stored_row_is_judged_in_the_benchmarks_current_words():
    row = {"workload": "matmul 4096x4096x4096 float16", "tvm_us": 350.0, "torch_us": 185.0, "met": "old words"}
    assert kernels.met(row) == "no: 53% of PyTorch's TFLOP/s (goal 70%)"
    assert kernels.met(dict(row, workload="a workload no longer benchmarked")) == "old words"
