"""Shareable links: a :class:`~explorer.build.Spec` as URL query parameters and back.

A link names the template, the workload kind, every shape parameter (``shape.<name>``)
and every knob (``knob.<name>``), written with each field's own ``format`` and read back
with its ``parse`` through the frozen dataclasses, so a link restores exactly the view it
was made from, and a hand-edited link with a bad value fails with the field's own
one-line reason (:func:`read_link` keeps the rest of such a link and lists what it left
out, :func:`from_query` refuses it). ``preset`` optionally names the preset the view started from (the app's
"reset to preset"); fields the link leaves out take that preset's values, or the
template's and workload's defaults.

Every value is written in full (not only those that differ from a default), so a link
keeps meaning the same kernel when a default changes later.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .build import Spec
from .errors import ExplorerError
from .presets import get_preset
from .schedules import get_template, workload_class

TEMPLATE = "template"
WORKLOAD = "workload"
PRESET = "preset"
SHAPE_PREFIX = "shape."
KNOB_PREFIX = "knob."
MAX_VALUE_CHARS = 100  # longer than any template's, shape's or knob's value: refused without echoing it


def to_query(spec: Spec, preset: str | None = None) -> dict[str, str]:
    """The query parameters of a link to ``spec`` (started from ``preset``, if given)."""
    params = {TEMPLATE: spec.template, WORKLOAD: spec.workload.kind}
    if preset is not None:
        params[PRESET] = preset
    params.update({SHAPE_PREFIX + name: text for name, text in spec.workload.to_strings().items()})
    params.update({KNOB_PREFIX + name: text for name, text in spec.knobs.to_strings().items()})
    return params


def has_spec(params: Mapping[str, object]) -> bool:
    """Whether the query parameters speak of a view at all (else the app opens its default):
    any of our keys, even one that names nothing (the app then says why it opened its default)."""
    return any(key in (TEMPLATE, WORKLOAD, PRESET) or key.startswith((SHAPE_PREFIX, KNOB_PREFIX)) for key in params)


@dataclass(frozen=True)
class Dropped:
    """A query parameter a link could not use, and why."""

    key: str
    value: str
    error: ExplorerError

    def __str__(self) -> str:
        return f"{self.key} ({self.error})"


@dataclass(frozen=True)
class Link:
    """What a link opens: its Spec (None when it names no template or preset it can use), the
    preset it started from, and the parameters it could not use, each with its reason."""

    spec: Spec | None
    preset: str | None
    dropped: tuple[Dropped, ...] = ()

    def summary(self) -> str:
        """One line: what the link left out and why ("" when it used everything)."""
        return "; ".join(map(str, self.dropped))


def read_link(params: Mapping[str, str | list[str]]) -> Link:
    """Read a link's query parameters, keeping every value it can: a bad or unknown preset,
    template, workload, shape parameter or knob is left out (the rest of the link still applies)
    and listed with its reason. Keys other than ours (``utm_source``, Streamlit's ``embed``) are
    ignored."""
    values = {key: _last(value) for key, value in params.items()}
    dropped: list[Dropped] = []
    for key, value in list(values.items()):
        if len(value) > MAX_VALUE_CHARS and has_spec({key: value}):
            dropped.append(Dropped(key, "", ExplorerError(f"a value of {len(value):,} characters, longer than any")))
            del values[key]
    preset_id, base = values.get(PRESET), None
    if preset_id is not None:
        try:
            base = get_preset(preset_id).spec
        except ExplorerError as error:
            dropped.append(Dropped(PRESET, preset_id, error))
            preset_id = None
    template = None
    if TEMPLATE in values:
        try:
            template = get_template(values[TEMPLATE])
        except ExplorerError as error:
            dropped.append(Dropped(TEMPLATE, values[TEMPLATE], error))
    if template is None:
        if base is None:
            if not dropped:
                error = ExplorerError("This link names neither a template nor a preset.")
                dropped.append(Dropped(TEMPLATE, "", error))
            return Link(None, None, tuple(dropped))
        template = get_template(base.template)
    if WORKLOAD in values:
        kind = values[WORKLOAD]
        try:
            if workload_class(kind) is not template.workload:
                raise ExplorerError(f"Template '{template.name}' schedules {template.workload.title}, not '{kind}'.")
        except ExplorerError as error:
            dropped.append(Dropped(WORKLOAD, kind, error))
    if base is not None and base.template != template.name:
        base = None  # the link changed the template: the preset's values do not apply

    workload, lost = _valid(template.workload, values, SHAPE_PREFIX,
                            base.workload if base is not None else template.default_workload())
    knobs, lost_knobs = _valid(template.knobs, values, KNOB_PREFIX,
                               base.knobs if base is not None else template.knobs())
    return Link(Spec(template.name, workload, knobs), preset_id, (*dropped, *lost, *lost_knobs))


def _valid(params_class, values: Mapping[str, str], prefix: str, base):
    """``base`` with the values under ``prefix`` that ``params_class`` accepts, and the others
    dropped: all of them if they go together, else one by one in the link's order, each kept
    where it goes with those kept before it (a shape parameter may be valid only beside another)."""
    texts = {key[len(prefix):]: text for key, text in values.items() if key.startswith(prefix)}
    try:
        return params_class.from_strings(texts, base), []
    except ExplorerError:
        pass
    kept, good, dropped = base, {}, []
    for name, text in texts.items():
        try:
            kept = params_class.from_strings({**good, name: text}, base)
            good[name] = text
        except ExplorerError as error:
            dropped.append(Dropped(prefix + name, text, error))
    return kept, dropped


def from_query(params: Mapping[str, str | list[str]]) -> tuple[Spec, str | None]:
    """Read a link's query parameters strictly: (the Spec, the preset id it started from or
    None), or the first value :func:`read_link` would leave out, raised as its error."""
    link = read_link(params)
    if link.dropped:
        raise link.dropped[0].error
    return link.spec, link.preset


def _last(value: str | list[str]) -> str:
    """A repeated key counts once: its last value (as Streamlit's ``query_params`` reads it)."""
    if isinstance(value, (list, tuple)):
        if not value:
            return ""
        return str(value[-1])
    return str(value)

