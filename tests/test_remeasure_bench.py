"""bench/remeasure_agreement.py's table, from hand-made figures (the measuring runs on a GPU)."""
import remeasure_agreement as bench  # bench/ (pytest's pythonpath)


def test_the_table_says_how_far_each_measurement_is_from_the_idle_one():
    table = [{"preset": "a", "quick": 10.5, "again": 10.2, "idle": 10.0},  # +2.0%: agrees
             {"preset": "b", "quick": None, "again": None, "idle": 20.0},  # timed in full at once
             {"preset": "c", "quick": 5.0, "again": 5.25, "idle": 5.0}]  # +5.0%: does not
    text = bench.describe(table)
    assert "| a | 10.50 | 10.20 | 10.00 | +2.0% | +5.0% |" in text
    assert "| b | — (full at once) | — | 20.00 | — | — |" in text
    assert "| c | 5.00 | 5.25 | 5.00 | +5.0% | +0.0% |" in text
    assert text.endswith("Full re-measurements within 3% of the idle one: 1 of 2.")
