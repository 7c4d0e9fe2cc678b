"""`python -m explorer show PRESET --view banks|tiling|resources [--json]`."""
import json

from explorer.cli import main


def test_banks_view_json(capsys):
    assert main(["show", "dw-blog-final-96", "--set", "num_thread_y=1", "--set", "num_thread_x=32",
                 "--set", "num_vthread_x=1", "--view", "banks", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)["banks"]
    loads = [a for a in data["kernels"][0]["accesses"] if a["op"] == "load" and a["buffer"] == "PaddedInput_shared"]
    assert loads and all(a["conflicts"] == 0 for a in loads)
    assert data["assumptions"]


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
