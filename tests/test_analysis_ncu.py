"""Nsight Compute: the CSV parser on a hand-written capture, the model comparison, and
(on a GPU with ncu) a real profile."""
import pytest

from explorer.analysis.banks import BankReport, BankTotals, KernelBanks, analyze_banks
from explorer.analysis.ncu import (
    DURATION,
    METRICS,
    call_durations_us,
    compare,
    format_comparison,
    ncu_options,
    ncu_path,
    parse_ncu_csv,
    profile,
    spec_from_json,
    spec_to_json,
)
from explorer.build import build
from explorer.errors import ExplorerError
from explorer.presets import get_preset

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')


def row(launch, kernel, metric, value, unit=""):
    return (f'"{launch}","4242","python3.12","127.0.0.1","{kernel}","1","7","(16, 8, 1)","(9, 256, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


# The shape of `ncu --csv --metrics ... python -m ...`: ncu's own lines first, then the table.
CAPTURE = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
    "==PROF== Profiling \"main_kernel\" - 0: 0%....50%....100% - 9 passes",
    HEADER,
    row(0, "main_kernel", METRICS["load", "requests"], "995,328", "inst"),
    row(0, "main_kernel", METRICS["load", "wavefronts"], "1,658,880"),
    row(0, "main_kernel", METRICS["load", "conflicts"], "663,552"),
    row(0, "main_kernel", METRICS["store", "requests"], "87,552", "inst"),
    row(0, "main_kernel", METRICS["store", "wavefronts"], "87,552"),
    row(0, "main_kernel", METRICS["store", "conflicts"], "n/a"),
    "==PROF== Disconnected from process 4242",
])


def test_parse_capture():
    (launch,) = parse_ncu_csv(CAPTURE)
    assert (launch.launch, launch.kernel, launch.block, launch.grid) == (0, "main_kernel", "(16, 8, 1)", "(9, 256, 1)")
    assert launch.get("load", "requests") == 995_328
    assert launch.get("load", "conflicts") == 663_552
    assert launch.get("store", "conflicts") is None


def test_parse_two_launches_and_odd_names():
    text = "\n".join(["program output first", HEADER, row(0, "main_kernel", METRICS["load", "requests"], "10"),
                      row(1, "main_kernel_1(float *, float *)", METRICS["load", "requests"], "1.5e+03")])
    launches = parse_ncu_csv(text)
    assert [l.launch for l in launches] == [0, 1] and launches[1].get("load", "requests") == 1500


@pytest.mark.parametrize("text", ["no table here", '"ID","Kernel Name"\n"0","k"'])
def test_parse_rejects_output_without_the_table(text):
    with pytest.raises(ExplorerError):
        parse_ncu_csv(text)


def test_compare_flags_disagreement():
    kernel = KernelBanks("main_kernel", (16, 8, 1), (9, 256, 1), (),
                         loads=BankTotals(995_328, 1_658_880, 663_552), stores=BankTotals(87_552, 87_552, 0))
    measured = parse_ncu_csv(CAPTURE.replace('"663,552"', '"331,776"'))
    rows = compare(BankReport((kernel,)), measured)
    flags = {(r.op, r.what): r.agrees for r in rows}
    assert flags["load", "requests"] and flags["load", "wavefronts"] and flags["store", "requests"]
    assert flags["load", "conflicts"] is False
    assert flags["store", "conflicts"] is None  # n/a
    table = format_comparison(rows)
    assert "**disagree**" in table and "| main_kernel | load | conflicts | 663,552 | 331,776 |" in table


def test_spec_round_trips_through_json():
    spec = get_preset("dw-blog-final-96").spec
    assert spec_from_json(spec_to_json(spec)) == spec


@pytest.mark.gpu
def test_profile_matches_the_model_on_a_conflict_free_kernel():
    if ncu_path() is None:
        pytest.skip("ncu is not installed")
    spec = get_preset("dw-blog-final-96").spec.with_knobs(num_thread_y=4, num_thread_x=32, num_vthread_x=1)
    rows = compare(analyze_banks(build(spec)), profile(spec))
    stores = [r for r in rows if r.op == "store" and r.what == "conflicts"]
    assert stores and all(r.measured is not None for r in stores)


def test_counters_ncu_did_not_collect_read_as_missing():
    from explorer.analysis.ncu import _number

    assert _number("No-CC") is None and _number("n/a") is None and _number("") is None
    assert _number("1,234") == 1234.0


def test_raw_page_reads_only_the_metrics_asked_for():
    # ncu 2025+ adds columns of its own to the raw page, some of them text (the device's name).
    header = '"ID","Kernel Name","device__attribute_display_name","gpu__time_duration.sum"'
    units = '"","","","nsecond"'
    text = "\n".join([header, units, '"0","main_kernel","NVIDIA H100 80GB HBM3","7,552"'])
    (launch,) = parse_ncu_csv(text, ("gpu__time_duration.sum",))
    assert launch.metrics == {"gpu__time_duration.sum": 7552}
    with pytest.raises(ExplorerError, match="NVIDIA H100"):
        parse_ncu_csv(text)


# -- kernel time per call (bench/measure_gpu.py --ncu) ----------------------------------

DATA = __import__("pathlib").Path(__file__).parent / "data"


def test_call_durations_from_a_recorded_capture():
    # ncu --page raw on the blog's threads (32, 1): one launch of 7,552 ns.
    counters = parse_ncu_csv((DATA / "ncu_raw_threads_32x1.csv").read_text())
    assert call_durations_us(counters, 1) == [7.552]


def test_call_durations_sum_each_calls_kernels_in_base_or_scaled_units():
    # Two calls of a two-kernel main: (1,500 + 2,500) ns and (1.25 µs + 2,750 ns).
    text = "\n".join([HEADER, row(0, "main_kernel", DURATION, "1,500", "nsecond"),
                      row(1, "main_kernel_1", DURATION, "2,500", "nsecond"),
                      row(2, "main_kernel", DURATION, "1.25", "usecond"),
                      row(3, "main_kernel_1", DURATION, "2,750", "nsecond")])
    assert call_durations_us(parse_ncu_csv(text), 2) == [4.0, 4.0]
    assert call_durations_us(parse_ncu_csv(text), 1) == [1.5, 2.5, 1.25, 2.75]


@pytest.mark.parametrize("kernels_per_call, text", [
    (2, "\n".join([HEADER, row(0, "main_kernel", DURATION, "1,500")])),  # half a call
    (1, "\n".join([HEADER, row(0, "main_kernel", DURATION, "n/a")])),  # not collected
])
def test_call_durations_refuse_partial_captures(kernels_per_call, text):
    with pytest.raises(ExplorerError, match="not whole calls"):
        call_durations_us(parse_ncu_csv(text), kernels_per_call)


def test_undisturbed_options_leave_clocks_and_caches_alone():
    assert ncu_options((DURATION,))[:7] == ["--csv", "--page", "raw", "--print-units", "base", "--metrics", DURATION]
    assert "--clock-control" not in ncu_options((DURATION,))
    assert ncu_options((DURATION,), undisturbed=True)[-4:] == ["--clock-control", "none", "--cache-control", "none"]


@pytest.mark.gpu
def test_profile_times_each_call_with_clocks_and_caches_left_alone():
    if ncu_path() is None:
        pytest.skip("ncu is not installed")
    spec = get_preset("dw-blog-final-96").spec  # one kernel per call
    counters = profile(spec, metrics=(DURATION,), calls=3, undisturbed=True, nvcc=False)
    durations = call_durations_us(counters, 1)
    assert len(durations) == 3 and all(0 < us < 1000 for us in durations)
