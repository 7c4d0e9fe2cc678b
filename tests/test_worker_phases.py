"""bench/worker_phases.py: the per-template medians of the measuring worker's phases, by hand."""
import worker_phases  # bench/worker_phases.py (pytest's pythonpath)

LINES = [
    # A quick measurement of a 50 µs kernel: 0.5 + 0.1 + 0.4 + 2.0 = 3.0 ms held, its target 5.15 ms.
    # Held: 3, 103 and 4 ms, median 4 (not the sum of the phases' medians, 3).
    "1 100 200 softmax softmax 4096x4096 float32 | load=0.50 data=0.00 copy=0.10 check=0.40 time=2.00 "
    "| data=kept budget=quick kernel_us=50.00 repeats=3 launches=10",
    # The first of its workload: 100 ms of data made, 103 ms held.
    "1 300 400 softmax softmax 4096x4096 float32 | load=0.50 data=100.00 copy=0.10 check=0.40 time=2.00 "
    "| data=made budget=quick kernel_us=52.00 repeats=3 launches=10",
    "1 500 600 softmax softmax 4096x4096 float32 | load=0.50 data=0.00 copy=0.10 check=0.40 time=3.00 "
    "| data=kept budget=quick kernel_us=54.00 repeats=3 launches=10",
    # A wrong kernel: checked, never timed.
    "1 700 800 softmax softmax 4096x4096 float32 | load=0.50 data=0.00 copy=0.10 check=0.40 "
    "| data=kept budget=quick check=wrong",
    # A full measurement of a slow kernel: 3 × 10 ms + 5 = 35 ms allowed, 95 held.
    "1 900 1000 attention_unfused attention B4 H32 N2048 d64 | load=1.00 data=0.00 copy=0.20 check=12.00 "
    "time=81.80 | data=kept budget=full kernel_us=10000.00 repeats=8 launches=1",
    # An older line (before the phases were split): no facts.
    "1 50 60 softmax softmax 4096x4096 float32 | load=2.0 upload=40.0 check_and_time=30.0",
]


def test_each_templates_phases_and_the_target(tmp_path):
    log = tmp_path / "runs.log"
    log.write_text("\n".join(LINES) + "\n")
    rows = worker_phases.phase_rows(worker_phases.read_log(str(log), since_ns=100))
    attention, softmax = rows
    assert (softmax["template"], softmax["budget"], softmax["runs"], softmax["wrong"]) == ("softmax", "quick", 3, 1)
    assert softmax["phases_ms"] == {"load": 0.5, "data": 0.0, "copy": 0.1, "check": 0.4, "time": 2.0}
    assert softmax["held_ms"] == 4.0 and softmax["kernel_us"] == 52.0 and softmax["made"] == 1
    assert softmax["target_ms"] == 3 * 0.052 + 5 and softmax["met"] is True
    assert softmax["within"] == 2 / 3 and softmax["wrong_held_ms"] == 1.0
    assert attention["held_ms"] == 95.0 and attention["target_ms"] == 35.0 and attention["met"] is False
    text = worker_phases.describe(rows)
    assert "| softmax | quick | 3 | 0.50 | 0.00 | 0.10 | 0.40 | 2.00 | 4.00 | 52.0 | 5.16 | yes | 67% | 1 | 1 (1.0) |" \
        in text
    assert "**no** (2.7×)" in text
    old = [row for row in worker_phases.phase_rows(worker_phases.read_log(str(log))) if row["budget"] == "-"]
    assert [(row["phases_ms"], row["kernel_us"], row["met"]) for row in old] == \
        [({"load": 2.0, "upload": 40.0, "check_and_time": 30.0}, None, None)]  # an older line: no facts


def test_the_profile_takes_every_step_and_its_neighbours_once():
    import worker_profile

    from explorer.lessons import get_lesson

    steps = [step.preset.spec for step in get_lesson("rowwise").steps]
    alone = worker_profile.settings_to_profile(["rowwise"], 0)
    assert alone == list(dict.fromkeys(steps))
    more = worker_profile.settings_to_profile(["rowwise"], 2)
    assert more[0] == steps[0] and set(alone) < set(more) and len(more) == len(set(more))
    assert all(sum(a != b for a, b in zip(vars(s.knobs).values(), vars(steps[0].knobs).values(), strict=True)) == 1
               for s in more[1:3])  # the first step's two neighbours follow it, one knob moved each


def test_the_profile_tells_the_table_each_measurements_budget_and_kernel_time():
    import worker_profile

    old = "1 100 200 softmax softmax 4096x4096 float32 | load=2.0 upload=40.0 check_and_time=30.0"  # an older worker
    records = [{"budget": "quick", "kernel_us": 50.0, "error": None, "line": old},
               {"budget": "full", "kernel_us": None, "error": None, "line": LINES[3]},
               {"budget": "full", "kernel_us": None, "error": "crashed", "line": None}]
    runs = worker_profile.runs_of(records)
    assert [run.facts for run in runs] == [{"budget": "quick", "kernel_us": "50.00"},
                                           {"data": "kept", "budget": "full", "check": "wrong"}]


def test_each_measurement_is_paired_with_its_line_of_the_run_log(tmp_path, monkeypatch):
    """The worker (a stand-in here) writes one line per measurement: the profile pairs each with its
    setting, its budget and the time measured, a crash with no line."""
    from types import SimpleNamespace

    import worker_profile

    from explorer.errors import ExplorerError
    from explorer.measure import measurement

    log = tmp_path / "runs.log"

    class StandInGPU:
        def warm_up(self, first, target):
            pass

        def measure(self, trial):
            if trial.kernel.knobs.num_thread_x == 16:
                raise ExplorerError("The kernel crashed the measuring process.")
            with open(log, "a") as out:
                out.write(f"1 100 200 {trial.kernel.template} x | check=0.50 time=1.00 | data=kept\n")
            return SimpleNamespace(correct=True, median_us=7.0)

        def close(self):
            pass

    monkeypatch.setattr(measurement, "LocalGPU", StandInGPU)
    from explorer.presets import get_preset

    spec = get_preset("dw-blog-final-96").spec
    libraries = {spec.with_knobs(num_thread_x=x): f"/{x}.so" for x in (8, 16)}
    records = worker_profile.measure_all(libraries, [("quick", None), ("full", None)], log, lambda message: None)
    assert [(r["budget"], r["kernel_us"], r["error"] is not None, r["line"] is not None) for r in records] == \
        [("quick", 7.0, False, True), ("quick", None, True, False),
         ("full", 7.0, False, True), ("full", None, True, False)]
