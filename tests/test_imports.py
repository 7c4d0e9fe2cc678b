"""The project's import structure: no circle between the modules of explorer/ and app/, and
no project module imported inside a function (the usual way to hide a circle). The edges
are read from the source (explorer/devtools/import_graph.py), as docs/imports.md draws them."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from explorer.devtools import import_graph
from explorer.devtools.import_graph import Import, box, box_edges, circles, imports, mermaid, modules, reduced

ROOT = Path(__file__).resolve().parent.parent

# Function-local imports of project modules that must stay local, each with its reason.
# (Third-party imports are not checked: torch, for one, is imported where a kernel is timed.)
LOCAL_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}
# What the app may import of the class server: its API (and the package, which Python imports first).
SERVER_API = {"explorer.server", "explorer.server.api"}


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_the_reader_resolves_each_form_of_import(tmp_path):
    root = write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from . import b\nfrom .sub import c\nimport pkg.sub.d\nimport os\n",
        "pkg/b.py": "from .a import name\n\ndef f():\n    from .sub.c import g\n",
        "pkg/sub/__init__.py": "from ..b import x\n",
        "pkg/sub/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..a import A\n",
        "pkg/sub/d.py": "from .. import a\n",
    })
    assert set(modules(root, ["pkg"])) == {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c", "pkg.sub.d"}
    found = {(i.importer, i.imported, i.local) for i in imports(root, ["pkg"])}
    assert found == {
        ("pkg.a", "pkg.b", False), ("pkg.a", "pkg.sub.c", False), ("pkg.a", "pkg.sub.d", False),
        ("pkg.a", "pkg.sub", False),  # Python runs pkg/sub/__init__.py before pkg.sub.c and pkg.sub.d
        ("pkg.b", "pkg.a", False), ("pkg.b", "pkg.sub.c", True), ("pkg.b", "pkg.sub", True),  # inside f
        ("pkg.sub", "pkg.b", False), ("pkg.sub.d", "pkg.a", False),
        # pkg.sub.c: only under TYPE_CHECKING, which never runs
    }
    # pkg.a -> pkg.sub (its __init__) -> pkg.b -> pkg.a, a circle through a package's __init__; and pkg.a <-> pkg.sub.d
    assert circles((i.importer, i.imported) for i in imports(root, ["pkg"])) == [
        ["pkg.a", "pkg.b", "pkg.sub", "pkg.sub.d"]]


def test_circles_are_the_groups_that_import_one_another():
    edges = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d"), ("d", "e"), ("e", "d"), ("f", "a")]
    assert circles(edges) == [["a", "b", "c"], ["d", "e"]]
    assert circles([("a", "b"), ("b", "c")]) == []


@pytest.fixture(scope="module")
def found() -> list[Import]:
    """The project's imports, read from its source once for this module's tests."""
    return imports()


def test_no_import_circle_in_explorer_or_app(found):
    """Every import counts, a function-local one too: it closes the circle when it runs."""
    assert len(found) > 100  # the reader found the project's imports
    assert circles((i.importer, i.imported) for i in found) == []


def test_no_arrow_points_back_up_between_the_drawings_boxes(found):
    """The boxes of docs/imports.md are layers: no box imports one that imports it back, directly or
    not, even where no two modules make a circle (an analysis importing urlstate, which imports
    presets → claims → analysis, would make one)."""
    assert circles(box_edges(found)) == []


def test_the_analyses_never_import_links_or_lessons(found):
    """Links (urlstate) and lessons sit above the analyses: a diagnosis's links are made by its caller."""
    upward = [f"{i.importer}:{i.line} imports {i.imported}" for i in found
              if box(i.importer) == "explorer.analysis"
              and i.imported in ("explorer.urlstate", "explorer.lessons", "explorer.presets", "explorer.claims")]
    assert upward == []


def test_the_app_reaches_the_server_through_its_api_only(found):
    """The app asks the class server through explorer/server/api.py and reaches into none of its parts
    (the build processes, the queue, the measuring service...): what the server is made of can change
    without a page noticing."""
    reaching = [f"{i.importer}:{i.line} imports {i.imported}" for i in found
                if i.importer.split(".")[0] == "app" and i.imported.startswith("explorer.server")
                and i.imported not in SERVER_API]
    assert reaching == []
    assert any(i.importer == "app.handle" and i.imported == "explorer.server.api" for i in found)


def test_the_server_is_one_folder_and_imports_nothing_above_it(found):
    """The class server's modules live in explorer/server/; none of them imports the app, the CLI or the
    teaching data's pages, and nothing below it in the library imports the server."""
    server = {i.importer for i in found if i.importer.startswith("explorer.server")}
    assert {"explorer.server.api", "explorer.server.in_process", "explorer.server.over_socket",
            "explorer.server.service", "explorer.server.launcher", "explorer.server.scheduler"} <= server
    upward = [f"{i.importer}:{i.line} imports {i.imported}" for i in found
              if i.importer.startswith("explorer.server") and i.imported.split(".")[0] == "app"
              or i.imported.startswith("explorer.server") and i.importer.startswith(
                  ("explorer.measure", "explorer.analysis", "explorer.build", "explorer.schedules"))]
    assert upward == []


def test_no_project_module_is_imported_inside_a_function(found):
    local = [f"{i.importer}:{i.line} imports {i.imported}" for i in found
             if i.local and (i.importer, i.imported) not in LOCAL_IMPORTS_ALLOWED]
    assert local == [], "import project modules at the top of the file: " + "; ".join(local)


def test_every_allowed_local_import_is_still_there(found):
    """An allow-list entry whose import went away would silently allow the next one."""
    local = {(i.importer, i.imported) for i in found if i.local}
    assert set(LOCAL_IMPORTS_ALLOWED) <= local


def test_the_graph_draws_boxes_and_their_module_load_edges():
    found = [Import("explorer.analysis.sass", "explorer.cuda_compile", 1, False),
             Import("explorer.build", "explorer.cuda_compile", 1, False),
             Import("explorer.analysis.sass", "explorer.analysis.banks", 1, False),  # inside one box: not drawn
             Import("explorer.analysis.banks", "explorer.build", 1, False),  # implies the next one
             Import("explorer.analysis.sass", "explorer.cuda_compile", 2, False),
             Import("app.panels", "explorer.build", 9, True),  # a local import: not drawn
             Import("explorer.analysis.sass", "explorer", 1, False)]  # the bare package: not drawn
    assert box("explorer.analysis.sass") == "explorer.analysis" and box("app.views.lessons") == "app.views"
    assert box("explorer.build") == "explorer.build"
    assert mermaid(found).splitlines() == [
        "flowchart LR",
        '    explorer_analysis["explorer.analysis"]',
        '    explorer_build["explorer.build"]',
        '    explorer_cuda_compile["explorer.cuda_compile"]',
        "    explorer_analysis --> explorer_build",  # analysis -> cuda_compile goes through build
        "    explorer_build --> explorer_cuda_compile",
    ]
    assert reduced([("a", "b"), ("b", "c"), ("a", "c"), ("a", "d")]) == [("a", "b"), ("a", "d"), ("b", "c")]


def test_docs_imports_md_is_the_current_drawing(found):
    """docs/imports.md is regenerated by ``python -m explorer.devtools.import_graph``."""
    drawn = subprocess.run([sys.executable, "-m", "explorer.devtools.import_graph"], capture_output=True, text=True,
                           check=True, cwd=ROOT).stdout
    assert drawn == import_graph.page(found)
    assert (ROOT / "docs" / "imports.md").read_text() == drawn, (
        "regenerate it: python -m explorer.devtools.import_graph > docs/imports.md")


@pytest.mark.parametrize("page", ["docs/architecture.md", "tests/README.md"])
def test_the_architecture_pages_name_files_that_exist(page):
    """docs/architecture.md and the test suite's page send a newcomer to files by path: each must be there."""
    text = (ROOT / page).read_text()
    named = set(re.findall(r"`((?:explorer|app|tests|bench|presets|docs)/[\w/.]+)`", text))
    assert len(named) > 5
    assert sorted(path for path in named if not (ROOT / path).exists()) == []


def test_every_library_module_imports():
    """Every module of explorer/ imports (a name moved to another module breaks only the modules
    nothing else imports at test time otherwise: a devtool, a command's module)."""
    import importlib

    names = [m for m in modules(ROOT, ["explorer"]) if not m.endswith("__main__")]
    failed = {}
    for name in names:
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001 - reported below, every one
            failed[name] = f"{type(e).__name__}: {e}"
    assert not failed, failed
