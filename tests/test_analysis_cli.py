"""`python -m explorer show PRESET --view ANALYSIS [--json]`: every analysis of the registry
(explorer/analyses.py), and banks, tiling, resources, counters in detail."""
import json
from pathlib import Path

import pytest

from explorer.analyses import ANALYSES
from explorer.analysis import ncu
from explorer.cli import main
from explorer.presets import get_preset

NCU_CAPTURE = (Path(__file__).parent / "data" / "ncu_raw_threads_32x1.csv").read_text()  # of dw-blog-threads-case4


@pytest.fixture
def recorded_ncu(monkeypatch):
    """Nsight Compute stands in with a recorded profile of one launch of main_kernel."""
    monkeypatch.setattr(ncu, "profile", lambda spec, metrics=(), **_: ncu.parse_ncu_csv(NCU_CAPTURE))


@pytest.mark.parametrize("name", list(ANALYSES))
def test_every_analysis_is_a_view_in_text_and_json(name, capsys, recorded_ncu):
    analysis = ANALYSES[name]
    preset = "dw-blog-threads-case4" if analysis.applies(get_preset("dw-blog-threads-case4").spec.template_def) \
        else "reduce-3-sequential"  # the tree of a sum only
    assert main(["show", preset, "--view", name]) == 0
    text = capsys.readouterr().out
    assert text.strip()
    assert main(["show", preset, "--view", name, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["view"] == name and data[name] is not None


@pytest.mark.parametrize("name,preset", [("tree", "attention-hopper"), ("vthread", "reduce-3-sequential")])
def test_a_view_of_an_analysis_that_does_not_describe_the_template_says_why(name, preset, capsys):
    assert main(["show", preset, "--view", name]) == 2
    why = ANALYSES[name].not_applicable(get_preset(preset).spec.template_def)
    assert why and capsys.readouterr().err.strip() == f"error: {why}"


def test_counters_view_puts_each_counter_beside_the_model(capsys, recorded_ncu):
    assert main(["show", "dw-blog-threads-case4", "--view", "counters"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "kernel main_kernel: counter, Nsight Compute, model, agreement"
    (load,) = [line.split() for line in lines if line.strip().startswith("shared load bank conflicts")]
    assert load[-2:] == ["0", "DISAGREE"] and load[-3] == "11,520"  # the recorded launch against the bank model
    assert main(["show", "dw-blog-threads-case4", "--view", "counters", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["counters"]["main_kernel"]
    duration = next(r for r in rows if r["name"] == "kernel duration")
    assert duration["measured"] == 7_552 and duration["unit"] == "ns"


def test_banks_view_json(capsys):
    assert main(["show", "dw-blog-final-96", "--set", "num_thread_y=1", "--set", "num_thread_x=32",
                 "--set", "num_vthread_x=1", "--view", "banks", "--json"]) == 0
    everything = json.loads(capsys.readouterr().out)
    data = everything["banks"]
    loads = [a for a in data["kernels"][0]["accesses"] if a["op"] == "load" and a["buffer"] == "PaddedInput_shared"]
    assert loads and all(a["conflicts"] == 0 for a in loads)
    assert data["assumptions"]
    (kernel,) = everything["races"]["kernels"]  # the race check beside the bank model
    assert kernel["races"] == [] and kernel["checked"] == 4 and everything["races"]["assumptions"]


def test_banks_view_leads_with_the_race_check(capsys):
    assert main(["show", "reduce-5-unroll-last-warp", "--view", "banks"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:2] == ["kernel main_kernel: no shared-memory race among 17 accesses checked",
                         "kernel main_kernel_1: no shared-memory race among 17 accesses checked"]
    assert lines[-5] == "Race check assumptions:"


def test_tiling_and_resources_views_text(capsys):
    assert main(["show", "dw-blog-final-96", "--view", "tiling"]) == 0
    assert "block reads 1156" in capsys.readouterr().out
    assert main(["show", "dw-blog-final-96", "--view", "resources"]) == 0
    assert "occupancy" in capsys.readouterr().out


def test_invalid_choice_exits_2(capsys):
    assert main(["show", "dw-blog-final-96", "--set", "num_thread_x=3", "--view", "banks"]) == 2
    assert capsys.readouterr().err.startswith("error:")


def test_ncu_without_nsight_compute_is_one_line(capsys):
    import pytest

    from explorer.analysis.ncu import ncu_path

    if ncu_path() is not None:
        pytest.skip("ncu is installed here; the GPU test in test_analysis_ncu.py covers it")
    assert main(["show", "dw-blog-final-96", "--view", "banks", "--ncu"]) == 2
    assert "ncu" in capsys.readouterr().err
