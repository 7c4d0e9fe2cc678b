"""A small walker over TIR statements (TVM 0.27 exposes no Python stmt visitor).

Used by verification and by the analyses; it yields each statement with the chain of
enclosing ``For`` loops, which is what both need.
"""
from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import tvm
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


@dataclass(frozen=True)
class Allocation:
    name: str
    scope: str  # "shared", "local", ...
    shape: tuple[int, ...]
    dtype: str

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def bytes(self) -> int:
        dtype = tvm.DataType(self.dtype)  # vectorised buffers have float32x4 elements
        return self.elements * dtype.bits * dtype.lanes // 8


def allocations(func) -> list[Allocation]:
    """Buffers a lowered function allocates (``T.alloc_shared``, ``T.alloc_local``...)."""
    out = []
    for stmt, _ in walk(func.body):
        if isinstance(stmt, tirx.AllocBuffer):
            buffer = stmt.buffer
            shape = tuple(int(d) for d in buffer.shape)
            out.append(Allocation(buffer.name, buffer.scope(), shape, str(buffer.dtype)))
    return out
