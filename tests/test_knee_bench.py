"""bench/knee.py: the knee of a server from classes of growing size, judged per class."""
import knee  # bench/knee.py (pytest's pythonpath)


def report(students, delivered, code_p95, latency_p95, lost=0, generator_busy=0.0):
    return {"students": students, "seconds": 90, "moves": int(delivered * 90),
            "intended_moves_per_s": students / 6, "delivered_moves_per_s": delivered,
            "knob_to_code": {"p95": code_p95}, "knob_to_latency": {"p95": latency_p95},
            "lost_moves": [{}] * lost, "limits": ["workers"] if latency_p95 > 3 else [],
            "generator": [{"mean_cores": 0.3, "busy_share": generator_busy}],
            "generator_limited": generator_busy >= 0.25}


def test_each_class_is_judged_by_both_p95_targets_and_its_lost_moves():
    assert knee.verdict(report(30, 5.0, 0.4, 1.2)) == "met"
    assert knee.verdict(report(50, 8.0, 1.3, 2.0)) == "code p95 > 1 s"
    assert knee.verdict(report(100, 9.0, 0.9, 3.5, lost=2)) == "latency p95 > 3 s; 2 moves without code"
    assert knee.verdict(report(30, 5.0, 0.4, 1.2, generator_busy=0.5)).startswith("no verdict")


def test_the_knee_is_the_busiest_class_that_met_the_targets():
    reports = [report(30, 5.0, 0.4, 1.2), report(50, 8.2, 0.7, 2.9), report(100, 9.5, 1.4, 10.0)]
    assert knee.knee(reports) == ("Knee: 8.2 moves/s delivered with 50 students met both p95 targets; "
                                  "the next class, 100 students, broke it.")
    # A class that met the targets only because its generator could not make the load is not the knee.
    reports[1] = report(50, 8.2, 0.7, 2.9, generator_busy=0.9)
    assert knee.knee(reports) == ("Knee: 5.0 moves/s delivered with 30 students met both p95 targets; "
                                  "the next class, 100 students, broke it.")


def test_no_class_met_the_targets():
    assert knee.knee([report(50, 8.0, 1.3, 4.0), report(30, 5.0, 1.1, 3.2)]) == (
        "No class met both p95 targets: the knee lies below 30 students (5.0 moves/s delivered).")


def test_the_table_has_one_row_per_class_smallest_first():
    rows = knee.table([report(100, 9.5, 1.4, 10.0), report(30, 5.0, 0.4, 1.2)])
    assert rows[2].startswith("| 30 | 5.0 | 5.0 | 0.40 | 1.20 | 0 of 450 | 0.30, 0% | none | met |")
    assert rows[3].startswith("| 100 | 16.7 | 9.5 | 1.40 | 10.00 | 0 of 855 |")
