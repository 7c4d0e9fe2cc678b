"""Shared-memory races: a location one thread writes and another reads or writes with no barrier
between them (explorer.analysis.races). A correctness finding: the result is wrong."""
from __future__ import annotations

from ..facts import Facts
from ..findings import Finding, Rule, finding

SHOWN = 3  # races quoted in the evidence
RACE_COST = ("none: a race is not slow, it makes the result wrong (or right by luck, differently from run to run), "
             "so it comes before every cost")


def race_rule(f: Facts) -> Finding | None:
    if not f.races:
        return None
    lines = sorted({line for race in f.races for line in race.lines})
    where = f" at CUDA lines {', '.join(map(str, lines))}" if lines else ""
    evidence = [race.sentence for race in f.races[:SHOWN]]
    if len(f.races) > SHOWN:
        evidence.append(f"… and {len(f.races) - SHOWN} more pairs of accesses.")
    evidence.append("Between a thread's write to shared memory and another thread's read of it there must be a "
                    "__syncthreads() (a __syncwarp() for two lanes of one warp); compute-sanitizer --tool racecheck "
                    "shows the same hazard on a GPU.")
    buffers = ", ".join(dict.fromkeys(race.storage for race in f.races))
    return finding("race", f"Shared-memory race on {buffers}{where}: the result is wrong.", evidence, 0.0, RACE_COST,
                   wrong=True)


RULE = Rule("race", "a shared-memory location one thread writes and another reads or writes with no barrier "
            "between them", RACE_COST, race_rule)
