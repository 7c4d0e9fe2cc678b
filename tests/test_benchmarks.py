"""The one list of benchmark workloads and goals (explorer.benchmarks), with goals judged
on hand-made times."""
import pytest

from explorer.benchmarks import BENCHMARKS, Benchmark, get_benchmark
from explorer.errors import ExplorerError
from explorer.presets import all_presets
from explorer.schedules import workload_from_mapping

CONV1D = workload_from_mapping("conv1d", {"input_length": 16384, "filter_length": 32})


def test_one_row_per_id_and_per_workload():
    assert len({b.id for b in BENCHMARKS}) == len(BENCHMARKS)
    assert len({b.workload for b in BENCHMARKS}) == len(BENCHMARKS)


def test_every_benchmark_has_a_shipped_preset_or_is_a_search_target():
    # The kernel table measures the shipped presets of each workload: most benchmarks have some.
    shipped = {p.spec.workload for p in all_presets().values()}
    assert sum(b.workload in shipped for b in BENCHMARKS) >= len(BENCHMARKS) // 2


def test_faster_than_pytorch_is_strict():
    faster = Benchmark("x", CONV1D, "faster than PyTorch", strict=True)
    assert faster.verdict(8.0, 10.0) == "yes"
    assert faster.verdict(10.0, 10.0) == "no: 1.00× PyTorch's time"
    assert faster.verdict(12.0, 10.0) == "no: 1.20× PyTorch's time"


def test_a_time_bound_adds_its_own_gap():
    dw96 = get_benchmark("dw-96")  # faster than PyTorch and ≤ 5.0 µs
    assert dw96.verdict(4.5, 22.0) == "yes"
    assert dw96.verdict(6.25, 22.0) == "no: 1.25 µs over 5 µs"
    assert dw96.verdict(30.0, 22.0) == "no: 1.36× PyTorch's time, 25.00 µs over 5 µs"  # 30 / 22 = 1.364


def test_a_share_of_the_flop_rate_is_a_ratio_of_times():
    fp16 = get_benchmark("matmul-fp16-4096")  # ≥ 80% of cuBLAS's TFLOP/s: at most 1 / 0.8 = 1.25× its time
    assert fp16.goal == "≥ 80% of cuBLAS's TFLOP/s" and fp16.max_ratio == pytest.approx(1 / 0.8)
    assert fp16.verdict(125.0, 100.0) == "yes"
    assert fp16.verdict(130.0, 100.0) == "no: 77% of PyTorch's TFLOP/s (goal 80%)"  # 100 / 130
    assert get_benchmark("matmul-1024").verdict(55.7, 55.7) == "yes"  # at most cuBLAS's time: equal is met


def test_the_hopper_rows_are_16_bit_matmuls_with_the_tensor_core_goal():
    shapes = {b.id: (b.workload.m, b.workload.n, b.workload.k, b.workload.dtype) for b in BENCHMARKS
              if b.id in ("matmul-fp16-4096", "matmul-bf16-4096", "matmul-fp16-8192", "matmul-fp16-llm-4096x11008")}
    assert shapes == {"matmul-fp16-4096": (4096, 4096, 4096, "float16"),
                      "matmul-bf16-4096": (4096, 4096, 4096, "bfloat16"),
                      "matmul-fp16-8192": (8192, 8192, 8192, "float16"),
                      "matmul-fp16-llm-4096x11008": (4096, 11008, 4096, "float16")}
    assert all(get_benchmark(i).rate_goal and get_benchmark(i).max_ratio == pytest.approx(1.25) for i in shapes)
    assert get_benchmark("matmul-fp16-llm-4096x11008").workload.label() == "matmul 4096x11008x4096 float16"


def test_without_both_times_nothing_is_judged():
    assert get_benchmark("dw-21").verdict(None, 2.45) == "not measured"
    assert get_benchmark("dw-21").verdict(2.0, None) == "not measured"


def test_an_unknown_benchmark_names_the_known_ones():
    with pytest.raises(ExplorerError, match="No benchmark named 'dw-7'; the benchmarks are: dw-21, dw-32"):
        get_benchmark("dw-7")
