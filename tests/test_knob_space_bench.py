"""bench/knob_space_check.py without a GPU: the plan, the draws and their outcomes (stand-ins for the compile and
the GPU's check), the document, compute-sanitizer's reports read, the dry run and the race's confirmation up to
where it needs a GPU."""
import concurrent.futures

import knob_space_check as bench  # bench/ (pytest's pythonpath)
import pytest

from explorer.build import Spec
from explorer.errors import InvalidKnobs
from explorer.schedules import TEMPLATES
from explorer.search.grid import Grid
from explorer.workloads import Sum

SUM = Sum(n=1 << 20)
SPACE = Grid.whole(Spec("reduce_rfactor", SUM, TEMPLATES["reduce_rfactor"].knobs()))  # 6 × 11 × 3 = 198 points


def refuse_vector_4(spec):
    return InvalidKnobs("vector 4 refused") if spec.knobs.vector == 4 else "library.so"


def wrong_at_64_threads(spec, library):
    assert library == "library.so"
    return (bench.WRONG, "wrong at index (0,)") if spec.knobs.threads == 64 else (bench.RIGHT, "")


def run(spaces, **options):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        return bench.check_spaces(spaces, refuse_vector_4, wrong_at_64_threads, pool, **options)[0]


def test_a_whole_space_is_drawn_to_its_end_and_each_setting_checked_once():
    outcomes = run([bench.Space(SPACE, whole=True, wanted=None)])
    assert len({o.spec for o in outcomes}) == len(outcomes) == 198
    statuses = [o.status for o in outcomes]
    # vector = 4: a third refused; threads = 64 (1 of 6) with vector 1 or 2: 11 × 2 wrong; the rest right.
    assert (statuses.count(bench.REFUSED), statuses.count(bench.WRONG), statuses.count(bench.RIGHT)) == (66, 22, 110)


def test_a_sampled_space_stops_at_its_accepted_sample_and_the_budget_stops_every_draw():
    outcomes = run([bench.Space(SPACE, whole=False, wanted=5)], in_flight=1)
    checked = [o for o in outcomes if o.status in (bench.RIGHT, bench.WRONG)]
    assert len(checked) == 5 and len(outcomes) == 5 + sum(o.status == bench.REFUSED for o in outcomes)
    space = bench.Space(SPACE, whole=True, wanted=None)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        assert bench.check_spaces([space], refuse_vector_4, wrong_at_64_threads, pool, budget_s=0) == ([], [space])


def test_the_document_has_a_table_per_template_and_the_link_of_each_wrong_setting():
    spaces = [bench.Space(SPACE, whole=True, wanted=None)]
    outcomes = run(spaces)
    wrong = next(o for o in outcomes if o.status == bench.WRONG)
    racy = bench.Sanitized(wrong.spec, "racecheck", 1, "RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)",
                           "correct (max error 0 ≤ tolerance 1)")
    header = {"date": "2026-12-05", "device": "NVIDIA H200", "elapsed_s": 300.0, "cpus": 16, "seed": 0,
              "tvm": "0.27.0.post1", "command": "python bench/knob_space_check.py"}
    text = bench.render(spaces, outcomes, [], [racy], header)
    assert "**132 accepted settings checked through the gate: 110 right, 22 wrong**; 66 refused" in text
    assert "### reduce_rfactor" in text
    assert "| sum n=1,048,576 | 198 points, whole | 198 | 132 | 110 | 22 | 66 | 0 |" in text
    assert "racecheck: 1 reported (RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings))" in text
    assert f"- wrong: sum n=1,048,576 `{bench.link(wrong.spec)}`: wrong at index (0,)" in text
    assert "knob.threads=64" in bench.link(wrong.spec)
    assert "198 points, whole, cut short by --budget-s |" in bench.render(spaces, outcomes, spaces, [], header)


RACECHECK = """\
========= COMPUTE-SANITIZER
CHECK correct (max error 9.31e-10 ≤ tolerance 1.13e-06)
========= Error: Race reported between Write access at main_kernel+0x4e0 in kernel.cu:40
=========     and Read access at main_kernel+0x5f0 in kernel.cu:45 [248 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""
MEMCHECK = """\
========= COMPUTE-SANITIZER
CHECK correct (max error 9.31e-10 ≤ tolerance 1.13e-06)
========= ERROR SUMMARY: 0 errors
"""


def test_compute_sanitizer_s_reports_are_counted_and_its_summary_kept():
    spec = SPACE.base
    racy = bench.read_sanitizer(spec, "racecheck", RACECHECK)
    assert (racy.reports, racy.summary) == (1, "RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)")
    assert racy.check.startswith("correct") and "Race reported" in racy.tail
    clean = bench.read_sanitizer(spec, "memcheck", MEMCHECK)
    assert (clean.reports, clean.summary, clean.tail) == (0, "ERROR SUMMARY: 0 errors", "")
    crashed = bench.read_sanitizer(spec, "memcheck", "========= COMPUTE-SANITIZER\nTraceback ...\n")
    assert (crashed.summary, crashed.check) == ("no summary", "did not run to its end")


def test_the_dry_run_builds_the_draws_at_the_lessons_shapes(capsys):
    assert bench.main(["--dry-run", "--only", "softmax", "--whole-up-to", "0", "--sample", "2", "--workers", "0",
                       "--list"]) == 0
    out = capsys.readouterr().out
    assert "softmax 2048x32000 float16" in out and "softmax 4096x4096 float32" in out
    assert "432 points (sample of 2): 2 accepted" in out and "4 accepted settings would be checked" in out
    assert out.count("softmax ?template=softmax") == 4


def test_the_sanitizer_sample_is_the_first_accepted_at_a_small_shape():
    (spec,) = bench.sanitizer_sample(["softmax"], 1, seed=0)
    assert spec.workload == bench.SMALL["softmax"][0]


def test_the_race_confirmation_builds_the_old_statistics_and_stops_without_a_gpu(capsys, monkeypatch):
    monkeypatch.setattr(bench, "_gpu", lambda: False)
    assert bench.racecheck_before() == bench.NO_GPU_EXIT
    out = capsys.readouterr()
    assert "row statistics in shared memory before 6e8f0d9: True, now: False" in out.out
    assert "needs a CUDA GPU" in out.err


@pytest.mark.parametrize("argv", [["--only", "softmax"], []])
def test_without_a_gpu_the_check_says_where_to_run_it(argv, capsys, monkeypatch):
    monkeypatch.setattr(bench, "_gpu", lambda: False)
    assert bench.main(argv) == bench.NO_GPU_EXIT
    assert "run this on the GPU machine, or use --dry-run" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(bench.sanitizer_path() is None, reason="needs compute-sanitizer")
def test_racecheck_finds_the_old_row_statistics_race_and_none_now():
    spec = bench.SMALL["softmax"][0]
    spec = Spec("softmax", spec, TEMPLATES["softmax"].knobs(threads=64, rows_per_block=2, fusion="fused"))
    before, now = bench.sanitize(spec, "racecheck", old=True), bench.sanitize(spec, "racecheck")
    assert before.reports > 0, before.tail
    assert now.reports == 0 and now.check.startswith("correct"), now.tail
