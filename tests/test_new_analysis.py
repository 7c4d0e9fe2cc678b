"""A new analysis needs no edit outside its own module and one entry of the registry.

This module plays the newcomer (the twin of tests/test_new_workload.py): it writes a toy
analysis, the blocks each kernel of a build launches, as a contributor would in
explorer/analysis/, registers it for the test only (the registry's dict, monkeypatched), and
shows that the command line and the Explorer's tabs pick it up: the app shows it with its
default panel (the figure, then the text), with no panel written for it.
"""
import json

import plotly.graph_objects as go
import pytest
from test_app import app, assert_clean

from app import code_view, panels
from explorer import analyses
from explorer.analyses import Analysis
from explorer.build import build
from explorer.cli import main
from explorer.presets import get_preset

# -- what a contributor writes -------------------------------------------------------------


def blocks_per_kernel(built) -> dict[str, int]:
    """The thread blocks each kernel launches."""
    return {k.name: k.blocks for k in built.kernels}


def format_blocks(blocks: dict[str, int], built) -> str:
    return "\n".join(f"{kernel}: {n:,} blocks" for kernel, n in blocks.items())


def blocks_figure(blocks: dict[str, int]) -> go.Figure:
    return go.Figure(go.Bar(x=list(blocks), y=list(blocks.values())))


BLOCKS = Analysis("blocks", "Blocks", blocks_per_kernel, format_blocks, blocks_figure)

# -- the test: registered, and picked up everywhere ------------------------------------------

PRESET = "dw-blog-final-96"


@pytest.fixture
def registered(monkeypatch):
    """The one entry a contributor adds to explorer/analyses.py, for this test only."""
    monkeypatch.setitem(analyses.ANALYSES, BLOCKS.name, BLOCKS)


def expected_blocks() -> dict[str, int]:
    return {k.name: k.blocks for k in build(get_preset(PRESET).spec).kernels}


def test_the_command_line_shows_it(registered, capsys):
    (kernel, blocks), = expected_blocks().items()
    assert main(["show", PRESET, "--view", "blocks"]) == 0
    assert capsys.readouterr().out.strip() == f"{kernel}: {blocks:,} blocks"
    assert main(["show", PRESET, "--view", "blocks", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["blocks"] == {kernel: blocks}


def test_without_its_entry_there_is_no_such_view(capsys):
    with pytest.raises(SystemExit):
        main(["show", PRESET, "--view", "blocks"])
    assert "invalid choice: 'blocks'" in capsys.readouterr().err


def test_the_explorer_shows_it_in_a_tab_of_its_own(registered):
    assert BLOCKS.name not in panels.PANELS  # no panel written: the default one shows it
    at = app({"preset": PRESET}, view="Blocks").run()
    assert_clean(at)
    titles = [t.label for t in at.tabs][len(code_view.VIEWS):]
    template = get_preset(PRESET).spec.template_def  # every analysis that describes it: the new one too
    assert titles[-1] == "Blocks" and len(titles) == sum(a.applies(template) for a in analyses.ANALYSES.values())
    tab = at.tabs[len(code_view.VIEWS) + len(titles) - 1]
    (kernel, blocks), = expected_blocks().items()
    assert [c.value for c in tab.code] == [f"{kernel}: {blocks:,} blocks"]
    (chart,) = tab.get("plotly_chart")
    assert json.loads(chart.proto.spec)["data"][0]["y"] == [blocks]
