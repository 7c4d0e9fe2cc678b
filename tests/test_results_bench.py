"""docs/results.md and bench/results/runs/: a target's row replaced where it stands, the others kept, the concerns
in their order; each bench script that checks a target writes its row from a made-up report (no GPU)."""
import json
from pathlib import Path

import docs_section  # bench/ (pytest's pythonpath)
import pytest
from docs_section import Result, read_results, read_section, write_result, write_section


@pytest.fixture
def doc(tmp_path, monkeypatch):
    """docs/results.md and bench/results/runs/ in a temporary folder, for every script."""
    monkeypatch.setattr(docs_section, "RESULTS_DOC", tmp_path / "results.md")
    monkeypatch.setattr(docs_section, "RUNS", tmp_path / "runs")
    return tmp_path / "results.md"


def row(concern, target, now="1.0 s", met="met", limit="", machine="NVIDIA H200, 16 cores", date="2026-12-04"):
    return Result(concern, target, "≤ 1 s", now, met, machine, date, "python bench/x.py --write",
                  docs_section.run_file("x"), limit)


def targets(path):
    return {concern: [cells[0] for cells in rows] for concern, rows in read_results(path).items()}


def test_a_targets_row_is_replaced_where_it_stands_and_the_others_kept(doc):
    write_result(row("class", "a: knob → code p95", "2.0 s", "missed by 1.000 s"), row("class", "b"),
                 row("kernels", "matmul 1024x1024x1024"))
    write_result(row("class", "a: knob → code p95", "0.9 s"))
    assert targets(doc) == {"class": ["a: knob → code p95", "b"], "kernels": ["matmul 1024x1024x1024"]}
    a, b = read_results(doc)["class"]
    assert a[:4] == ["a: knob → code p95", "≤ 1 s", "0.9 s", "met"] and b[2] == "1.0 s"
    assert a[-2:] == ["`python bench/x.py --write`", "[x](../bench/results/runs/x.md)"]


def test_the_concerns_keep_their_order_and_a_new_target_goes_to_the_end_of_its_own(doc):
    write_result(row("tests", "t"), row("kernels", "k1"), row("class", "c1"))
    write_result(row("kernels", "k2"), row("class", "c2"))
    text = doc.read_text()
    headings = [line for line in text.splitlines() if line.startswith("## ")]
    assert headings == ["## The class server", "## Kernels against PyTorch, cuDNN and cuBLAS", "## The test suite"]
    assert targets(doc) == {"class": ["c1", "c2"], "kernels": ["k1", "k2"], "tests": ["t"]}
    assert text.startswith(docs_section.HEADER)
    with pytest.raises(ValueError, match="unknown concern 'speed'"):
        write_result(row("speed", "s"))


def test_what_limits_a_missed_target_stays_until_a_run_meets_it_or_names_another(doc):
    write_result(row("measuring", "m", "9 ms", "missed by 4 ms", limit="the graph replay: 28 ms"))
    write_result(row("measuring", "m", "8 ms", "missed by 3 ms"))
    assert read_results(doc)["measuring"][0][4] == "the graph replay: 28 ms"
    write_result(row("measuring", "m", "7 ms", "missed by 2 ms", limit="the check: 3 ms"))
    assert read_results(doc)["measuring"][0][4] == "the check: 3 ms"
    write_result(row("measuring", "m", "4 ms"))
    assert read_results(doc)["measuring"][0][4] == ""


def test_a_cell_keeps_its_pipes_and_the_page_says_where_its_rows_were_measured(doc):
    write_result(row("app", "a | b", now="x\n y"), row("app", "c", machine="the 2-core CPU machine", date="2026-11-21"),
                 row("app", "d", date="2026-12-01"))
    assert [cells[:3] for cells in read_results(doc)["app"]][0] == ["a \\| b", "≤ 1 s", "x y"]
    assert ("Where the rows were measured: NVIDIA H200, 16 cores: 2 rows, 2026-12-01 to 2026-12-04; the 2-core CPU "
            "machine: 1 row, 2026-11-21.") in doc.read_text()
    write_result(row("app", "a | b", now="z"))
    assert [cells[0] for cells in read_results(doc)["app"]] == ["a \\| b", "c", "d"]


def test_a_run_goes_to_its_own_file_replaced_by_the_next_and_a_document_keeps_its_other_sections(doc, tmp_path):
    write_section("kernels", "## Kernels\n\nfirst\n")
    write_section("kernels", "## Kernels\n\nsecond")
    assert (tmp_path / "runs" / "kernels.md").read_text() == "## Kernels\n\nsecond\n"
    assert read_section("kernels") == "## Kernels\n\nsecond" and read_section("nothing") is None
    page = tmp_path / "page.md"
    page.write_text("# Page\n\nintro\n")
    write_section("a", "A1", page)
    write_section("b", "B", page)
    write_section("a", "A2", page)
    assert page.read_text() == ("# Page\n\nintro\n\n<!-- a:start -->\nA2\n<!-- a:end -->\n\n"
                                "<!-- b:start -->\nB\n<!-- b:end -->\n")
    assert read_section("b", page) == "<!-- b:start -->\nB\n<!-- b:end -->"


# -- each script's rows, from made-up reports -----------------------------------------------------------------------


def class_report(code_p95=0.994, latency_p95=4.111, generator_limited=False):
    return {"students": 100, "seconds": 180, "intended_moves_per_s": 16.7, "delivered_moves_per_s": 15.8,
            "errors": [], "lost_moves": [{}], "overlapping_runs": 0, "knob_to_code": {"p95": code_p95},
            "knob_to_latency": {"p95": latency_p95}, "limits": ["workers"], "limited_by": "the workers at ≥ 90%",
            "generator_limited": generator_limited}


def test_classroom_writes_a_row_per_goal_with_the_demand_it_made_and_what_limited_it():
    import classroom_report

    name = classroom_report.class_name(100, ["reduction", "rowwise", "attention"], ("reduce-1",), False)
    code, latency = classroom_report.goal_results(class_report(), {"knob_to_code.p95": 1, "knob_to_latency.p95": 3},
                                                  name, "NVIDIA H200, 16 cores", "2026-12-04", "python bench/c.py",
                                                  "bench/results/runs/classroom-x.md")
    assert code.target == "100 students, reduction + rowwise + attention: knob → code p95"
    assert (code.goal, code.met, code.limit) == ("≤ 1 s", "met", "")
    assert code.now == ("0.994 s (180 s; 15.8 of 16.7 moves/s delivered; 0 errors, 1 moves without code, 0 kernel "
                        "runs overlapping)")
    assert latency.target == "100 students, reduction + rowwise + attention: knob → latency p95"
    assert (latency.met, latency.limit) == ("missed by 1.111 s", "the workers at ≥ 90%")
    saturated = classroom_report.goal_results(class_report(generator_limited=True), {"knob_to_code.p95": 1}, name,
                                              "m", "d", "c")
    assert saturated[0].met == "no verdict: the load generator was saturated"
    assert classroom_report.class_name(30, [], ("modern-tensorcore-fp16-4096",), True, gpus=2) == \
        "30 students, opening `modern-tensorcore-fp16-4096` at once, 2 GPUs"
    first = classroom_report.goal_results({**class_report(), "open_to_code": {"p50": 0.5}}, {"open_to_code.p50": 2},
                                          classroom_report.class_name(1, [], ("dw-blog-final-96",), False), "m", "d",
                                          "c")
    assert first[0].target == "1 student, the steps dw-blog-final-96: link → code p50"


def test_knee_writes_the_knee_as_a_measured_figure(tmp_path, doc, monkeypatch):
    import knee
    from test_knee_bench import report

    paths = []
    for i, r in enumerate([report(30, 5.0, 0.4, 1.2), report(50, 8.2, 0.7, 2.9), report(100, 9.5, 1.4, 10.0)]):
        paths.append(tmp_path / f"knee-{i}.json")
        paths[-1].write_text(json.dumps(r))
    monkeypatch.setattr("sys.argv", ["knee.py", *map(str, paths), "--family", "modern", "--machine", "NVIDIA H200",
                                     "--write", "knee-modern"])
    knee.main()
    (cells,) = read_results(doc)["class"]
    assert cells[0] == "the knee of one server: modern" and cells[3] == "measured"
    assert cells[2].startswith("Knee: 8.2 moves/s delivered with 50 students")
    assert cells[-1] == "[knee-modern](../bench/results/runs/knee-modern.md)"
    assert (tmp_path / "runs" / "knee-modern.md").read_text().startswith("### The knee of one server: modern")


def test_the_knob_space_check_writes_its_rows_from_the_outcomes_it_saved():
    import knob_space_check as bench

    def outcome(status, template="softmax", detail=""):
        return {"template": template, "workload": "w", "knobs": {}, "status": status, "detail": detail}

    header = {"date": "2026-12-04", "device": "NVIDIA H200", "cpus": 16, "command": "python bench/knob_space_check.py"}
    saved = {"header": header, "sanitized": [
        {"template": "softmax", "tool": "racecheck", "reports": 0, "check": "correct (max error 0)"},
        {"template": "softmax", "tool": "memcheck", "reports": 0, "check": "correct (max error 0)"}],
        "outcomes": [outcome(bench.RIGHT)] * 3 + [outcome(bench.REFUSED)] * 2
        + [outcome(bench.WRONG, "attention_fused", "took longer than 20 s")] * 2}
    spaces, sample = bench.results(saved)
    assert spaces.now == ("3 of 5 accepted settings right, 2 wrong, 0 failed to build (2 refused, 0 accepted but not "
                          "checked)")
    assert spaces.met == "missed: 2 wrong or failed"
    assert spaces.limit == "wrong: attention_fused, took longer than 20 s (2×)"
    assert (spaces.machine, spaces.run) == ("NVIDIA H200, 16 cores", "bench/results/runs/knob-space.md")
    assert sample.met == "met" and sample.now.startswith("1 templates: 0 racecheck hazards, 0 memcheck errors")


def test_the_questions_check_writes_whether_every_question_was_reproduced():
    import questions_check as bench

    header = {"device": "NVIDIA H200", "cpus": 16, "date": "2026-12-04", "command": "python bench/questions_check.py"}
    rows = [{"preset": "a", "verdict": bench.REPRODUCED}, {"preset": "b", "verdict": bench.NOT_REPRODUCED}]
    assert bench.result(rows, header).now == "1 of 2 reproduced"
    assert bench.result(rows, header).met == "missed: 1 not reproduced (b)"
    assert bench.result(rows[:1], header).met == "met" and bench.result(rows, header).run == "docs/questions.md"


def test_the_worker_phases_write_a_row_per_budget(tmp_path, doc):
    import worker_phases
    from test_worker_phases import LINES

    log = tmp_path / "runs.log"
    log.write_text("\n".join(LINES) + "\n")
    assert worker_phases.main([str(log), "--machine", "NVIDIA H200, 16 cores", "--write", "class"]) == 0
    full, quick = read_results(doc)["measuring"]
    assert full[0] == "the GPU held per measurement, every template (full budget, a class's run log)"
    assert full[2:4] == ["0 of 1 templates within it; the furthest attention_unfused, 95.0 ms for a 10,000.0 µs "
                         "kernel (2.7× its bound)", "missed by 1 templates"]
    assert quick[3] == "met" and quick[-1] == "[worker-phases-class](../bench/results/runs/worker-phases-class.md)"


def test_the_diagnosis_grades_write_the_shares_against_their_goals():
    import diagnosis_agreement as bench

    from explorer.agreement import StepGrade

    def grade(lesson, agrees, speedup=None):
        return StepGrade(lesson, 2, "a", "b", (), "", agreeing=1 if agrees else None, measured_speedup=speedup)

    # "bad": 3 moves not suggested, and one suggested that the GPU measured slower (×0.8): it agrees strictly only.
    grades = [grade("good", True)] * 4 + [grade("bad", False)] * 3 + [grade("bad", True, 0.8)] + [grade("few", False)]
    gpu = [{"verdict": "faster"}, {"verdict": "near its limit"}, {"verdict": "slower"}, {"measured": False}]
    overall, per_lesson, strict, strict_lessons, on_gpu = bench.results(grades, gpu, "m", "2026-12-04",
                                                                         "python bench/diagnosis_agreement.py")
    assert overall.target.startswith("lesson agreement against the GPU") and strict.target == bench.STRICT_GRADE
    assert (overall.now, overall.met) == ("4 of 9 (44%)", "missed by 36 points")
    assert (per_lesson.now, per_lesson.met) == ("below it: bad 0 of 4 (0%)", "missed in 1 of 2 lessons")
    assert (strict.now, strict.met) == ("5 of 9 (56%)", "missed by 24 points")
    assert (strict_lessons.now, strict_lessons.met) == ("below it: bad 1 of 4 (25%)", "missed in 1 of 2 lessons")
    assert per_lesson.target == "lesson agreement against the GPU, in every lesson with ≥ 3 graded steps"
    assert (on_gpu.now, on_gpu.met) == ("2 of 3 (67%)", "missed by 18 points")
    assert len(bench.results(grades, None, "m", "d", "c")) == 4  # without --try-on-gpu: no GPU row


def test_the_calibration_states_its_held_out_errors():
    import calibrate_diagnosis

    c = {"machine": "NVIDIA H200", "date": "2026-12-04", "command": "python bench/calibrate_diagnosis.py --measure",
         "settings": 200, "pairs": 113, "speedup_error": 0.0981, "settings_error": 0.4236,
         "before": {"settings_error": 0.38}}
    speedup, setting = calibrate_diagnosis.results(c, "explorer/analysis/diagnosis/calibration.json")
    assert (speedup.now, speedup.met) == ("±10% over 113 measured pairs (200 settings)", "measured")
    assert setting.now == "±42% over 200 settings (±38% with the models' constants as assumed)"


def test_the_kernel_table_writes_each_benchmarks_goal_in_its_current_words():
    import kernels

    stored = {"workload": "matmul 1024x1024x1024", "best": "best-matmul-async-1024", "tvm_us": 59.03,
              "torch_us": 55.85, "ratio": 59.03 / 55.85, "tvm_tflops": 36.4, "torch_tflops": 38.5,
              "percent_of_roofline": 58.0, "goal": "an older goal", "met": "yes", "failed": [], "date": "2026-11-25"}
    (r,) = kernels.results("NVIDIA H100 80GB HBM3", [stored])
    assert (r.concern, r.target, r.goal) == ("kernels", "matmul 1024x1024x1024", "at most cuBLAS's time (TF32 off)")
    assert r.met == "missed: 1.06× PyTorch's time"
    assert r.now == "`best-matmul-async-1024` 59.03 µs, PyTorch 55.85 µs (1.06×; 36.4 / 38.5 TFLOP/s; 58% of roofline)"
    assert r.command == "python bench/kernels.py --only 'matmul 1024x1024x1024'" and r.date == "2026-11-25"


def test_the_app_benches_write_their_budgets():
    import analysis_speed
    import build_latency

    app = {"conv2d_async": (0.572, 0.040), "matmul": (0.100, 0.020)}
    uncached, browser_uncached, cached, browser_cached = build_latency.results(app, (0.386, 0.214), "cpu", "d", "c")
    assert (uncached.now, uncached.met) == ("572 ms (conv2d_async)", "missed by 72 ms")
    assert (cached.now, cached.met, cached.goal) == ("40 ms (conv2d_async)", "met", "≤ 300 ms")
    assert (browser_uncached.met, browser_cached.now) == ("met", "214 ms")
    assert len(build_latency.results(app, None, "cpu", "d", "c")) == 2

    class Preset:
        id = "dw-blog-vthread-case2"

    r = analysis_speed.result([(Preset, {"total": 83.6}), (Preset, {"total": 12.0})], [], "cpu", "2026-11-21")
    assert (r.now, r.met) == ("83.6 ms (dw-blog-vthread-case2; 2 presets)", "met")
    assert analysis_speed.result([(Preset, {"total": 250.0})], ["x: no"], "cpu", "d").met == \
        "missed by 50.0 ms, 1 did not build"


def test_the_measuring_benches_write_their_agreements_and_rates(monkeypatch, tmp_path):
    import ceilings
    import gpu_agreement
    import measure_gpu
    import remeasure_agreement

    r = remeasure_agreement.result([{"preset": "a", "quick": 1.0, "again": 10.2, "idle": 10.0},
                                    {"preset": "b", "quick": None, "again": 5.25, "idle": 5.0}], "m", "d", "c")
    assert (r.now, r.met) == ("1 of 2 presets within it", "missed by 1 presets")
    r = gpu_agreement.result([("a", [10.04, 9.92]), ("b", [68.39, 67.99])], "2 × NVIDIA H100", "d", "c")
    assert (r.now, r.met) == ("2 of 2 presets within it (the widest spread 1.2%)", "met")
    rows = [{"preset": "best-dw-96", "correct": True, "device": "NVIDIA H100 80GB HBM3", "percent": 42.0,
             "graph_percent": 101.0}, {"preset": "best-x", "correct": False}]
    r = ceilings.result(rows, "2026-11-23")
    assert (r.now, r.met, r.machine) == ("1 of 2 placed; above a ceiling: best-dw-96; wrong: best-x", "missed",
                                         "NVIDIA H100 80GB HBM3")
    results = {"environment": {"gpu": "NVIDIA H100 80GB HBM3", "machine": "x86_64, 16 CPUs"}, "date": "2026-11-21",
               "command": "python bench/measure_gpu.py", "knob_changes": {
                   "median_s": 0.40, "max_s": 1.01, "rows": [{"counted": True}, {"counted": False}]},
               "ncu": [{"agrees": True, "difference": -0.042}, {"error": "no ncu"}]}
    knob, ncu = measure_gpu.results_rows(results)
    assert (knob.now, knob.met) == ("0.40 s, max 1.01 s over 1 changes", "met")
    assert (ncu.now, ncu.met) == ("1 of 1 presets (the widest 4.2%)", "met")
    import explorer.cuda_compile  # noqa: F401  (its cache folder is read once, before sweep_throughput sets one)

    monkeypatch.setenv("EXPLORER_CUDA_CACHE", str(tmp_path))
    import sweep_throughput

    r = sweep_throughput.goal_result(584.0, 272.0, 300, "NVIDIA H100 80GB HBM3", 16, "2026-11-21", "c")
    assert (r.now, r.met) == ("584 a minute (272 valid; 300 points, 16 compile processes)", "met")
    assert sweep_throughput.goal_result(150.0, 70.0, 300, "g", 16, "d", "c").met == "missed by 50 a minute"


def test_the_lessons_claims_are_read_from_the_documents_summary_line():
    import lessons_gpu

    text = ("# The tutorials' claims\n\n**57 timing claims reproduced, 5 not reproduced, 0 without a measurement; "
            "242 structural claims reproduced, 0 not.**\n")
    header = {"device": "NVIDIA H100 80GB HBM3", "date": "2026-11-26", "command": "python bench/lessons_gpu.py"}
    timing, structural = lessons_gpu.results(text, header, lessons_gpu.DOC)
    assert (timing.now, timing.met) == ("57 of 62 reproduced; 5 not, each with the reason it may differ; 0 without "
                                        "a measurement", "missed by 5 claims")
    assert (structural.now, structural.met, structural.run) == ("242 of 242", "met", "docs/lessons-gpu.md")


def test_the_page_in_the_repository_is_under_400_lines_and_every_run_it_links_exists():
    root = Path(docs_section.ROOT)
    text = (root / "docs" / "results.md").read_text()
    assert len(text.splitlines()) < 400 and text.startswith(docs_section.HEADER)
    for rows in read_results(root / "docs" / "results.md").values():
        for cells in rows:
            for link in filter(None, [cells[-1].partition("](../")[2].rstrip(")")]):
                assert (root / link).exists(), link
    assert not (root / "docs" / "benchmarks.md").exists()
