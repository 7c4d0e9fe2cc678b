"""The rules' constants fitted to measurements: ``calibration.json`` beside this module, written by
``bench/calibrate_diagnosis.py`` (measured settings and their one-knob neighbours, or settings
measured earlier), read here once.

Each rule's cost is its model's sentence (``*_COST`` in its module) with the model's constants;
the calibration scales a rule's cost by the factor that fits the measurements best (a linear
model's constant fitted: 60 cycles a tree step × 2.2 is 132 cycles a step), and states the error
of the estimated speedups of one-knob moves on settings the fit did not see (held out). That
error, :func:`speedup_error` (of the moves that mostly change one rule's cost, where enough were
measured; never below the noise band, :data:`SAME_SPEED`), is the margin by which a neighbour
must be estimated faster before the diagnosis suggests it for that rule's finding
(:mod:`.diagnoser`: where no neighbour beats the error of every move, the setting is near its limit).
Without the file, or for a rule it does not name, the constants are the models' own assumptions
(scale 1) and the margin is :data:`ASSUMED_SPEEDUP_ERROR`.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path

PATH = Path(__file__).resolve().parent / "calibration.json"
ASSUMED_SPEEDUP_ERROR = 0.1  # before any calibration: a move must be estimated 10% faster
# The noise band: two times within ±5% count as the same speed (the lessons' claims, the grades). The median of a
# GPU timing moves by 1–3% from run to run, so a smaller difference says nothing about the schedule; nor can a
# move estimated faster by less than it be measured faster, so no margin is below it.
SAME_SPEED = 0.05
MIN_PAIRS = 10  # measured one-knob moves of a rule that its own speedup error needs


@functools.cache
def table() -> dict:
    """The calibration as written at :data:`PATH` (an empty table where there is none), read once."""
    try:
        return json.loads(PATH.read_text())
    except (OSError, ValueError):
        return {}


def scale(rule: str) -> float:
    """The factor the calibration fitted to ``rule``'s cost (1: its model's constants as assumed)."""
    return float(table().get("rules", {}).get(rule, {}).get("scale", 1.0))


def speedup_error(rule: str | None = None) -> float:
    """The held-out error of the estimated speedup of a one-knob move (a share: 0.1 is ±10%): of the
    moves whose largest change is in ``rule``'s cost, where the calibration measured at least
    :data:`MIN_PAIRS` of them, else of every move; at least the noise band (:data:`SAME_SPEED`)."""
    t = table()
    of_rule = t.get("rules", {}).get(rule, {}) if rule else {}
    if of_rule.get("pair_error") is not None and of_rule.get("held_out_pairs", 0) >= MIN_PAIRS:
        return max(SAME_SPEED, float(of_rule["pair_error"]))
    return max(SAME_SPEED, float(t.get("speedup_error", ASSUMED_SPEEDUP_ERROR)))


def l2_gbps(arch: str) -> float | None:
    """The L2's bandwidth the calibration measured on a GPU of ``arch`` (e.g. ``sm_90``), or None."""
    value = table().get("devices", {}).get(arch, {}).get("l2_gbps")
    return float(value) if value else None


def source() -> str:
    """Where the constants come from, in a clause (the diagnosis's notes)."""
    t = table()
    if not t:
        return "the models' own assumptions (no calibration file)"
    return f"fitted to {t.get('settings', '?')} settings measured on {t.get('machine', '?')}, {t.get('date', '?')}"
