"""Declaring knobs: one frozen dataclass per schedule template (and per workload).

A knob is a dataclass field created with :func:`knob`. Its metadata carries the allowed
values (``choices``), an inclusive range (``low``/``high``) or, for a tile split, the
workload dimension it splits (``split_of``), plus one sentence of help. The UI builds its
widgets from this, the CLI prints it, presets and URL parameters are parsed through it.

``Params`` instances are frozen and validated on construction, so a knob object that
exists is in range; combinations that depend on the workload are checked by the template.
Workload shapes use the same machinery (``Workload`` in workloads.py), with their own
error type, so shapes from a URL or a preset are validated the same way.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from .errors import ExplorerError, InvalidKnobs

_META = "explorer_knob"


@dataclass(frozen=True)
class Knob:
    """The declaration of one knob or shape parameter: its type, default, domain and help."""

    name: str
    kind: type  # int, bool, str or tuple (a split)
    default: Any
    help: str
    choices: tuple | None = None
    low: int | None = None
    high: int | None = None
    split_of: str | None = None  # workload attribute a split's product must equal
    parts: int | None = None  # number of factors of a split
    noun: str = "Knob"
    error: type = InvalidKnobs

    def values(self, workload=None) -> tuple:
        """Every allowed value (for select widgets); a split needs the workload."""
        if self.choices is not None:
            return self.choices
        if self.kind is bool:
            return (False, True)
        if self.split_of is not None:
            if workload is None:
                return (self.default,)
            return factorizations(getattr(workload, self.split_of), self.parts)
        return tuple(range(self.low, self.high + 1))

    def describe_domain(self) -> str:
        if self.choices is not None:
            return ", ".join(str(c) for c in self.choices)
        if self.kind is bool:
            return "true, false"
        if self.split_of is not None:
            return f"{self.parts} factors whose product is {self.split_of}"
        return f"{self.low} … {self.high}"

    def check(self, value: Any) -> Any:
        """Return ``value`` converted to the knob's type, or raise InvalidKnobs."""
        bad = self._error(f"{self.noun} '{self.name}' = {value!r} is not allowed; allowed: {self.describe_domain()}.")
        if self.kind is bool:
            if not isinstance(value, bool):
                raise bad
            return value
        if self.kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad
        elif self.kind is str:
            if not isinstance(value, str):
                raise bad
        elif self.kind is tuple:
            if isinstance(value, list):
                value = tuple(value)
            if (
                not isinstance(value, tuple)
                or len(value) != self.parts
                or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in value)
            ):
                raise bad
            return value
        if self.choices is not None and value not in self.choices:
            raise bad
        if self.low is not None and value < self.low:
            raise bad
        if self.high is not None and value > self.high:
            raise bad
        return value

    def parse(self, text: str) -> Any:
        """Parse a command-line or URL value (``"32"``, ``"true"``, ``"8,2,4,1"``)."""
        text = text.strip()
        try:
            if self.kind is bool:
                lowered = text.lower()
                if lowered not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise ValueError(text)
                value: Any = lowered in ("true", "1", "yes", "on")
            elif self.kind is int:
                value = int(text)
            elif self.kind is tuple:
                value = tuple(int(part) for part in text.replace("x", ",").split(","))
            else:
                value = text
        except ValueError:
            raise self._error(
                f"{self.noun} '{self.name}': cannot read {text!r}; allowed: {self.describe_domain()}."
            ) from None
        return self.check(value)

    def _error(self, message: str) -> ExplorerError:
        if self.error is InvalidKnobs:
            return InvalidKnobs(message, (self.name,))
        return self.error(message)

    def format(self, value: Any) -> str:
        """The inverse of :meth:`parse`."""
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, tuple):
            return ",".join(str(v) for v in value)
        return str(value)


def knob(default, help: str, *, choices=None, low=None, high=None, split_of=None):
    """A knob field. Give exactly one of ``choices``, ``low``/``high`` or ``split_of``
    (booleans need none)."""
    meta = {
        "help": help,
        "choices": tuple(choices) if choices is not None else None,
        "low": low,
        "high": high,
        "split_of": split_of,
        "parts": len(default) if split_of is not None else None,
    }
    return dataclasses.field(default=default, metadata={_META: meta})


def factorizations(n: int, parts: int) -> tuple[tuple[int, ...], ...]:
    """All ordered ways to write n as a product of ``parts`` positive integers."""
    if parts == 1:
        return ((n,),)
    out = []
    for d in range(1, n + 1):
        if n % d == 0:
            out.extend((d,) + rest for rest in factorizations(n // d, parts - 1))
    return tuple(out)


@dataclass(frozen=True)
class Params:
    """Frozen, validated parameter set: base of knob sets and workloads."""

    noun: ClassVar[str] = "Knob"
    error: ClassVar[type] = InvalidKnobs

    def __post_init__(self):
        for knob in self.fields():
            object.__setattr__(self, knob.name, knob.check(getattr(self, knob.name)))

    @classmethod
    def fields(cls) -> tuple[Knob, ...]:
        """The declaration of every field, in order (named like ``dataclasses.fields``, whose
        fields these are: the knobs of a knob set, the shape parameters of a workload)."""
        # Made once per class (each knob set checks its values against them, and a server
        # makes knob sets on every page run); Knobs are frozen.
        made = cls.__dict__.get("_made_fields")
        if made is None:
            made = tuple(Knob(name=f.name, kind=type(f.default), default=f.default, noun=cls.noun,
                                  error=cls.error, **f.metadata[_META])
                         for f in dataclasses.fields(cls) if _META in f.metadata)
            cls._made_fields = made
        return made

    @classmethod
    def field(cls, name: str) -> Knob:
        for knob in cls.fields():
            if knob.name == name:
                return knob
        noun = cls.noun.lower()
        message = f"There is no {noun} '{name}'; the {noun}s are: {', '.join(knob.name for knob in cls.fields())}."
        raise InvalidKnobs(message, (name,)) if cls.error is InvalidKnobs else cls.error(message)

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], base: Params | None = None) -> Params:
        """Build from typed values (a preset file); unknown names fail loudly."""
        for name in values:
            cls.field(name)
        start = dataclasses.asdict(base) if base is not None else {}
        return cls(**{**start, **values})

    @classmethod
    def from_strings(cls, values: Mapping[str, str], base: Params | None = None) -> Params:
        """Build from text values (CLI ``--set``, URL query parameters)."""
        parsed = {name: cls.field(name).parse(text) for name, text in values.items()}
        return cls.from_mapping(parsed, base)

    def replace(self, **changes) -> Params:
        return self.from_mapping(changes, self)

    def to_dict(self) -> dict[str, Any]:
        return {knob.name: getattr(self, knob.name) for knob in self.fields()}

    def to_strings(self) -> dict[str, str]:
        return {knob.name: knob.format(getattr(self, knob.name)) for knob in self.fields()}

    def changed_from(self, other: Params) -> tuple[str, ...]:
        return tuple(knob.name for knob in self.fields() if getattr(self, knob.name) != getattr(other, knob.name))


def product(values) -> int:
    return math.prod(values)


@dataclass(frozen=True)
class KnobSet(Params):
    """Base of every template's knob dataclass. Subclasses are ``@dataclass(frozen=True)``."""
