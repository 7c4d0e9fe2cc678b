"""python -m explorer: listing, views, and one-line errors with exit status 2."""
import json

import pytest

from explorer.cli import main


def test_presets_lists_ids_templates_and_workloads(capsys):
    assert main(["presets", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    by_id = {r["id"]: r for r in rows}
    assert by_id["dw-blog-final-96"]["template"] == "depthwise_blog"
    assert "96,96" in by_id["dw-blog-final-96"]["workload"]


def test_knobs_shows_value_domain_and_help(capsys):
    assert main(["knobs", "dw-blog-final-96", "--set", "num_thread_x=32", "--json"]) == 0
    knobs = {k["name"]: k for k in json.loads(capsys.readouterr().out)["knobs"]}
    assert knobs["num_thread_x"]["value"] == "32"
    assert "64" in knobs["num_thread_x"]["allowed"] and knobs["num_thread_x"]["help"]


def test_show_cuda_follows_the_knobs(capsys):
    assert main(["show", "dw-blog-final-96", "--view", "cuda", "--set", "num_thread_x=8", "--set",
                 "num_vthread_x=4"]) == 0
    assert "__launch_bounds__(64)" in capsys.readouterr().out


def test_show_tir_and_lowered(capsys):
    assert main(["show", "dw-blog-final-96", "--view", "tir"]) == 0
    assert 'T.thread_binding(16, thread="threadIdx.x")' in capsys.readouterr().out
    assert main(["show", "dw-blog-final-96", "--view", "lowered", "--json"]) == 0
    assert "T.tvm_storage_sync" in json.loads(capsys.readouterr().out)["lowered"]


def test_invalid_knob_exits_2_with_one_line_and_no_traceback(capsys):
    # main() itself, as ``python -m explorer`` runs it (explorer/__main__.py; test_classroom_bench.py starts
    # ``python -m explorer serve``): an exception it let out would fail this test, one it printed is in stderr.
    assert main(["show", "dw-blog-final-96", "--view", "cuda", "--set", "num_thread_y=64", "--set", "num_thread_x=64",
                 "--set", "blocking_h=64", "--set", "blocking_w=64", "--set", "num_vthread_x=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "4096 threads" in err


def test_unknown_preset_and_malformed_set(capsys):
    assert main(["show", "no-such-preset", "--view", "cuda"]) == 2
    assert "No preset named 'no-such-preset'" in capsys.readouterr().err
    assert main(["show", "dw-blog-final-96", "--view", "cuda", "--set", "num_thread_x"]) == 2
    assert "knob=value" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["sweep", "dw-blog-channel-21", "--grid", "num_thread_x=4,8"],
                                     ["tune", "dw-blog-channel-21", "--trials", "2"]])
@pytest.mark.parametrize("workers", ["0", "-1", "two"])
def test_a_number_of_processes_below_one_is_refused_with_one_line(command, workers, capsys):
    with pytest.raises(SystemExit) as exited:
        main([*command, "--workers", workers])
    assert exited.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.endswith(f"argument --workers: a number of processes is a whole number of 1 or more, not '{workers}'")


def test_a_reader_that_stops_early_gets_no_traceback():
    """``python -m explorer presets | head -1``: the pipe closes after the first line."""
    import fcntl
    import subprocess
    import sys
    from pathlib import Path

    listing = subprocess.Popen([sys.executable, "-m", "explorer", "presets"], cwd=Path(__file__).parent.parent,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # A pipe of one page: the listing (9 KB) no longer fits whole, so the command is still writing when the
    # reader stops, however fast it runs (in a 64 KB pipe it could end first, with 0).
    fcntl.fcntl(listing.stdout.fileno(), fcntl.F_SETPIPE_SZ, 4096)
    assert listing.stdout.readline()
    listing.stdout.close()
    errors = listing.stderr.read().decode()
    assert listing.wait(60) == 141 and errors == ""
