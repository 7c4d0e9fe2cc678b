"""bench/profile_summary.py on a hand-made collapsed-stack profile."""
import profile_summary  # bench/ (pytest's pythonpath)

PROFILE = """\
run (threading.py:1);page (app/views/explorer.py:10);highlight (explorer/highlight.py:5) 3
run (threading.py:1);page (app/views/explorer.py:10);sidebar (app/session.py:7) 1
run (threading.py:1);recv (support/popen_pool.py:9) 4

"""


def test_samples_are_counted_per_function_inclusive_of_callees():
    total, counts = profile_summary.inclusive(PROFILE.splitlines())
    assert total == 8
    assert counts["page (views/explorer.py)"] == 4 and counts["highlight (explorer/highlight.py)"] == 3
    text = profile_summary.table(total, counts, top=3, possible=16)
    assert text.splitlines()[0] == "8 samples of 16 possible (50%)"
    assert "| `recv (support/popen_pool.py)` | 50.0% |" in text
    assert "threading.py" not in text  # frames every stack shares are left out
