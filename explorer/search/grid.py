"""The knobs a sweep varies and their values: a :class:`Grid` over a base spec, checked
against each knob's domain, parsed from and written back to ``knob=v1,v2,...`` text."""
from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass

from ..build import Spec
from ..errors import InvalidKnobs
from ..knobs import Knob, KnobSet

# A sweep past this many points is a search, not a grid: sample it (``sample=``).
MAX_POINTS = 20_000
ALL_VALUES = "all"  # --grid knob=all: every value the knob allows on this workload


@dataclass(frozen=True)
class Grid:
    """The knobs a sweep varies, each with its values, over a base spec (whose other
    knobs stay fixed). Values are checked against the knob's domain on construction."""

    base: Spec
    axes: tuple[tuple[str, tuple], ...]

    def __post_init__(self):
        if not self.axes:
            raise InvalidKnobs("A sweep needs at least one knob to vary, e.g. --grid num_thread_x=8,16,32.")
        names = [name for name, _ in self.axes]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise InvalidKnobs(f"Knob '{repeated[0]}' appears twice in the grid; list all its values once.",
                               tuple(repeated))
        axes = []
        for name, values in self.axes:
            knob = type(self.base.knobs).field(name)
            checked = tuple(dict.fromkeys(knob.check(value) for value in values))  # unique, in order
            if not checked:
                raise InvalidKnobs(f"Knob '{name}' has no values in the grid.", (name,))
            axes.append((name, checked))
        object.__setattr__(self, "axes", tuple(axes))

    @classmethod
    def whole(cls, base: Spec) -> Grid:
        """Every knob of ``base``'s template with every value it allows on ``base``'s workload: the
        template's whole knob space there (what its checks accept is a part of it)."""
        return cls(base, tuple((knob.name, knob.values(base.workload)) for knob in type(base.knobs).fields()))

    @classmethod
    def parse(cls, base: Spec, items: Iterable[str]) -> Grid:
        """From command-line/URL text: ``"knob=v1,v2,..."`` or ``"knob=all"``; a split
        knob's values are written ``8x2x4x1``."""
        axes = []
        for item in items:
            name, equals, text = item.partition("=")
            if not equals or not text.strip():
                raise InvalidKnobs(f"A grid axis is written knob=v1,v2,... (or knob=all), not '{item}'.")
            knob = type(base.knobs).field(name.strip())
            axes.append((knob.name, parse_values(knob, text, base.workload)))
        return cls(base, tuple(axes))

    @property
    def knob_names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.axes)

    @property
    def size(self) -> int:
        return math.prod(len(values) for _, values in self.axes)

    def knobs_at(self, index: int) -> KnobSet:
        """The knobs of grid point ``index`` (the last axis varies fastest)."""
        changes = {}
        for name, values in reversed(self.axes):
            index, i = divmod(index, len(values))
            changes[name] = values[i]
        return self.base.knobs.replace(**changes)

    def indices(self, sample: int | None = None, seed: int = 0) -> list[int]:
        """Every point, or ``sample`` of them drawn at random (reproducibly, by ``seed``)."""
        count = self.size if sample is None or sample >= self.size else sample
        if count > MAX_POINTS:
            raise InvalidKnobs(
                f"This grid has {self.size:,} combinations, more than the {MAX_POINTS:,} one sweep may run: "
                f"give fewer values or sample some of them.",
                self.knob_names,
            )
        if count == self.size:
            return list(range(self.size))
        return sorted(random.Random(seed).sample(range(self.size), count))

    def draws(self, seed: int = 0, limit: int = MAX_POINTS) -> list[int]:
        """Every point in a random order, or ``limit`` points drawn at random (reproducibly, by ``seed``):
        a check that takes the first accepted settings takes a uniform sample of the accepted ones."""
        chosen = self.indices(min(limit, self.size), seed)
        random.Random(seed).shuffle(chosen)
        return chosen

    def to_strings(self) -> list[str]:
        """The inverse of :meth:`parse` (for ``found_by`` lines and URLs)."""
        out = []
        for name, values in self.axes:
            knob = self.base.knobs.field(name)
            out.append(f"{name}={','.join(knob.format(v).replace(',', 'x') for v in values)}")
        return out


def parse_values(knob: Knob, text: str, workload) -> tuple:
    if text.strip() == ALL_VALUES:
        return knob.values(workload)
    try:
        return tuple(knob.parse(part) for part in text.split(","))
    except InvalidKnobs as error:
        if knob.kind is tuple:
            raise InvalidKnobs(f"{error} In a grid, write each split with x between factors: 8x2x4x1,4x4x4x2.",
                               (knob.name,)) from None
        raise
