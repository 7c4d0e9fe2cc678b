"""A small walker over TIR statements (TVM 0.27 exposes no Python stmt visitor).

Used by verification and by the analyses; it yields each statement with the chain of
enclosing ``For`` loops, which is what both need.
"""
from __future__ import annotations

from typing import Iterator

from tvm import tirx

_CHILD_FIELDS = ("seq", "body", "block", "then_case", "else_case", "init")


def children(stmt) -> list:
    out = []
    for name in _CHILD_FIELDS:
        child = getattr(stmt, name, None)
        if child is None:
            continue
        if name == "seq":
            out.extend(child)
        else:
            out.append(child)
    return out


def walk(stmt, loops: tuple = ()) -> Iterator[tuple[object, tuple]]:
    """Pre-order: yield (statement, enclosing For loops outermost first)."""
    yield stmt, loops
    inner = loops + (stmt,) if isinstance(stmt, tirx.For) else loops
    for child in children(stmt):
        yield from walk(child, inner)


def thread_tag(loop) -> str | None:
    """The thread tag a For is bound to (``threadIdx.x``, ``vthread.y``...), or None."""
    binding = getattr(loop, "thread_binding", None)
    return None if binding is None else str(binding.thread_tag)
