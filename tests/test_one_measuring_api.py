"""Structure: the app measures only through the class server (explorer/server/api.py), and only
the measurement module drives the measuring worker. A page that called ``explorer.measure``
itself would time kernels in a second queue beside the class's, re-measure what the class
just measured, and be invisible to the Device page."""
import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# What times a kernel or starts the worker: the app reaches these through handle.server() only.
MEASURING = {"measure", "measure_module", "baseline", "latency_us", "gpu_measurer", "local_gpu", "warm_up",
             "ceilings", "measure_remote", "measure_for_board", "pytorch_for_board", "LocalWorker"}


def imported_names(path: Path) -> set[tuple[str, str]]:
    """(module, name) of every ``from X import name`` and attribute use ``measure.X`` in a file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module:
            found |= {(node.module, alias.name) for alias in node.names}
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            found.add((node.value.id, node.attr))
    return found


def measuring_uses(path: Path) -> list[str]:
    uses = []
    for module, name in imported_names(path):
        from_measure = module.startswith("explorer.measure") or module in ("measure", "classroom", "leaderboard")
        if from_measure and name in MEASURING:
            uses.append(f"{module}.{name}")
    return sorted(uses)


def test_no_page_measures_except_through_the_server():
    offenders = {str(path.relative_to(ROOT)): uses for path in sorted((ROOT / "app").rglob("*.py"))
                 if (uses := measuring_uses(path))}
    assert offenders == {}


def test_only_the_measurement_module_drives_the_worker():
    drivers = sorted(str(path.relative_to(ROOT)) for path in (ROOT / "explorer").rglob("*.py")
                     if "LocalWorker(" in path.read_text())
    assert drivers == ["explorer/measure/measurement.py"]


def test_the_finder_sees_a_page_that_measures(tmp_path):
    page = tmp_path / "page.py"
    page.write_text("from explorer.measure import measure\nfrom explorer import classroom\n"
                    "classroom.measure_for_board(None)\n")
    assert measuring_uses(page) == ["classroom.measure_for_board", "explorer.measure.measure"]
