"""Where the bench scripts put what they measured: each run's report, and each target's row.

- ``write_section(name, text)``: the run's report, ``bench/results/runs/NAME.md``, replaced whole by the next run
  of the same name (git keeps the earlier ones: ``git log -p bench/results/runs/NAME.md``). With ``path``, the
  section between ``<!-- NAME:start -->`` and ``<!-- NAME:end -->`` of that document instead (a new section is
  appended at its end), leaving its other text alone.
- ``write_result(result, ...)``: the row of each result's target in ``docs/results.md``, the page of what is true
  now. A target's row is replaced where it stands; every other row is kept; a new target's row goes to the end of
  its concern's table.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS_DIR = "bench/results/runs"  # from the repository's root
RUNS = ROOT / RUNS_DIR
RESULTS_DOC = ROOT / "docs" / "results.md"

# docs/results.md's tables, in its order: a result's concern is one of these keys.
CONCERNS = {
    "class": "The class server",
    "kernels": "Kernels against PyTorch, cuDNN and cuBLAS",
    "correctness": "Correctness",
    "measuring": "Measuring",
    "lessons": "Lessons and questions",
    "diagnosis": "Diagnosis",
    "app": "The app's responsiveness",
    "tests": "The test suite",
}
COLUMNS = ("target", "goal", "now", "met", "what limits it", "machine", "date", "command", "run")
MET = "met"

HEADER = """# Results: where each target stands

One row per target the project sets itself: the goal, the figure of its latest run, whether it is met (or by how
much it is missed), what limits it where a profile said so, and the machine, date and command of that run. The
bench scripts write the rows (`write_result` in `bench/docs_section.py`): a run replaces its target's row and keeps
every other. A row keeps its *what limits it* until a run meets the target or names another limit. Each run's whole
report is in `bench/results/runs/` (the *run* column): the next run of the same name replaces it, and
`git log -p` on the file gives the earlier ones. Rows of runs made before this page existed were written from those
runs' figures, with their commands. The test GPU is now an NVIDIA H200 (16 cores): a row measured on another machine
says so, and stands until its target is run again."""


@dataclass(frozen=True)
class Result:
    """One target's row. ``target`` is its key: the same words from the next run replace this row."""

    concern: str  # a key of CONCERNS
    target: str  # what is measured, e.g. "100 students, reduction + rowwise + attention: knob → code p95"
    goal: str  # e.g. "≤ 1 s"
    now: str  # the figure, with what a reader needs beside it (the demand a class made, the count behind a share)
    met: str  # "met", "missed by …", or what the run can say ("measured", "no verdict: …")
    machine: str
    date: str  # YYYY-MM-DD
    command: str
    run: str = ""  # the run's report: a path from the repository's root (run_file(name) for a section)
    limit: str = ""  # what limits it, where known

    def cells(self) -> tuple[str, ...]:
        command = f"`{self.command}`" if self.command and not self.command.startswith("`") else self.command
        run = f"[{Path(self.run).stem}](../{self.run})" if self.run else ""
        return tuple(_cell(text) for text in (self.target, self.goal, self.now, self.met, self.limit, self.machine,
                                              self.date, command, run))


def run_file(name: str) -> str:
    """The report of section ``name``'s latest run, as a path from the repository's root."""
    return f"{RUNS_DIR}/{name}.md"


def write_section(name: str, text: str, path: Path | None = None) -> None:
    text = text.strip()
    if path is None:
        path = RUNS / f"{name}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")
        return
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    block = f"{start}\n{text}\n{end}"
    current = path.read_text() if path.exists() else ""
    if start in current and end in current:
        before, rest = current.split(start, 1)
        updated = before + block + rest.split(end, 1)[1]
    else:
        updated = (current.rstrip("\n") + "\n\n" if current.strip() else "") + block + "\n"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(updated)


def read_section(name: str, path: Path | None = None) -> str | None:
    """The text of the latest run of ``name`` (None if none); with ``path``, its section there with its markers."""
    if path is None:
        path = RUNS / f"{name}.md"
        return path.read_text().strip() if path.exists() else None
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    current = path.read_text() if path.exists() else ""
    if start not in current or end not in current:
        return None
    return start + current.split(start, 1)[1].split(end, 1)[0] + end


# -- docs/results.md -----------------------------------------------------------------------------------------------


def write_result(*results: Result, path: Path | None = None) -> None:
    """Each result's row in place of its target's (the same concern and target words), the others kept."""
    path = path or RESULTS_DOC
    tables = read_results(path)
    for result in results:
        if result.concern not in CONCERNS:
            raise ValueError(f"unknown concern {result.concern!r}: one of {', '.join(CONCERNS)}")
        rows = tables.setdefault(result.concern, [])
        new = list(result.cells())
        at = next((i for i, row in enumerate(rows) if row[0] == new[0]), None)
        if at is None:
            rows.append(new)
            continue
        limit = COLUMNS.index("what limits it")
        if not new[limit] and new[COLUMNS.index("met")] != MET:
            new[limit] = rows[at][limit]  # the profile's finding stands until a run meets the target
        rows[at] = new
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_results(tables))


def read_results(path: Path | None = None) -> dict[str, list[list[str]]]:
    """The rows of docs/results.md by concern, each a list of its cells (as written)."""
    path = path or RESULTS_DOC
    titles = {title: key for key, title in CONCERNS.items()}
    tables: dict[str, list[list[str]]] = {}
    concern = None
    for line in path.read_text().splitlines() if path.exists() else []:
        if line.startswith("## "):
            concern = titles.get(line[3:].strip())
        elif concern and line.startswith("| ") and not line.startswith(("| target |", "| --- |")):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            tables.setdefault(concern, []).append((cells + [""] * len(COLUMNS))[:len(COLUMNS)])
    return tables


def render_results(tables: dict[str, list[list[str]]]) -> str:
    lines = [HEADER, "", machines_line(tables), ""]
    for key, title in CONCERNS.items():
        rows = tables.get(key)
        if not rows:
            continue
        lines += [f"## {title}", "", "| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        lines += ["| " + " | ".join(row) + " |" for row in rows]
        lines.append("")
    return "\n".join(lines)


def machines_line(tables: dict[str, list[list[str]]]) -> str:
    """Where the rows were measured: each machine, its rows and their dates, the most rows first."""
    machine, date = COLUMNS.index("machine"), COLUMNS.index("date")
    seen: dict[str, list[str]] = {}
    for rows in tables.values():
        for row in rows:
            seen.setdefault(row[machine] or "machine not recorded", []).append(row[date])
    parts = []
    for name, dates in sorted(seen.items(), key=lambda item: -len(item[1])):
        known = sorted(d for d in dates if d)
        when = "" if not known else f", {known[0]}" if known[0] == known[-1] else f", {known[0]} to {known[-1]}"
        parts.append(f"{name}: {len(dates)} row{'s' if len(dates) > 1 else ''}{when}")
    return "Where the rows were measured: " + ("; ".join(parts) if parts else "no row yet") + "."


def _cell(text: str) -> str:
    """Text that stays in one cell of a Markdown table."""
    return re.sub(r"(?<!\\)\|", r"\\|", " ".join(str(text).split()))
