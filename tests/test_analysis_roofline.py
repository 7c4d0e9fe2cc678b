"""The roofline's data: intensity, attainable performance, which roof applies, the bound,
points for measured settings and the static estimate, published figures per target."""
import pytest

from explorer.analysis.roofline import (
    STATIC,
    Ceilings,
    bound_us,
    intensity,
    published_ceilings,
    roofline,
)
from explorer.errors import ExplorerError
from explorer.gpus import published_gpus
from explorer.presets import get_preset
from explorer.workloads import Matmul

# Round numbers: 1000 GFLOP/s, HBM 100 GB/s, L2 400 GB/s over 1 MiB.
CEILINGS = Ceilings(1000.0, 100.0, 400.0, 1 << 20, "measured on a test GPU")


def test_intensity_is_flops_over_compulsory_bytes():
    # matmul 100³: 2e6 FLOPs over 3 × 10⁴ floats × 4 B.
    w = Matmul(m=100, n=100, k=100)
    assert intensity(w.flops, w.compulsory_bytes) == pytest.approx(2e6 / 120_000)


def test_the_l2_roof_applies_to_a_workload_that_fits_in_l2():
    assert CEILINGS.bandwidth_for(1 << 20) == (400.0, "L2-resident")
    assert CEILINGS.bandwidth_for((1 << 20) + 1) == (100.0, "HBM")
    # Published figures have no L2 roof: HBM whatever the size.
    assert published_ceilings("sm_90a").bandwidth_for(1000) == (3350, "HBM")


def test_bound_is_the_slower_of_compute_and_traffic():
    # 8e5 bytes from L2 at 400 GB/s: 2 µs; 1e6 FLOPs at 1000 GFLOP/s: 1 µs.
    assert bound_us(CEILINGS, 1_000_000, 800_000) == pytest.approx(2.0)
    # 4e6 FLOPs: 4 µs of compute.
    assert bound_us(CEILINGS, 4_000_000, 800_000) == pytest.approx(4.0)
    # 2e6 bytes do not fit in L2: 20 µs at 100 GB/s.
    assert bound_us(CEILINGS, 1_000_000, 2_000_000) == pytest.approx(20.0)


def test_preset_roofline_places_the_measured_point_and_tries():
    w = get_preset("dw-blog-final-96").spec.workload  # 42 467 328 FLOPs over 18 883 584 B
    ceilings = Ceilings(60_000.0, 3000.0, 6000.0, 50 << 20, "measured on a test GPU")
    r = roofline(w, ceilings, latency_us=10.0, tries=(("try 1", w, 20.0, ("float32",)),))
    assert r.intensity == pytest.approx(42_467_328 / 18_883_584)
    assert r.roof == (6000.0, "L2-resident")  # 18 MiB fit in 50 MiB
    assert r.attainable_gflops == pytest.approx(6000.0 * 42_467_328 / 18_883_584)
    # Bound: 18 883 584 B at 6000 GB/s = 3.147 µs (compute: 0.71 µs); 10 µs is 31% of it.
    assert r.current.percent_of_attainable == pytest.approx(100 * 18_883_584 / 6000 / 1e3 / 10.0)
    assert r.current.gflops == pytest.approx(42_467_328 / 10.0 / 1e3)
    assert r.tries[0].label == "try 1" and r.tries[0].percent_of_attainable == pytest.approx(
        r.current.percent_of_attainable / 2)
    data = r.to_dict()
    assert data["roof"] == "L2-resident" and data["current"]["kind"] == "measured"
    assert data["ceilings"]["source"] == "measured on a test GPU"


def test_without_a_measurement_the_point_is_a_static_estimate_on_the_roof():
    w = get_preset("dw-blog-final-96").spec.workload
    r = roofline(w, published_ceilings("sm_90a"))
    assert r.current.kind == STATIC and r.current.percent_of_attainable == pytest.approx(100.0)
    assert "published figures for H100 SXM" in r.ceilings.source
    assert any("Static estimate" in note for note in r.notes)
    assert any("No L2 roof" in note for note in r.notes)


def test_published_figures_cover_the_target_aliases_and_say_what_is_missing():
    assert set(published_gpus()) == {"sm_90", "sm_80", "sm_75", "sm_89"}
    h100 = published_ceilings("sm_90a")
    assert (h100.fp32_gflops, h100.hbm_gbps, h100.l2_gbps) == (67_000, 3_350, None) and not h100.measured
    assert "GDDR6" in published_ceilings("sm_75").source  # the T4's "HBM" roof is its GDDR6
    with pytest.raises(ExplorerError, match="No published figures for sm_70"):
        published_ceilings("sm_70")


def test_figure_draws_the_roofs_the_point_and_the_tries():
    from explorer.figures import alt as figures_alt
    from explorer.figures import roofline_figure

    w = get_preset("dw-blog-final-96").spec.workload
    r = roofline(w, CEILINGS, latency_us=100.0, tries=(("try 1", w, 200.0, ("float32",)),))
    figure = roofline_figure(r)
    names = [t.name for t in figure.data]
    assert names == ["HBM 100 GB/s", "L2-resident 400 GB/s", "FP32 peak 1,000 GFLOP/s", "this session's tries",
                     "this setting (measured)"]
    hbm = figure.data[0]
    assert hbm.x[1] == pytest.approx(10.0) and hbm.y[1] == 1000.0  # meets the peak at the ridge, 1000 / 100
    assert figure.data[-1].y[0] == pytest.approx(w.flops / 100.0 / 1e3)
    assert figure.layout.xaxis.type == "log" and figure.layout.yaxis.type == "log"
    # Labelled at the powers of ten only (1, 10, 100, 1k), not "5 2 10k 5 2 1000".
    assert all(text in ("0.01", "0.1") or text[0] == "1" for text in figure.layout.yaxis.ticktext)
    assert figures_alt(figure).startswith(f"{r.workload} at {r.intensity:.2f} FLOP per byte under the FP32 roof of "
                                          "1,000 GFLOP/s and the HBM and L2-resident bandwidth roofs; this setting "
                                          "(measured) at ")
    # Published figures: no L2 roof.
    assert [t.name for t in roofline_figure(roofline(w, published_ceilings("sm_80"))).data][:2] == [
        "HBM 2,039 GB/s", "FP32 peak 19,500 GFLOP/s"]


def test_cli_view_roofline_json_for_a_target_without_a_gpu(capsys):
    from explorer.cli import main

    assert main(["show", "dw-blog-final-96", "--view", "roofline", "--target", "sm_90a", "--json"]) == 0
    data = __import__("json").loads(capsys.readouterr().out)["roofline"]
    assert data["current"]["kind"] == STATIC and data["ceilings"]["fp32_gflops"] == 67_000
    assert data["intensity_flop_per_byte"] == pytest.approx(42_467_328 / 18_883_584)


# -- the app's Roofline tab ------------------------------------------------------------------


def test_roofline_tab_without_a_gpu_shows_the_static_estimate():
    from test_app import app, assert_clean

    at = app({"preset": "dw-blog-final-96"}, view="Roofline").run()
    assert_clean(at)
    estimate = next(m for m in at.metric if m.label == "Static estimate")
    assert estimate.value == "100%"
    intensity = next(m for m in at.metric if m.label == "Arithmetic intensity")
    assert intensity.value == "2.25 FLOP/B"
    assert any("published figures for H100 SXM" in c.value for c in at.caption)


def test_roofline_tab_of_a_tensor_core_step_without_a_gpu_uses_the_published_tensor_peak():
    from test_app import app, assert_clean

    at = app({"preset": "modern-tensorcore-bf16-4096"}, view="Roofline").run(timeout=120)
    assert_clean(at)
    # 2·4096³ FLOPs over 134,217,728 B (A and B in 2 bytes, C in 4) = 1024 FLOP/B; attainable
    # min(989,500 GFLOP/s bfloat16 tensor-core peak, 1024 × 3,350 GB/s) = 989,500.
    assert next(m for m in at.metric if m.label == "Arithmetic intensity").value == "1024.00 FLOP/B"
    attainable = next(m for m in at.metric if m.label == "Attainable")
    assert attainable.value == "989,500 GFLOP/s" and "bfloat16 tensor-core peak" in attainable.help
    assert next(m for m in at.metric if m.label == "Static estimate").value == "100%"
    assert not at.info


def test_roofline_tab_places_a_hopper_kernel_under_the_measured_tensor_roof(monkeypatch):
    import live_fakes
    from live_fakes import fake_measurements, settle
    from test_app import app, assert_clean

    stand_in = Ceilings(60_000.0, 3_000.0, None, 50 << 20, "measured on Fake GPU", (("float16", 900_000.0),))
    monkeypatch.setattr(live_fakes, "fake_ceilings", lambda workload: stand_in)
    fake_measurements(monkeypatch, lambda spec: 200.0)
    at = settle(app({"preset": "hopper-ws-fp16-4096"}, view="Roofline").run(timeout=120))
    assert_clean(at)
    # 4096³ fp16: 1024 FLOP/B; min(900,000, 1024 × 3,000) = 900,000 GFLOP/s attainable. 2·4096³ FLOPs
    # in 200 µs = 687,195 GFLOP/s: 76% of it (the bound, 152.7 µs at the peak, over 200 µs).
    assert next(m for m in at.metric if m.label == "Attainable").value == "900,000 GFLOP/s"
    assert next(m for m in at.metric if m.label == "This setting").value == "76%"
    figure = at.get("plotly_chart")[-1].proto.spec
    assert "float16 tensor-core peak 900,000 GFLOP" in figure and "FP32 peak" not in figure
    assert any("float16 tensor-core peak" in c.value for c in at.caption)


def test_roofline_tab_places_the_measured_setting_and_the_tries(monkeypatch):
    from live_fakes import fake_measurements, settle
    from test_app import THREAD_X, app, assert_clean

    fake_measurements(monkeypatch, lambda spec: 800 / spec.knobs.num_thread_x)  # 50 µs, then 100 µs
    at = settle(app({"preset": "dw-blog-final-96"}, view="Roofline").run())
    assert_clean(at)
    assert next(m for m in at.metric if m.label == "This setting").value == "4%"  # 2 µs bound over 50 µs
    at.sidebar.select_slider(key=THREAD_X).set_value(8).run()
    settle(at)
    assert_clean(at)
    assert next(m for m in at.metric if m.label == "This setting").value == "2%"  # 2 µs over 100 µs
    figure = at.get("plotly_chart")[-1]
    assert "this session's tries" in figure.proto.spec  # the first setting, as a try
    assert any("measured on Fake GPU" in c.value for c in at.caption)


def test_no_roofline_for_tensor_core_inputs_and_the_sentence_says_why():
    fp16 = Matmul(m=64, n=64, k=64, dtype="float16")
    with pytest.raises(ExplorerError, match="No roofline for float16 inputs: .*tensor cores.*cuBLAS"):
        roofline(fp16, CEILINGS)
    assert roofline(Matmul(m=64, n=64, k=64), CEILINGS).ceilings == CEILINGS


def test_a_tensor_core_measurement_has_no_percent_of_the_fp32_roofline():
    from explorer.measure import Measurement
    from explorer.measure.gate import Check
    from explorer.measure.timing import KernelRun, Timing

    right = Check(correct=True, max_error=0.0, tolerance=1e-3, wrong_count=0, first_wrong_index=None)
    run = KernelRun("cuda", "Test GPU", right, Timing((10.0, 10.0, 10.0), 100), CEILINGS, 1.0)
    assert Measurement.of(Matmul(m=64, n=64, k=64), run).percent_of_roofline is not None
    fp16 = Measurement.of(Matmul(m=64, n=64, k=64, dtype="bfloat16"), run)
    assert fp16.ceilings is None and fp16.percent_of_roofline is None and fp16.median_us == 10.0


def test_cli_roofline_of_a_tensor_core_preset_uses_the_tensor_roof_or_says_why_there_is_none(capsys):
    from explorer.cli import main

    assert main(["show", "modern-tensorcore-fp16-4096", "--view", "roofline", "--target", "sm_90", "--json"]) == 0
    data = __import__("json").loads(capsys.readouterr().out)["roofline"]
    assert data["compute_roof"] == "float16 tensor-core" and data["attainable_gflops"] == 989_500
    # The T4 (Turing) has no bfloat16 tensor cores.
    assert main(["show", "modern-tensorcore-bf16-4096", "--view", "roofline", "--target", "sm_75"]) == 2
    assert "No roofline for bfloat16 inputs" in capsys.readouterr().err


# -- the tensor-core roof --------------------------------------------------------------------

TENSOR = Ceilings(1000.0, 100.0, 400.0, 1 << 20, "measured on a test GPU", (("bfloat16", 8000.0), ("float16", 8000.0)))


def test_a_tensor_core_workload_is_bound_by_the_tensor_peak_not_the_fp32_one():
    assert TENSOR.compute_roof(("float16", "float16")) == (8000.0, "float16 tensor-core")
    assert TENSOR.compute_roof(("float32",)) == (1000.0, "FP32")
    # 1e6 FLOPs over 8e5 bytes from L2 (400 GB/s): 2 µs of traffic; 1e6 FLOPs at 8000 GFLOP/s: 0.125 µs.
    assert bound_us(TENSOR, 1_000_000, 800_000, ("float16", "float16")) == pytest.approx(2.0)
    # 1e8 FLOPs: 12.5 µs at the tensor peak (100 µs at the FP32 one).
    assert bound_us(TENSOR, 100_000_000, 800_000, ("bfloat16", "bfloat16")) == pytest.approx(12.5)


def test_a_tensor_core_kernel_s_attainable_rate_is_the_lower_of_peak_and_intensity_times_bandwidth():
    # fp16 64³: 524,288 FLOPs over 2·64²·2 + 64²·4 = 32,768 B = 16 FLOP/B, in L2: 16 × 400 = 6,400 < 8,000.
    small = roofline(Matmul(m=64, n=64, k=64, dtype="float16"), TENSOR)
    assert small.intensity == pytest.approx(16.0) and small.roof == (400.0, "L2-resident")
    assert small.attainable_gflops == pytest.approx(6_400.0)
    assert small.ridge(400.0) == pytest.approx(20.0)  # 8,000 / 400
    # fp16 1024³: 2·1024³ FLOPs over 8 MiB (from HBM) = 256 FLOP/B; 256 × 100 = 25,600 > 8,000: the peak.
    large = roofline(Matmul(m=1024, n=1024, k=1024, dtype="float16"), TENSOR, latency_us=1000.0)
    assert large.intensity == pytest.approx(256.0) and large.roof == (100.0, "HBM")
    assert large.attainable_gflops == pytest.approx(8_000.0)
    # 2,147,483,648 FLOPs in 1000 µs = 2,147 GFLOP/s: 26.8% of 8,000.
    assert large.current.percent_of_attainable == pytest.approx(100 * 2 * 1024**3 / 1e6 / 8_000)
    assert large.to_dict()["compute_roof"] == "float16 tensor-core"
    assert any("float16 tensor-core peak, 8,000 GFLOP/s" in note for note in large.notes)


def test_a_tensor_core_measurement_is_placed_under_the_tensor_roof():
    from explorer.measure import Measurement
    from explorer.measure.gate import Check
    from explorer.measure.timing import KernelRun, Timing

    right = Check(correct=True, max_error=0.0, tolerance=1e-3, wrong_count=0, first_wrong_index=None)
    run = KernelRun("cuda", "Test GPU", right, Timing((1000.0, 1000.0, 1000.0), 1), TENSOR, 1.0)
    fp16 = Measurement.of(Matmul(m=1024, n=1024, k=1024, dtype="float16"), run)
    # The bound: 2·1024³ FLOPs at 8,000 GFLOP/s = 268.4 µs (8 MiB at 100 GB/s: 83.9 µs).
    assert fp16.roofline_us == pytest.approx(2 * 1024**3 / 8_000 / 1e3)
    assert fp16.percent_of_roofline == pytest.approx(100 * 2 * 1024**3 / 8_000 / 1e3 / 1000.0)
    assert "GFLOP/s float16 tensor-core" in fp16.summary()


def test_ceilings_without_the_tensor_peak_say_why_and_old_records_still_load():
    from dataclasses import replace

    not_hopper = replace(CEILINGS, no_tensor_peak="their peak is measured with wgmma, which only Hopper (sm_90) GPUs "
                                                  "have (Test GPU is sm_80)")
    with pytest.raises(ExplorerError, match=r"No roofline for float16 inputs: .*tensor cores, and their peak is "
                                            r"measured with wgmma.*\(Test GPU is sm_80\)\. Compare"):
        roofline(Matmul(m=64, n=64, k=64, dtype="float16"), not_hopper)
    # A record from before the tensor roof: the five figures alone.
    old = Ceilings(**{k: v for k, v in CEILINGS.to_dict().items() if k in ("fp32_gflops", "hbm_gbps", "l2_gbps",
                                                                            "l2_bytes", "source")})
    assert old.tensor_peak("float16") is None and "these ceilings have no tensor-core peak" in str(
        pytest.raises(ExplorerError, old.compute_roof, ("float16",)).value)
    assert old.to_dict()["tensor_gflops"] == {}
    # Published figures: the T4 has float16 tensor cores only.
    with pytest.raises(ExplorerError, match="these ceilings give it for float16 only"):
        published_ceilings("sm_75").compute_roof(("bfloat16", "bfloat16"))


def test_ceiling_rows_list_the_tensor_peaks_or_why_there_are_none():
    from explorer.analysis.roofline import ceiling_rows

    rows = dict(ceiling_rows(TENSOR))
    assert rows["FP32, CUDA cores"] == "1,000 GFLOP/s" and rows["L2-resident"] == "400 GB/s"
    assert rows["float16 tensor cores (float32 accumulation)"] == "8,000 GFLOP/s"
    assert dict(ceiling_rows(CEILINGS))["tensor cores"] == "none: these ceilings have no tensor-core peak"
    assert dict(ceiling_rows(published_ceilings("sm_90a")))["bfloat16 tensor cores (float32 accumulation)"] == (
        "989,500 GFLOP/s")


# -- the Device page's ceilings ------------------------------------------------------------------


def _device_page(at):
    at.run()
    at.switch_page("views/device.py").run()
    return next(dict(zip(d.value["roof"], d.value["figure"], strict=True)) for d in at.dataframe
                if "roof" in d.value)


def test_device_page_lists_the_published_roofs_without_a_gpu_tensor_cores_included():
    from test_app import app, assert_clean

    at = app()
    roofs = _device_page(at)
    assert_clean(at)
    assert roofs["FP32, CUDA cores"] == "67,000 GFLOP/s" and roofs["HBM"] == "3,350 GB/s"
    assert roofs["float16 tensor cores (float32 accumulation)"] == "989,500 GFLOP/s"
    assert any("published figures for H100 SXM" in c.value for c in at.caption)


def test_device_page_says_why_measured_ceilings_have_no_tensor_roof(monkeypatch):
    from live_fakes import fake_measurements, settle
    from test_app import app, assert_clean

    from explorer.live import Live

    a100 = Ceilings(19_000.0, 1_900.0, 5_000.0, 40 << 20, "measured on a stand-in A100",
                    no_tensor_peak="their peak is measured with wgmma, which only Hopper (sm_90) GPUs have "
                                   "(a stand-in A100 is sm_80)")
    fake_measurements(monkeypatch, lambda spec: 10.0)
    monkeypatch.setattr(Live, "latest_ceilings", lambda self: a100)
    at = app()
    roofs = _device_page(settle(at))
    assert_clean(at)
    assert roofs["L2-resident"] == "5,000 GB/s"
    assert roofs["tensor cores"] == ("none: their peak is measured with wgmma, which only Hopper (sm_90) GPUs have "
                                     "(a stand-in A100 is sm_80)")


def test_the_compute_roof_is_the_one_of_the_units_the_template_multiplies_on(capsys):
    """attention_fused converts its float16 inputs and multiplies in float32 on the CUDA cores: its roof is
    the FP32 peak (the tensor cores' drawn dotted); attention_mma multiplies on the tensor cores."""
    from explorer.analysis.roofline import compute_types
    from explorer.cli import main
    from explorer.figures import roofline_figure
    from explorer.measure import Measurement
    from explorer.measure.gate import Check
    from explorer.measure.timing import KernelRun, Timing

    fused, mma = get_preset("attention-cuda-cores-d128").spec, get_preset("attention-mma").spec
    assert fused.workload == mma.workload
    assert compute_types(fused) == ("float32",) and compute_types(mma) == ("float16",) * 3
    w = fused.workload  # 8 × 16 heads × 4 × 4096² × 128 FLOPs = 1.1 TFLOP
    on_cuda_cores = roofline(w, TENSOR, types=compute_types(fused))
    assert on_cuda_cores.compute_roof == (1000.0, "FP32")
    assert on_cuda_cores.unused_tensor_roof == (8000.0, "float16 tensor-core")
    assert on_cuda_cores.current.latency_us == pytest.approx(w.flops / 1000.0 / 1e3)
    assert "converts its float16 inputs to float32 and multiplies them on the CUDA cores" in " ".join(
        on_cuda_cores.notes)
    assert not any("multiplied on the tensor cores" in note for note in on_cuda_cores.notes)
    assert "float16 tensor-core peak 8,000 GFLOP/s (not used here)" in [t.name for t in
                                                                          roofline_figure(on_cuda_cores).data]
    on_tensor_cores = roofline(w, TENSOR, types=compute_types(mma))
    assert on_tensor_cores.compute_roof == (8000.0, "float16 tensor-core")
    assert on_tensor_cores.unused_tensor_roof is None
    # Ceilings without a tensor peak still give the CUDA-core template its roofline.
    assert roofline(w, CEILINGS, types=compute_types(fused)).compute_roof == (1000.0, "FP32")
    # A measurement is placed under the same roof.
    right = Check(correct=True, max_error=0.0, tolerance=1e-3, wrong_count=0, first_wrong_index=None)
    run = KernelRun("cuda", "Test GPU", right, Timing((2e6, 2e6, 2e6), 1), TENSOR, 1.0)
    assert Measurement.of(w, run, compute_types(fused)).roofline_us == pytest.approx(w.flops / 1000.0 / 1e3)
    assert main(["show", "attention-cuda-cores-d128", "--view", "roofline", "--target", "sm_90", "--json"]) == 0
    assert __import__("json").loads(capsys.readouterr().out)["roofline"]["compute_roof"] == "FP32"
