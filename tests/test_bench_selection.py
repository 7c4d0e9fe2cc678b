"""The GPU benchmarks' selection and time limits, without a GPU: bench/kernels.py --only picks
rows and keeps earlier ones; bench/search_best.py --max-minutes stops a search and still
prints the best point so far, and its fp32 matmul plans sample the structures each size needs."""
import argparse
import datetime
import json
from concurrent.futures import ThreadPoolExecutor

import hopper_gemm
import kernels  # bench/ (pytest's pythonpath)
import pytest
import result_files
import search_best

import explorer.measure
from explorer.schedules.conv2d_async import Conv2dAsyncKnobs
from explorer.search.results import INVALID, VALID, Point


def labels(targets):
    return [t.workload.label() for t in targets]


def test_only_picks_rows_by_part_of_their_label_or_the_whole_label():
    assert labels(kernels.selected(["conv2d"])) == ["conv2d [1,512,7,7] x [512,512,3,3] s1 p1"]
    assert labels(kernels.selected(["matmul 4096"])) == ["matmul 4096x4096x4096", "matmul 4096x4096x4096 float16",
                                                         "matmul 4096x4096x4096 bfloat16",
                                                         "matmul 4096x11008x4096 float16"]
    assert labels(kernels.selected(["MATMUL 4096x4096x4096"])) == ["matmul 4096x4096x4096"]  # a whole label
    assert labels(kernels.selected(["matmul 4096x4096x4096 float16", "1024"])) == [
        "matmul 1024x1024x1024", "matmul 4096x4096x4096 float16"]
    # The matmuls at 4096³, 8192³ and 4096×11008×4096 (bfloat16 contains it too), softmax over a vocabulary,
    # LayerNorm and RMSNorm.
    assert len(kernels.selected(["float16"])) == 7
    assert kernels.selected(["no such workload"]) == ()
    assert kernels.selected(None) == kernels.BENCHMARKS


def test_hopper_gemm_runs_with_only_keep_the_other_settings(tmp_path):
    path = tmp_path / "hopper-gemm-gpu.json"
    old = [{"setting": "default-fp16", "us": 199.0}, {"setting": "persistent-fp16", "us": 195.0}]
    path.write_text(json.dumps({"date": "2026-11-20", "rows": old}))
    rows = hopper_gemm.merged_rows(path, [{"setting": "cluster-fp16", "us": 201.0},
                                          {"setting": "default-fp16", "us": 198.0}])
    today = datetime.date.today().isoformat()
    assert rows == [{"setting": "default-fp16", "us": 198.0, "date": today},  # replaced, in SETTINGS' order
                    {"setting": "persistent-fp16", "us": 195.0, "date": "2026-11-20"},  # kept, with its date
                    {"setting": "cluster-fp16", "us": 201.0, "date": today}]
    assert hopper_gemm.merged_rows(tmp_path / "none.json", [{"setting": "x"}]) == [{"setting": "x", "date": today}]


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


def test_result_files_are_named_after_the_gpu_as_the_saved_ones_are():
    slug = result_files.gpu_slug("NVIDIA H100 80GB HBM3")
    assert slug == "nvidia-h100-80gb-hbm3" and result_files.gpu_slug(" Test  GPU (2) ") == "test-gpu-2"
    assert (result_files.RESULTS / f"kernels-{slug}.json").exists()
    assert (search_best.SEARCH_RESULTS / f"dw-21-{slug}.jsonl").exists()


def test_fastest_ignores_points_without_a_time():
    points = [Point(Conv2dAsyncKnobs(block_f=b), VALID, latency_us=t) for b, t in ((16, 9.0), (32, 4.0), (64, None))]
    assert search_best.fastest(points).knobs.block_f == 32
    assert search_best.fastest([Point(Conv2dAsyncKnobs(), INVALID, "too many threads")]) is None


def test_max_minutes_stops_the_search_and_prints_the_best_point_so_far(tmp_path, monkeypatch, capsys):
    # A stand-in GPU whose time for a point is its block_f: the first point recorded ends the run.
    monkeypatch.setattr(search_best, "gpu_measurer", lambda: lambda spec: float(spec.knobs.block_f))
    monkeypatch.setattr(explorer.measure, "local_gpu", lambda: "Test GPU")
    # The points compile one at a time in this process, as in one compile process (workers=1): the deadline
    # is the search's, whatever pool compiles, and a process would import TVM first (most of a second of CPU).
    monkeypatch.setattr(search_best, "compile_pool", lambda workers, timeout_s: ThreadPoolExecutor(1))
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


def sampled_valid_knobs(plan_id):
    """The knobs of the points a plan's default sample draws that the template accepts."""
    from explorer.errors import InvalidKnobs
    from explorer.search.grid import Grid

    plan = search_best.PLANS[plan_id]
    grid = Grid.parse(plan.base(), plan.grid)
    valid = []
    for knobs in (grid.knobs_at(i) for i in grid.indices(plan.sample, 0)):
        try:
            plan.base().template_def.apply(plan.benchmark.workload, knobs)
        except InvalidKnobs:
            continue
        valid.append(knobs)
    return valid


def test_the_fp32_matmul_searches_sample_small_blocks_split_k_and_large_tiles():
    """A 2-3 minute search on a GPU measures these samples first: they must reach the structures
    each size needs (more blocks at 1024³, more multiply-adds per instruction at 4096³)."""
    small = sampled_valid_knobs("matmul-async-1024")
    assert len(small) >= 40
    assert {(k.block_m, k.block_n) for k in small} == {(64, 64), (64, 128), (128, 64), (128, 128)}
    assert {k.split_k for k in small} == {1, 2, 4} and {k.register_double_buffer for k in small} == {True, False}
    large = sampled_valid_knobs("matmul-async-4096")
    assert len(large) >= 30
    eight = [k for k in large if (k.thread_m, k.thread_n) == (8, 8)]
    assert {(k.block_m, k.block_n) for k in eight} == {(128, 128), (128, 256)}
    assert {k.block_k for k in large} == {8, 16, 32} and {k.stages for k in large} == {2, 3, 4}
    assert any(k.register_double_buffer for k in eight) and any(k.thread_m == 16 for k in large)
    assert "split_k" in search_best.PLANS["matmul-async-1024"].refine
    assert "register_double_buffer" in search_best.PLANS["matmul-async-4096"].refine


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
    assert kernels.met(row) == "no: 53% of PyTorch's TFLOP/s (goal 80%)"
    assert kernels.met(dict(row, workload="a workload no longer benchmarked")) == "old words"


def test_the_hopper_rows_measure_the_template_s_defaults_and_persistent_tiles_where_no_preset_has_them():
    from explorer.schedules.matmul_hopper import check_knobs

    fp16_4096, bf16_4096, fp16_8192, llm = kernels.selected(["float16"])[:4]  # the matmuls come first
    # The shipped fp16 4096³ presets already have both settings; bf16 has the defaults only.
    assert not {"matmul_hopper defaults", "matmul_hopper persistent"} & set(kernels.candidates(fp16_4096.workload))
    assert "matmul_hopper persistent" in kernels.candidates(bf16_4096.workload)
    for benchmark in (fp16_8192, llm):
        extra = {name: spec for name, spec in kernels.candidates(benchmark.workload).items() if "hopper" in name}
        assert set(extra) == {"matmul_hopper defaults", "matmul_hopper persistent"}
        for spec in extra.values():  # 128×256×64 blocks divide 8192 and 4096 × 11008 (43 × 256) × 4096
            plan = check_knobs(spec.workload, spec.knobs)
            assert plan.tiles == (spec.workload.m // 128, spec.workload.n // 256)
    assert check_knobs(llm.workload, kernels.candidates(llm.workload)["matmul_hopper defaults"].knobs).tiles == (32, 43)
    assert "matmul_hopper defaults" not in kernels.candidates(kernels.selected(["matmul 1024"])[0].workload)


def test_the_llm_shape_s_kernel_is_generated():
    from explorer.build import build

    spec = kernels.candidates(kernels.selected(["4096x11008"])[0].workload)["matmul_hopper defaults"]
    cuda = build(spec).cuda
    assert "wgmma.mma_async" in cuda and "11008" in cuda


def test_cold_l2_and_ncu_columns_appear_where_a_row_has_them():
    base = {"workload": "matmul 8192x8192x8192 float16", "best": "matmul_hopper persistent", "back_to_back_us": 1500.0,
            "graph_us": None, "tvm_us": 1500.0, "torch_us": 1400.0, "ratio": 1500 / 1400, "tvm_tflops": 733.0,
            "torch_tflops": 785.4, "percent_of_roofline": 75.0, "goal": "≥ 80% of cuBLAS's TFLOP/s", "met": "yes"}
    plain = kernels.table([base])
    assert "cold L2" not in plain and "ncu" not in plain
    both = kernels.table([dict(base, cold_tvm_us=1510.0, cold_torch_us=1420.0, ncu_tvm_us=1700.0, ncu_torch_us=1600.0),
                          dict(base, workload="matmul 4096x4096x4096 float16")])
    header, align, first, second = both.splitlines()
    assert "| cold L2 µs TVM / PyTorch | ncu µs TVM / PyTorch |" in header
    assert header.count("|") == align.count("|") == first.count("|") == second.count("|")
    assert "| 1510.00 / 1420.00 | 1700.00 / 1600.00 |" in first and "| — / — | — / — |" in second
    # 1400 / 1500 = 93% of PyTorch's rate: the 80% goal is met.
    assert first.endswith("| ≥ 80% of cuBLAS's TFLOP/s | yes |")


def test_ncu_durations_per_call_leave_out_the_warm_up():
    from explorer.analysis.ncu import DURATION, KernelCounters, durations_after_warm_up_us
    from explorer.errors import ExplorerError

    def launches(*ns):
        return [KernelCounters(i, "k", "", "", {DURATION: n}) for i, n in enumerate(ns)]

    # 3 calls of 2 launches (ns): the first call left out; 1000 + 500 ns = 1.5 µs, then 1.2 + 0.6 µs.
    assert durations_after_warm_up_us(launches(9000, 800, 1000, 500, 1200, 600), 3, 1) == pytest.approx([1.5, 1.8])
    with pytest.raises(ExplorerError, match="5 launches, not the same number for each of 3 calls"):
        durations_after_warm_up_us(launches(1, 2, 3, 4, 5), 3, 1)


def test_the_ceilings_table_lists_tensor_peaks_and_a_16_bit_preset_without_a_roof():
    import ceilings  # bench/ceilings.py

    from explorer.analysis.roofline import Ceilings, published_ceilings

    measured = Ceilings(60_000.0, 3_000.0, 9_000.0, 50 << 20, "measured on a stand-in", (("float16", 950_000.0),),
                        "").to_dict()
    rows = [{"preset": "best-matmul-tc-bf16-4096", "workload": "matmul 4096x4096x4096 bfloat16", "correct": True,
             "no_roof": True}]
    text = ceilings.tables({"measured": measured, "published": published_ceilings("sm_90a").to_dict()}, rows)
    assert "| float16 tensor cores GFLOP/s | 950,000 | 989,500 |" in text
    assert "| bfloat16 tensor cores GFLOP/s | — | 989,500 |" in text
    assert "no tensor-core roof on this GPU" in text and ceilings.above_a_ceiling(rows) == []
    reason = "their peak is measured with wgmma, which only Hopper (sm_90) GPUs have"
    without = Ceilings(60_000.0, 3_000.0, 9_000.0, 50 << 20, "measured on a stand-in", no_tensor_peak=reason).to_dict()
    assert "| tensor cores | not measured: their peak is measured with wgmma" in ceilings.tables(
        {"measured": without, "published": None}, [])
