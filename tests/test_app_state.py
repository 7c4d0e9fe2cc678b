"""App state has one writer: outside app/session.py, the app's modules only read
``st.session_state`` (an item, ``.get``, ``in``); every change goes through session.py."""
import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"
WRITER = APP / "session.py"


def state_writes(source: str) -> list[int]:
    """Lines that use ``session_state`` other than to read it: assignments, deletions, method
    calls other than ``get`` (update, setdefault, pop…), or handing the object itself on."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    lines = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Attribute) and node.attr == "session_state"):
            continue
        parent = parents.get(node)
        read = ((isinstance(parent, ast.Subscript) and isinstance(parent.ctx, ast.Load))
                or (isinstance(parent, ast.Attribute) and parent.attr == "get")
                or (isinstance(parent, ast.Compare) and node in parent.comparators))
        if not read:
            lines.append(node.lineno)
    return sorted(lines)


def test_the_detector_finds_each_kind_of_write_and_no_read():
    source = "\n".join([
        'st.session_state["a"] = 1',               # 1: item assignment
        "st.session_state.a = 1",                  # 2: attribute assignment
        'del st.session_state["a"]',               # 3
        "st.session_state.update(a=1)",            # 4
        'st.session_state.setdefault("a", {})',    # 5
        'st.session_state.pop("a")',               # 6
        "state = st.session_state",                # 7: an alias would write unseen
        'x = st.session_state["a"]',               # reads from here on
        'y = st.session_state.get("a")',
        'z = "a" in st.session_state',
        'w = "a" not in st.session_state',
    ])
    assert state_writes(source) == [1, 2, 3, 4, 5, 6, 7]


def test_only_session_py_writes_session_state():
    found = [f"{path.relative_to(APP.parent)}:{line}" for path in sorted(APP.rglob("*.py"))
             if path != WRITER for line in state_writes(path.read_text())]
    assert found == [], "write session state through app/session.py's functions: " + ", ".join(found)


def test_session_py_is_where_the_state_is_written():
    """The check above looks at the right files: the writer itself writes."""
    assert state_writes(WRITER.read_text())
