"""Lessons: steps in tutorial order, knobs changed from the previous step, and the
verdict logic for timing claims (fed with hand-made timings: no GPU needed)."""
import pytest

from explorer import lesson_reasons as R
from explorer import lessons as L
from explorer.build import build
from explorer.errors import ExplorerError, PresetError
from explorer.presets import Comparison, all_lessons, all_presets, get_preset, load_file


def test_one_lesson_per_file_with_steps_in_file_order():
    assert [lesson.id for lesson in L.lessons()] == [f.id for f in all_lessons() if f.steps] != []
    for lesson in L.lessons():
        assert [s.preset.step for s in lesson.steps] == list(range(1, len(lesson.steps) + 1))
        assert [s.number for s in lesson.steps] == list(range(1, len(lesson.steps) + 1))
        assert lesson.steps[0].previous is None
        for before, step in zip(lesson.steps, lesson.steps[1:], strict=False):
            assert step.previous is before.preset


def test_changed_knobs_and_shape_from_the_previous_step():
    blog = L.get_lesson("depthwise_blog")
    first = blog.step(1)
    assert first.preset.id == "dw-blog-channel-21" and first.changed_knobs == () and first.changed_shape == ()
    _, case2 = L.lesson_of("dw-blog-threads-case2")
    assert case2.changed_knobs == ("num_thread_y",)  # 8×32 → 4×32
    assert case2.changed_shape == ()
    _, blocking = L.lesson_of("dw-blog-blocking-64")  # after one block per channel on 96×96
    assert blocking.changed_knobs == ("blocking_h", "blocking_w")
    assert blocking.changed_shape == ("height", "width")
    _, fused = L.lesson_of("dw-blog-fused-96")
    assert fused.changed_knobs == ("fuse_epilogue",)


def test_step_numbers_out_of_range_open_the_nearest_step():
    blog = L.get_lesson("depthwise_blog")
    assert blog.step(0) is blog.steps[0]
    assert blog.step(10_000) is blog.steps[-1]


def test_unknown_lesson_or_preset_is_a_readable_error():
    with pytest.raises(PresetError, match="No lesson named 'nope'; the lessons are: .*depthwise_blog"):
        L.get_lesson("nope")
    with pytest.raises(PresetError, match="No preset named 'nope'"):
        L.lesson_of("nope")


# -- ratios and verdicts, with hand-computed numbers --------------------------------------

CASE1, CASE2 = get_preset("dw-blog-threads-case1"), get_preset("dw-blog-threads-case2")
FINAL, KERNEL5 = get_preset("dw-blog-final-96"), get_preset("dw-blog-kernel5-96")


def test_time_ratios():
    faster = Comparison("x", "faster")
    assert L.ratio(faster, CASE2, 8.8, CASE1, 9.7) == pytest.approx(9.7 / 8.8)  # 1.102
    assert L.holds(faster, 9.7 / 8.8)
    assert not L.holds(faster, 1.04)  # inside the ±5% noise band
    slower = Comparison("x", "slower")
    assert L.ratio(slower, CASE1, 17.7, CASE2, 8.8) == pytest.approx(17.7 / 8.8)
    same = Comparison("x", "same_speed")
    assert L.holds(same, L.ratio(same, FINAL, 91.5, FINAL, 90.9))  # 0.993
    assert not L.holds(same, 1.2)
    assert L.holds(same, 1.2, L.ClaimThresholds(tolerance=0.25))


def test_no_slower_holds_when_faster_or_within_the_noise_band():
    no_slower = Comparison("x", "no_slower")
    # The H100's warp-specialized kernel against the one without a producer: 199.1 vs 199.4 µs.
    assert L.ratio(no_slower, CASE2, 199.1, CASE1, 199.4) == pytest.approx(199.4 / 199.1)
    assert L.holds(no_slower, 199.4 / 199.1)
    assert L.holds(no_slower, 2.0)  # much faster is still no slower
    assert L.holds(no_slower, 0.96)  # 4% slower: inside the ±5% band
    assert not L.holds(no_slower, 0.94)
    assert not L.holds(no_slower, 0.96, L.ClaimThresholds(tolerance=0.02))


def test_flop_rate_ratio_across_workloads():
    # 5×5 does 25/9 of the 3×3 work: 128.9 µs vs 90.9 µs is (25/9)·90.9/128.9 = 1.959× the FLOP rate.
    more = Comparison("x", "more_gflops")
    assert L.ratio(more, KERNEL5, 128.9, FINAL, 90.9) == pytest.approx(25 / 9 * 90.9 / 128.9)
    # and the GTX 1080's rates themselves: 2·256·96·96·9 FLOP in 90.9 µs = 467.2 GFLOP/s
    assert L.gflops(FINAL, 90.9) == pytest.approx(2 * 256 * 96 * 96 * 9 / 90.9e3)
    fewer = Comparison("x", "fewer_gflops")  # the same pair seen from the 3×3 side
    assert L.ratio(fewer, FINAL, 90.9, KERNEL5, 128.9) == pytest.approx(25 / 9 * 90.9 / 128.9)


def test_at_least_sets_the_bar():
    tenfold = Comparison("x", "faster", at_least=10.0)
    assert not L.holds(tenfold, 9.9)
    assert L.holds(tenfold, 10.0)


def test_verdicts_side_by_side():
    (comparison,) = CASE2.compare
    check = L.check_comparison(CASE2, comparison)
    assert check.other.id == "dw-blog-threads-case1"
    assert (check.tutorial.this_us, check.tutorial.other_us, check.tutorial.where) == (8.8, 9.7, "GTX 1080")
    assert check.tutorial.holds and check.measured is None
    assert check.verdict == L.NEEDS_GPU
    reproduced = L.check_comparison(CASE2, comparison, {CASE2.id: 3.0, CASE1.id: 4.0}, where="H100")
    assert reproduced.measured.ratio == pytest.approx(4 / 3) and reproduced.verdict == L.REPRODUCED
    assert reproduced.measured.where == "H100"
    not_reproduced = L.check_comparison(CASE2, comparison, {CASE2.id: 4.0, CASE1.id: 4.0})
    assert not_reproduced.verdict == L.NOT_REPRODUCED
    failed = L.check_comparison(CASE2, comparison, {CASE1.id: 4.0}, errors={CASE2.id: "wrong result"})
    assert failed.verdict == L.NOT_REPRODUCED and failed.measure_error == "wrong result"
    assert reproduced.sentence(CASE2) == "Step 8 is faster than step 7: Threads 8×32 on 32×32 (thread table, case 1)."


def test_a_step_without_a_time_in_the_tutorial_still_gets_a_measured_verdict():
    unfused = get_preset("dw-blog-unfused-96")
    (comparison,) = unfused.compare
    check = L.check_comparison(unfused, comparison, {unfused.id: 30.0, "dw-blog-final-96": 10.0})
    assert check.tutorial is None and check.verdict == L.REPRODUCED


def test_overall_verdict():
    assert L.overall([]) is None
    assert L.overall([L.REPRODUCED, L.REPRODUCED]) == L.REPRODUCED
    assert L.overall([L.REPRODUCED, L.NEEDS_GPU]) == L.NEEDS_GPU
    assert L.overall([L.NEEDS_GPU, L.NOT_REPRODUCED]) == L.NOT_REPRODUCED


def test_every_comparison_agrees_with_the_tutorials_own_numbers():
    """The presets' expectations are the tutorials' claims: where a tutorial gives both
    times, its numbers must satisfy the relation the preset expects."""
    checked = 0
    for preset in all_presets().values():
        for check in L.step_checks(preset):
            if check.tutorial is not None:
                assert check.tutorial.holds, (preset.id, check.comparison, check.tutorial)
                checked += 1
    assert checked >= 15


def test_presets_to_time_adds_the_compared_presets_once():
    needed = L.presets_to_time([get_preset("dw-blog-final-96"), get_preset("dw-blog-vthread-case3")])
    assert [p.id for p in needed] == [
        "dw-blog-final-96", "dw-blog-vthread-case1", "dw-blog-vthread-case2", "dw-blog-vthread-case3",
    ]
    assert L.presets_to_time([get_preset("dw-blog-channel-21")]) == ()  # no timing claim


def test_measure_presets_measures_each_spec_once_and_keeps_errors():
    calls = []

    def measurer(spec):
        calls.append(spec)
        if spec.workload.height == 64:
            raise ExplorerError("The kernel computed a wrong result.")
        return 12.5

    # vthread case 1 is the blocking step's schedule again: one measurement for both.
    presets = [get_preset(i) for i in ("dw-blog-blocking-96", "dw-blog-vthread-case1", "dw-blog-channel-64")]
    seen = []
    times, errors = L.measure_presets(presets, measurer, on_done=lambda p, us, err: seen.append((p.id, us, err)))
    assert len(calls) == 2
    assert times == {"dw-blog-blocking-96": 12.5, "dw-blog-vthread-case1": 12.5}
    assert errors == {"dw-blog-channel-64": "The kernel computed a wrong result."}
    assert [s[0] for s in seen] == [p.id for p in presets]


# -- the preset format's comparison keys -------------------------------------------------

BASE = """[lesson]
title = "T"

[[preset]]
id = "a"
title = "A"
source = "s"
template = "depthwise_blog"
claim = "c"
workload = { kind = "depthwise_conv2d", height = 32, width = 32 }
"""


@pytest.mark.parametrize(
    "extra, message",
    [
        ('compare = [ { with = "a", expect = "quicker" } ]', r"'expect' = one of faster, slower"),
        ('compare = [ { with = "a", expect = "faster", by = 2 } ]', r"compare: unknown key\(s\) by"),
        ('compare = [ { with = "a", expect = "faster", at_least = 0.5 } ]', r"'at_least' must be a ratio of 1 or more"),
        ('compare = [ { with = "a", expect = "no_slower", at_least = 1.5 } ]', r"'no_slower' .* takes no 'at_least'"),
        ('reported = [ { what = "x", value_us = 1.0, hardware = "T4", this_schedule = "yes" } ]',
         "must be true or false"),
        ('reported = [ { what = "x", value_us = 1.0, hardware = "T4", this_schedule = true },'
         ' { what = "y", value_us = 2.0, hardware = "T4", this_schedule = true } ]', "only one reported figure"),
    ],
)
def test_bad_comparisons_fail_loudly(tmp_path, extra, message):
    path = tmp_path / "bad.toml"
    path.write_text(BASE + extra + "\n")
    with pytest.raises(PresetError, match=message):
        load_file(path)


def test_a_comparison_with_an_unknown_preset_fails(tmp_path):
    (tmp_path / "t.toml").write_text(BASE + 'compare = [ { with = "zzz", expect = "faster" } ]\n')
    with pytest.raises(PresetError, match="compares itself with 'zzz', which is not another preset"):
        all_lessons.__wrapped__(tmp_path)


# -- static claims ------------------------------------------------------------------------


def test_a_wrong_static_claim_is_not_reproduced(tmp_path):
    path = tmp_path / "t.toml"
    # One block per 32×32 channel: (34·34 + 9)·4 = 4,660 bytes of shared memory, not 4,096.
    path.write_text(BASE + "knobs = { blocking_h = 0, blocking_w = 0, num_thread_y = 8, num_thread_x = 8, "
                           "num_vthread_x = 1 }\nstatic = { shared_bytes = 4096, kernels = 1 }\n")
    (preset,) = load_file(path).presets
    right, wrong = L.static_checks(preset, "h100")  # in STATIC_FACTS order
    assert (wrong.fact, wrong.claimed, wrong.actual, wrong.verdict) == ("shared_bytes", 4096, 4660, L.NOT_REPRODUCED)
    assert (right.fact, right.actual, right.verdict) == ("kernels", 1, L.REPRODUCED)


def test_an_unknown_static_fact_fails_loudly(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(BASE + "static = { registers = 32 }\n")
    with pytest.raises(PresetError,
                       match=r"bad.toml preset 'a' static: unknown key\(s\) registers; allowed: .*shared_bytes"):
        load_file(path)


def test_evidence_without_a_gpu():
    # The blog's case 2 on 96×96: 8×8 threads, vthreads (1, 4), 34×34 tile + filter.
    ev = R.evidence(build(get_preset("dw-blog-vthread-case2").spec, "h100"))
    assert (ev.shared_bytes, ev.bank_conflict_degree, ev.outputs_per_thread) == (4660, 1, 16)
    assert ev.registers == "not compiled" and ev.blocks_per_sm == 32  # 64 threads: the 32-block limit


def test_fact_formatting():
    assert L.format_fact((10, 3)) == "10 × 3"
    assert L.format_fact((("DepthwiseConv2d",), ("Relu",))) == "DepthwiseConv2d; Relu"
    assert L.format_fact(38452) == "38,452"
    assert L.format_fact(3.75) == "3.75"


# -- the Lessons page ---------------------------------------------------------------------

PAGE_MAIN = str(__import__("pathlib").Path(__file__).resolve().parent.parent / "app" / "main.py")


def lessons_page(query):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(PAGE_MAIN, default_timeout=60)
    at.switch_page("views/lessons.py")  # as a link to /lessons?lesson=…&step=… opens it
    at.query_params.update(query)
    return at.run()


@pytest.mark.parametrize("lesson", [lesson.id for lesson in L.lessons()])
def test_the_page_opens_every_step_of_every_lesson_from_its_link(lesson):
    for step in L.get_lesson(lesson).steps:
        at = lessons_page({"lesson": lesson, "step": str(step.number)})
        assert not at.exception and not at.error, [e.value for e in (*at.exception, *at.error)]
        assert at.header[0].value == f"Step {step.number} of {len(L.get_lesson(lesson).steps)}: {step.preset.title}"
        page = "\n".join(m.value for m in at.markdown)
        assert step.preset.claim in [i.value for i in at.info]
        for check in L.static_checks(step.preset):
            assert check.label in page
        if step.preset.compare:  # no GPU here: every timing claim, and so the step, waits for one
            assert "needs a GPU" in page
        elif step.preset.static:  # structural claims only: the step's verdict is theirs
            assert "reproduced" in page and "not reproduced" not in page


def test_the_page_highlights_the_changed_knobs_and_links_to_the_explorer():
    at = lessons_page({"lesson": "depthwise_blog", "step": "8"})
    page = "\n".join(m.value for m in at.markdown)
    assert "Changed from step 7: **num_thread_y**" in page
    assert ":orange-background[**num_thread_y**] | :orange-background[**4**] | 8 |" in page
    (link,) = at.get("link_button")
    assert "preset=dw-blog-threads-case2" in link.proto.url and "knob.num_thread_y=4" in link.proto.url
    assert {m.label: m.value for m in at.metric}["Tutorial · GTX 1080"] == "8.8 vs 9.7 µs"


def test_verdict_badges_cover_every_verdict():
    from explorer.style import VERDICT_BADGES

    assert set(VERDICT_BADGES) == {L.REPRODUCED, L.NOT_REPRODUCED, L.NEEDS_GPU}


def test_every_step_explains_itself_and_every_figure_names_its_hardware():
    for preset in all_presets().values():
        assert preset.explanation, preset.id
        for figure in preset.reported:
            assert figure.hardware and figure.value_us and figure.value_us > 0, (preset.id, figure)


# -- bench/lessons_gpu.py's document, from hand-made measurements ------------------------


def bench_module():
    import importlib.util

    path = __import__("pathlib").Path(__file__).resolve().parent.parent / "bench" / "lessons_gpu.py"
    spec = importlib.util.spec_from_file_location("lessons_gpu", path)
    module = importlib.util.module_from_spec(spec)
    __import__("sys").modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_h100_document_states_each_claim_with_both_numbers_and_a_verdict():
    bench = bench_module()
    times = {"dw-blog-threads-case1": 9.0, "dw-blog-threads-case2": 8.8, "dw-blog-threads-case3": 12.0,
             "dw-blog-threads-case4": 20.0}
    measured = {pid: R.MeasuredStep(pid, us, 100.0, 30.0, 2.0, "", R.evidence(build(get_preset(pid).spec, "h100")))
                for pid, us in times.items()}
    header = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-21", "command": "python bench/lessons_gpu.py",
              "elapsed_s": 60.0, "tvm": "0.27.0.post1", "target": "sm_90a", "repeats": 20, "min_repeat_ms": 1,
              "torch": "PyTorch 2.11"}
    text = bench.render([L.get_lesson("depthwise_blog")], measured, {}, 132, header, "h100")
    # case 2 vs case 1: 9.0 / 8.8 = ×1.02, inside ±5%: not reproduced, and the document says why.
    (case2,) = [line for line in text.splitlines() if line.startswith("| 8 | Step 8 is faster")]
    assert "| 8.8 vs 9.7 µs (×1.10) | 8.80 vs 9.00 µs (×1.02) | **not reproduced** |" in case2
    assert "less than ±5%" in case2 and "a few microseconds" in case2
    # case 3 slower than case 2 (12.0 / 8.8 = ×1.36) and case 4 slower than case 3 (×1.67): reproduced.
    assert "| 12.00 vs 8.80 µs (×1.36) | **reproduced** |" in text
    assert "**2 timing claims reproduced, 1 not reproduced, 0 without a measurement; 16 structural claims " \
           "reproduced, 0 not.**" in text
    assert "| 8 | `dw-blog-threads-case2` | 8.8 µs (GTX 1080) | 8.80 | 100 | 30% | — | — |" in text


def test_the_h100_script_measures_each_schedule_once_and_keeps_wrong_kernels_out(monkeypatch):
    from types import SimpleNamespace

    import explorer.measure

    bench = bench_module()
    calls = []

    def fake_measure(spec, *, target, settings):
        calls.append(spec)
        wrong = spec.workload.height == 64
        check = SimpleNamespace(describe=lambda: "wrong at index (0, 0, 0, 0)")
        return SimpleNamespace(correct=not wrong, check=check, median_us=None if wrong else 10.0, gflops=4.2,
                               percent_of_roofline=40.0, roofline_us=4.0)

    monkeypatch.setattr(explorer.measure, "measure", fake_measure)
    presets = [get_preset(i) for i in ("dw-blog-blocking-96", "dw-blog-vthread-case1", "dw-blog-channel-64")]
    lines = []
    measured = bench.measure_presets(presets, "h100", None, lines.append)
    assert len(calls) == 2  # vthread case 1 is the blocking step's schedule
    assert measured["dw-blog-vthread-case1"].median_us == 10.0 and measured["dw-blog-vthread-case1"].blocks == 2304
    wrong = measured["dw-blog-channel-64"]
    assert wrong.median_us is None and wrong.gflops is None and wrong.error.startswith("wrong result: wrong at index")
    assert wrong.evidence.shared_bytes == 17460  # static evidence even without a time
    assert lines[-1].startswith("dw-blog-channel-64: no time (wrong result")


def test_measuring_a_step_on_the_page_fills_in_the_verdicts(monkeypatch):
    """With a GPU (here a stand-in measurer), the button times the step and the steps it is
    compared with, and each timing claim gets its verdict with both pairs of numbers."""
    stand_in_gpu(monkeypatch, {"dw-blog-threads-case1": 4.0, "dw-blog-threads-case2": 3.0})
    at = lessons_page({"lesson": "depthwise_blog", "step": "8"})
    assert "needs a GPU" in "\n".join(m.value for m in at.markdown)
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["This GPU · Fake GPU"] == "3.00 vs 4.00 µs"  # 4.0 / 3.0 = ×1.33: faster, as claimed
    assert "reproduced" in "\n".join(m.value for m in at.markdown)
    assert "needs a GPU" not in "\n".join(m.value for m in at.markdown)
    assert "Why it may differ" not in "\n".join(m.value for m in at.markdown)  # reproduced: nothing to explain


def test_a_claim_this_gpu_does_not_reproduce_says_why_it_may_differ(monkeypatch):
    # Step 8 in 4.0 µs against step 7 in 4.1 µs: ×1.025, inside the ±5% noise band, and both a
    # few µs (each at 2 / 4.0 = 50% and 2 / 4.1 = 49% of the fake roofline: not near it).
    stand_in_gpu(monkeypatch, {"dw-blog-threads-case1": 4.1, "dw-blog-threads-case2": 4.0})
    at = lessons_page({"lesson": "depthwise_blog", "step": "8"})
    at.button[0].click().run()
    assert not at.exception, [e.value for e in at.exception]
    page = "\n".join(m.value for m in at.markdown)
    assert "not reproduced" in page
    assert ("**Why it may differ:** The two differ by less than ±5% here, within run-to-run noise; both take a few "
            "microseconds, where launch cost and the last wave of blocks weigh as much as the schedule.") in page


def stand_in_gpu(monkeypatch, fake_us):
    """A server whose GPU ("Fake GPU") takes the given µs for each named preset (the page
    measures through the server's one queue)."""
    from server_fakes import fake_measurements

    by_spec = {get_preset(pid).spec: us for pid, us in fake_us.items()}
    fake_measurements(monkeypatch, lambda spec: by_spec[spec])