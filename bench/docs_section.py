"""Write one benchmark's section of docs/benchmarks.md, leaving the other sections alone.

A section lives between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->``; writing it again
replaces only that text, and a new section is appended at the end of the file.
"""
from __future__ import annotations

from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"


def write_section(name: str, text: str, path: Path = BENCHMARKS) -> None:
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{text.strip()}\n{end}"
    current = path.read_text() if path.exists() else "# Benchmarks\n"
    if start in current and end in current:
        before, rest = current.split(start, 1)
        after = rest.split(end, 1)[1]
        updated = before + block + after
    else:
        updated = current.rstrip("\n") + "\n\n" + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(updated)


def read_section(name: str, path: Path = BENCHMARKS) -> str | None:
    """The text of section ``name`` of ``path`` with its markers, or None."""
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    current = path.read_text() if path.exists() else ""
    if start not in current or end not in current:
        return None
    return start + current.split(start, 1)[1].split(end, 1)[0] + end
