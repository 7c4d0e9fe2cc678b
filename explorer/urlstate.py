"""Shareable links: a :class:`~explorer.build.Spec` as URL query parameters and back.

A link names the template, the workload kind, every shape parameter (``shape.<name>``)
and every knob (``knob.<name>``), written with each field's own ``format`` and read back
with its ``parse`` through the frozen dataclasses, so a link restores exactly the view it
was made from, and a hand-edited link with a bad value fails with the field's own
one-line reason. ``preset`` optionally names the preset the view started from (the app's
"reset to preset"); fields the link leaves out take that preset's values, or the
template's and workload's defaults.

Every value is written in full (not only those that differ from a default), so a link
keeps meaning the same kernel when a default changes later.
"""
from __future__ import annotations

from collections.abc import Mapping

from .build import Spec
from .errors import ExplorerError
from .presets import get_preset
from .schedules import get_template, workload_class

TEMPLATE = "template"
WORKLOAD = "workload"
PRESET = "preset"
SHAPE_PREFIX = "shape."
KNOB_PREFIX = "knob."


def to_query(spec: Spec, preset: str | None = None) -> dict[str, str]:
    """The query parameters of a link to ``spec`` (started from ``preset``, if given)."""
    params = {TEMPLATE: spec.template, WORKLOAD: spec.workload.kind}
    if preset is not None:
        params[PRESET] = preset
    params.update({SHAPE_PREFIX + name: text for name, text in spec.workload.to_strings().items()})
    params.update({KNOB_PREFIX + name: text for name, text in spec.knobs.to_strings().items()})
    return params


def has_spec(params: Mapping[str, object]) -> bool:
    """Whether the query parameters describe a view at all (else the app opens its default)."""
    return any(key in (TEMPLATE, PRESET) for key in params)


def from_query(params: Mapping[str, str | list[str]]) -> tuple[Spec, str | None]:
    """Read a link's query parameters: (the Spec, the preset id it started from or None).

    Keys other than ours (``utm_source``, Streamlit's ``embed``) are ignored; a key with
    our prefixes that names no shape parameter or knob is an error, as is any bad value.
    """
    values = {key: _last(value) for key, value in params.items()}
    preset_id = values.get(PRESET)
    base = get_preset(preset_id).spec if preset_id is not None else None
    template_name = values.get(TEMPLATE, base.template if base is not None else None)
    if template_name is None:
        raise ExplorerError("This link names neither a template nor a preset.")
    template = get_template(template_name)
    kind = values.get(WORKLOAD, template.workload.kind)
    if workload_class(kind) is not template.workload:
        raise ExplorerError(f"Template '{template.name}' schedules {template.workload.title}, not '{kind}'.")
    if base is not None and base.template != template.name:
        base = None  # the link changed the template: the preset's values do not apply

    shape = {key[len(SHAPE_PREFIX):]: text for key, text in values.items() if key.startswith(SHAPE_PREFIX)}
    knobs = {key[len(KNOB_PREFIX):]: text for key, text in values.items() if key.startswith(KNOB_PREFIX)}
    workload_base = base.workload if base is not None else template.default_workload()
    workload = template.workload.from_strings(shape, workload_base)
    knob_base = base.knobs if base is not None else template.knobs()
    return Spec(template.name, workload, template.knobs.from_strings(knobs, knob_base)), preset_id


def _last(value: str | list[str]) -> str:
    """A repeated key counts once: its last value (as Streamlit's ``query_params`` reads it)."""
    if isinstance(value, (list, tuple)):
        if not value:
            return ""
        return str(value[-1])
    return str(value)

