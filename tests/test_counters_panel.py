"""The Counters panel: ncu's raw-page CSV parsed from a recorded capture, each counter
beside the static model, the panel with and without ncu (AppTest), the (32, 1) loads the
PTX-level bank model misses, and (GPU with ncu) a real profile."""
import subprocess
from pathlib import Path

import numpy as np
import pytest

from explorer.analysis import ncu
from explorer.analysis.banks import BankTotals, KernelBanks, request_wavefronts
from explorer.build import Spec, build
from explorer.cuda_env import SOURCE_ONLY
from explorer.presets import get_preset

CAPTURE = (Path(__file__).parent / "data" / "ncu_raw_threads_32x1.csv").read_text()
PRESET = "dw-blog-threads-case4"  # the blog's threads (y, x) = (32, 1)


def test_raw_page_capture_is_parsed_in_base_units():
    (launch,) = ncu.parse_ncu_csv(CAPTURE)
    assert (launch.launch, launch.kernel, launch.block, launch.grid) == (0, "main_kernel", "(1, 32, 1)", "(1, 256, 1)")
    assert launch.get("load", "conflicts") == 11_520 and launch.get("load", "wavefronts") == 55_040
    assert launch.get("store", "conflicts") == 1 and launch.get("load", "requests") == 27_648
    assert launch.metrics[ncu.DURATION] == 7_552  # ns
    assert launch.metrics[ncu.OCCUPANCY] == pytest.approx(24.61)
    assert launch.metrics[ncu.L2_BYTES] == 2_415_616
    assert set(ncu.PANEL_METRICS) <= set(launch.metrics)


def test_raw_page_units_are_scaled_to_ns_and_bytes():
    text = CAPTURE.replace('"nsecond"', '"usecond"').replace('"7,552"', '"7.552"').replace(
        '"byte","%","usecond"', '"Kbyte","%","usecond"').replace('"1,110,784"', '"1,110.784"')
    (launch,) = ncu.parse_ncu_csv(text)
    assert launch.metrics[ncu.DURATION] == pytest.approx(7_552)
    assert launch.metrics[ncu.DRAM_BYTES] == pytest.approx(1_110_784)


def _model(occupancy=50.0, bound_us=5.0):
    # The as-compiled model's totals for (32, 1) (docs/bank-conflicts-gpu.md).
    banks = KernelBanks("main_kernel", (1, 32, 1), (1, 256, 1), (), BankTotals(25_344, 51_456, 0),
                        BankTotals(9_728, 9_728, 0))
    return ncu.StaticModel(banks, "as-compiled", occupancy, 2_106_368, bound_us, "published figures for a test")


def test_counter_rows_flag_each_metric():
    (launch,) = ncu.parse_ncu_csv(CAPTURE)
    rows = {r.name: r for r in ncu.counter_rows(launch, _model())}
    load = rows["shared load bank conflicts"]
    assert (load.measured, load.model, load.agrees) == (11_520, 0, False)  # 11 520 > 2% of 27 648 requests
    assert rows["shared store bank conflicts"].agrees  # 1 against 0
    assert rows["shared load bank wavefronts"].agrees is False  # 55 040 against 51 456: 3 584 > 553
    assert rows["achieved occupancy"].agrees  # 24.6% under the theoretical 50%
    assert rows["DRAM bytes"].agrees and rows["L2 bytes"].agrees  # 1.1 MB ≥ half, 2.4 MB ≥ 0.9 × 2.1 MB
    assert rows["kernel duration"].model == 5_000 and rows["kernel duration"].agrees  # 7.55 µs ≥ 5 µs
    assert rows["DRAM throughput"].agrees is None and rows["DRAM throughput"].measured == pytest.approx(5.43)
    # A kernel faster than the roofline's bound, or above the theoretical occupancy, is flagged.
    fast = {r.name: r for r in ncu.counter_rows(launch, _model(occupancy=12.5, bound_us=10.0))}
    assert fast["kernel duration"].agrees is False and fast["achieved occupancy"].agrees is False


def test_scalar_loads_at_a_34_word_stride_conflict_2_way_and_64_bit_ones_do_not():
    # The (32, 1) case: lane y reads word 34·y + c. ptxas emits 32-bit LDS for the odd
    # words: lanes y and y + 16 share a bank (544 ≡ 0 mod 32), one extra wavefront.
    lanes = np.arange(32)
    scalar = (34 * lanes + 3).reshape(1, 32, 1)
    wavefronts, ideal, degree = request_wavefronts(scalar, np.ones((1, 32), bool), 4)
    assert (wavefronts[0], ideal[0], degree[0]) == (2, 1, 2)
    # The PTX's ld.shared.v2 at even words: two half-warp phases of 16 lanes, no conflict.
    pairs = np.stack([34 * lanes + 2, 34 * lanes + 3], axis=-1).reshape(1, 32, 2)
    wavefronts, ideal, degree = request_wavefronts(pairs, np.ones((1, 32), bool), 8)
    assert (wavefronts[0], ideal[0], degree[0]) == (2, 2, 1)
    assert "11,520" in ncu.PTXAS_NOTE and "(32, 1)" in ncu.PTXAS_NOTE


# Lines of `nvdisasm -c` and `cuobjdump -sass` output (the (32, 1) kernel's first loads).
NVDISASM = """
//--------------------- .text.main_kernel         --------------------------
        .section        .text.main_kernel,"ax",@progbits
.text.main_kernel:
        /*0980*/              @!P0 STS [R11], R0 ;
        /*09a0*/                   LDS.64 R2, [R10] ;
        /*09b0*/                   LDS.128 R4, [R19+0x1240] ;
        /*0bb0*/                   LDS R9, [R2+-0x88] ;
        /*0bd0*/                   LDS.64 R10, [R2+-0x84] ;
"""
CUOBJDUMP = """
        code for sm_90a
                Function : main_kernel
        /*09a0*/                   LDS.64 R2, [R10] ;          /* 0x0000000a0a027984 */
                Function : main_kernel_1
        /*0bb0*/                   LDS R9, [R2+-0x88] ;        /* 0xffff780002097984 */
"""


def test_sass_shared_instructions_are_counted_per_kernel():
    assert ncu.sass_counts(NVDISASM) == {"main_kernel": {"LDS": 1, "LDS.128": 1, "LDS.64": 2, "STS": 1}}
    assert ncu.sass_counts(CUOBJDUMP) == {"main_kernel": {"LDS.64": 1}, "main_kernel_1": {"LDS": 1}}


def test_instruction_mix_of_the_32_by_1_kernel():
    from explorer.cuda_compile import nvcc_path

    if nvcc_path() is None:
        pytest.skip("nvcc is not installed")
    line = ncu.instruction_mix(build(get_preset(PRESET).spec), "main_kernel")
    assert "PTX ld.f32 × 4, ld.v2.f32 × 6, ld.v4.f32 × 2, st.f32 × 5" in line
    if ncu.disassembler() is None:
        assert "SASS not disassembled" in line
    else:  # ptxas re-pairs the loads: scalar LDS where the PTX has ld.shared.v2
        sass = ncu.sass_shared_instructions(build(get_preset(PRESET).spec).cuda, "sm_90a")["main_kernel"]
        assert sass["LDS"] > 4 and sass["LDS.64"] > 6


def test_the_preset_is_the_blogs_32_by_1_setting():
    knobs = get_preset(PRESET).spec.knobs
    assert (knobs.num_thread_y, knobs.num_thread_x, knobs.num_vthread_y, knobs.num_vthread_x) == (32, 1, 1, 1)


# -- the panel ------------------------------------------------------------------------------


def test_the_profiled_program_compiles_its_kernel_even_under_the_apps_source_only_process(monkeypatch):
    """The app's process generates CUDA source only (SOURCE_ONLY); the program ncu
    profiles must not inherit that, or it could not launch the kernel."""
    seen = {}

    def fake_run(command, env, **options):
        seen.update(env)
        return subprocess.CompletedProcess(command, 0, stdout=CAPTURE, stderr="")

    monkeypatch.setenv(SOURCE_ONLY, "1")
    monkeypatch.setattr(ncu, "ncu_path", lambda: "/usr/local/cuda/bin/ncu")
    monkeypatch.setattr(ncu.subprocess, "run", fake_run)
    assert ncu.profile(get_preset(PRESET).spec, metrics=ncu.PANEL_METRICS)
    assert SOURCE_ONLY not in seen and seen["TVM_CUDA_COMPILE_MODE"] == "nvcc"


def test_counters_panel_without_ncu_says_how_to_get_it(monkeypatch):
    from test_app import app

    monkeypatch.setattr(ncu, "ncu_path", lambda: None)
    at = app({"preset": PRESET}, view="Counters").run()
    assert not at.exception and not at.error
    assert any("Nsight Compute (ncu)" in i.value and "CUDA toolkit" in i.value for i in at.info)


def test_counters_panel_profiles_once_and_flags_the_missed_conflicts(monkeypatch):
    import tvm
    from test_app import app, assert_clean

    from app import latency
    from explorer import targets

    calls = []

    def fake_profile(spec: Spec, timeout_s=600, metrics=()):
        calls.append((spec, metrics))
        return ncu.parse_ncu_csv(CAPTURE)

    monkeypatch.setattr(ncu, "ncu_path", lambda: "/usr/local/cuda/bin/ncu")
    monkeypatch.setattr(ncu, "profile", fake_profile)
    monkeypatch.setattr(targets, "local_gpu_target", lambda: tvm.target.Target("nvidia/nvidia-h100"))
    monkeypatch.setattr(latency, "can_measure", lambda: False)
    at = app({"preset": PRESET}, view="Counters").run()
    assert_clean(at)
    at.button(key="ui.ncu").click().run()
    assert_clean(at)
    assert [c[0] for c in calls] == [get_preset(PRESET).spec] and calls[0][1] == ncu.PANEL_METRICS
    table = at.dataframe[0].value
    cells = zip(table["Nsight Compute"], table["model"], table["agreement"], strict=True)
    rows = dict(zip(table["counter"], cells, strict=True))
    assert rows["shared load bank conflicts"][0] == "11,520" and rows["shared load bank conflicts"][2] == "DISAGREE"
    assert rows["shared store bank conflicts"][2] == "agree"
    assert rows["kernel duration"][0] == "7.55 µs" and rows["kernel duration"][2] == "consistent"
    assert any("ptxas" in c.value for c in at.caption)
    at.run()  # a rerun does not profile again
    assert len(calls) == 1


# -- on a GPU with ncu ------------------------------------------------------------------------


@pytest.mark.gpu
def test_counters_of_a_real_launch_beside_the_model():
    if ncu.ncu_path() is None:
        pytest.skip("Nsight Compute (ncu) is not installed")
    spec = get_preset(PRESET).spec
    counters = ncu.profile(spec, metrics=ncu.PANEL_METRICS)
    models = ncu.static_model(build(spec))
    launch = ncu.launch_of(counters, "main_kernel")
    assert launch is not None
    rows = ncu.counter_rows(launch, models["main_kernel"])
    assert all(r.measured is not None for r in rows), [r.metric for r in rows if r.measured is None]
    assert launch.get("load", "requests") > 0 and launch.metrics[ncu.DURATION] > 0


@pytest.mark.gpu
def test_counters_panel_on_a_gpu_with_ncu(monkeypatch):
    from test_app import app, assert_clean

    from app import latency

    if ncu.ncu_path() is None:
        pytest.skip("Nsight Compute (ncu) is not installed")
    monkeypatch.setattr(latency, "can_measure", lambda: False)  # the counters only, not the latency panel
    monkeypatch.setenv(SOURCE_ONLY, "1")  # as in the app's server process
    at = app({"preset": PRESET}, view="Counters").run()
    assert_clean(at)
    at.button(key="ui.ncu").click().run(timeout=600)
    assert_clean(at)
    table = at.dataframe[0].value
    assert "n/a" not in list(table["Nsight Compute"])
    assert set(table["metric"]) == set(ncu.PANEL_METRICS) - {ncu.METRICS["load", "requests"],
                                                               ncu.METRICS["store", "requests"]}
