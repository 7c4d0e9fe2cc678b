"""Suggestions (:data:`SUGGESTION_RULE`): the neighbouring settings of a setting (one knob moved,
:func:`neighbours`), each built and reduced to Facts (:func:`analysed_neighbours`, from several threads
where asked), and the neighbour that addresses a finding (:func:`suggest`)."""
from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

from ...build import Build, Spec
from ...errors import ExplorerError, InvalidKnobs
from ..roofline import Ceilings
from .calibration import SAME_SPEED, speedup_error
from .facts import Facts, facts_of
from .findings import Finding, Suggestion
from .rules import RULES, estimated_total, findings_of

MIN_RELIEF = 0.1  # a suggestion lowers its finding's cost by at least this share

SUGGESTION_RULE = ("Each neighbouring setting (one knob moved to its nearest allowed value that builds) is built "
                   "and analysed; a finding's suggestion is the neighbour that lowers that finding's cost the most "
                   f"(by at least {MIN_RELIEF:.0%}; among equals, the lowest estimated total: the roofline's least "
                   "time plus every finding's cost), of those whose total is within the model's error of the lowest "
                   "total of any that lowers it, and provided its total is below this setting's by more than the "
                   "model's error for that move (calibration: the held-out error of the measured moves whose largest "
                   f"change is in the same rule's cost, and never less than the ±{SAME_SPEED:.0%} within which two "
                   "measured times are the same speed); a setting suggested for a higher-ranked "
                   "finding is left to it. A neighbour that does not lower the estimate enough because its move "
                   "raises another finding is tried again with a knob that relieves that finding moved as well. A "
                   "neighbour with a race is never suggested; a race's suggestion is the neighbour without one that "
                   "has the lowest estimated total.")


Move = tuple[Spec, tuple[tuple[str, str, str], ...]]  # a setting and its knob changes (knob, from, to)
STEPS_TRIED = 3  # allowed values tried in one direction until one builds


def neighbours(spec: Spec) -> list[list[Move]]:
    """Every setting one knob away, as one list per knob and direction: the next allowed
    values in that direction, nearest first (a template may refuse the nearest, e.g. fewer
    rows per block than threads; :func:`analysed_neighbours` takes the first that builds). A switch's
    other value, each other option, the next smaller and larger choice, a range's ±1 and
    ×2 or ÷2, a split's smallest prime factor moved between neighbouring levels. Values the
    knob dataclass refuses are left out."""
    out = []
    for knob in spec.knobs.fields():
        value = getattr(spec.knobs, knob.name)
        for direction in _directions(knob, value):
            moves = []
            for new in direction[:STEPS_TRIED]:
                try:
                    moves.append((spec.with_knobs(**{knob.name: new}),
                                  ((knob.name, knob.format(value), knob.format(new)),)))
                except ExplorerError:
                    continue
            if moves:
                out.append(moves)
    return out


def _directions(knob, value) -> list[list]:
    if knob.kind is bool:
        return [[not value]]
    if knob.kind is str:
        return [[c] for c in knob.values() if c != value]
    if knob.kind is tuple:
        return [[moved] for moved in _split_moves(value)]
    if knob.choices is not None:
        ordered = sorted(knob.choices)
        i = ordered.index(value)
        return [list(reversed(ordered[:i])), ordered[i + 1:]]
    near = {value - 1, value + 1, value * 2, value // 2}
    return [[v] for v in sorted(near) if v != value and knob.low <= v <= knob.high]


def _split_moves(value: tuple) -> list[tuple]:
    """A split with its smallest prime factor moved from one level to the next or back."""
    moves = []
    for i in range(len(value) - 1):
        for src, dst in ((i, i + 1), (i + 1, i)):
            if value[src] > 1:
                factor = next(p for p in range(2, value[src] + 1) if value[src] % p == 0)
                moved = list(value)
                moved[src] //= factor
                moved[dst] *= factor
                moves.append(tuple(moved))
    return moves


def move_error(now: dict[str, Finding], then: dict[str, Finding]) -> float:
    """The margin a move from findings ``now`` to ``then`` must beat: the held-out error of the measured one-knob
    moves whose largest change is in the same rule's cost (calibration.speedup_error), as the calibration
    groups them; of every move where no rule's cost changes."""
    def cost(found: dict[str, Finding], name: str) -> float:
        return found[name].cost_us if name in found and not found[name].within_roof else 0.0

    moved = {name: abs(cost(then, name) - cost(now, name)) for name in set(now) | set(then)}
    largest = max(moved, key=lambda name: (moved[name], name), default=None)
    return speedup_error(largest if largest is not None and moved[largest] > 0 else None)


def suggest(rule: str, current: Facts, candidates: Iterable[tuple[Spec, tuple, Facts]],
            taken: Iterable[Spec] = ()) -> Suggestion | None:
    """The suggestion rule (:data:`SUGGESTION_RULE`) for the finding of ``rule``; settings in
    ``taken`` (suggested for a higher-ranked finding) are left to that finding."""
    taken = set(taken)
    every = findings_of(current)
    now = every.get(rule)
    if now is None:
        return None
    total_now = estimated_total(current)
    relieving = []
    for spec, changes, facts in candidates:
        if facts.races or spec in taken:  # a setting whose result is wrong is never suggested
            continue
        then = findings_of(facts)
        found = then.get(rule)
        cost = found.cost_us if found is not None else 0.0
        total = estimated_total(facts)
        faster = total * (1 + move_error(every, then)) < total_now  # by more than the model's error for such a move
        if not now.wrong and (cost > now.cost_us * (1 - MIN_RELIEF) or not faster):
            continue
        relieving.append(Suggestion(spec, changes, cost, total))
    if not relieving:
        return None
    if now.wrong:  # a race: the fastest setting without one
        return min(relieving, key=lambda s: s.total_us)
    # The move that lowers the finding most, among those the model cannot tell from the fastest (within its
    # error): not one that removes the finding at the price of another (no shared tile, no bank conflicts, but
    # uncoalesced loads) and is estimated slower than a move that relieves it.
    fastest = min(s.total_us for s in relieving)
    close = [s for s in relieving if s.total_us <= fastest * (1 + speedup_error())]
    return min(close, key=lambda s: (s.cost_us, s.total_us))


def analysed_neighbours(spec: Spec, current: Facts, ceilings: Ceilings | None,
                        build_fn: Callable[[Spec], Build], workers: int) -> list[tuple[Spec, tuple, Facts]]:
    """Each neighbour direction's first setting that builds, with its Facts. A direction the
    template refuses altogether is tried once more with each other knob the refusal names
    moved one step as well (async copies that need a second pipeline stage)."""
    def analysed(moves: list[Move]):
        refusal = None
        for moved, changes in moves:
            try:
                return _analysed(moved, changes, build_fn(moved), current, ceilings)
            except InvalidKnobs as error:
                refusal = refusal or error
            except ExplorerError:
                continue
        for moved, changes in _with_named_knobs(moves[0], refusal):
            try:
                return _analysed(moved, changes, build_fn(moved), current, ceilings)
            except ExplorerError:
                continue
        return None

    def all_of(paths: list[list[Move]]) -> list[tuple[Spec, tuple, Facts]]:
        if workers > 1:
            with ThreadPoolExecutor(workers) as pool:
                results = list(pool.map(analysed, paths))
        else:
            results = [analysed(moves) for moves in paths]
        return [r for r in results if r is not None]

    first = all_of(neighbours(spec))
    return first + all_of(_relieving_moves(current, first))


RELIEVED_BY = {rule.name: rule.relieved_by for rule in RULES}


def _relieving_moves(current: Facts, candidates: list[tuple[Spec, tuple, Facts]]) -> list[list[Move]]:
    """Each neighbour that alone does not lower the estimate by more than the model's error, with one more
    knob moved that relieves a finding its move raised (:attr:`Rule.relieved_by`): overlap holds a second
    buffer, a third stage gives it back."""
    total, now = estimated_total(current), findings_of(current)
    paths = []
    for spec, changes, facts in candidates:
        then = findings_of(facts)
        if estimated_total(facts) * (1 + move_error(now, then)) < total:  # faster alone, by more than the error
            continue
        raised = [name for name, found in then.items()
                  if found.cost_us > (1 + MIN_RELIEF) * (now[name].cost_us if name in now else 0.0)]
        knobs = {knob for name in raised for knob in RELIEVED_BY.get(name, ())} - {k for k, _, _ in changes}
        paths += [[(moved, changes + more) for moved, more in path]
                  for path in neighbours(spec) if path[0][1][0][0] in knobs]
    return paths


def _analysed(moved: Spec, changes: tuple, built: Build, current: Facts, ceilings):
    return moved, changes, facts_of(built, ceilings=ceilings, like=current, sms=current.device.sms)


def _with_named_knobs(move: Move, refusal: InvalidKnobs | None) -> list[Move]:
    """``move`` with one more knob that ``refusal`` names moved to its nearest value."""
    if refusal is None:
        return []
    spec, changes = move
    out = []
    for path in neighbours(spec):
        both, more = path[0]
        if more[0][0] in refusal.knobs and more[0][0] != changes[0][0]:
            out.append((both, changes + more))
    return out
