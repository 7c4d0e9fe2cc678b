"""Widgets generated from knob and shape dataclasses (``Params.specs()``).

One widget per field, chosen from the field's domain: a select slider over the allowed
values for sizes, thread counts and tile splits, a selectbox for text choices (cache
scopes), a toggle for booleans, a number box for wide integer ranges (shapes). The
field's help sentence is the widget's tooltip. Widgets are seeded through
``st.session_state`` from the current value, so a preset, a link or "reset to preset"
sets them by replacing the value and forgetting the widget's key.
"""
from __future__ import annotations

import math
from typing import Any

import streamlit as st

from explorer.knobs import KnobSpec, Params

# Integer ranges with more values than this get a number box instead of a slider.
MAX_SLIDER_VALUES = 64


def format_value(value: Any) -> str:
    """How a value reads on a widget: splits as 8×2×4×1, booleans as on/off."""
    if isinstance(value, tuple):
        return "×".join(str(v) for v in value)
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


def nearest(value: Any, options: tuple) -> Any:
    """``value`` if allowed, else the closest allowed value: after a shape change a split
    of the old size is replaced by the factorization of the new size closest in log
    scale, part by part."""
    if value in options:
        return value
    if isinstance(value, tuple):
        return min(options, key=lambda o: sum(abs(math.log2(a) - math.log2(b)) for a, b in zip(o, value, strict=False)))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return min(options, key=lambda o: abs(o - value))
    return options[0]


def widget_kind(spec: KnobSpec) -> str:
    if spec.kind is bool:
        return "toggle"
    if spec.kind is str:
        return "selectbox"
    if spec.kind is int and spec.choices is None and spec.high - spec.low + 1 > MAX_SLIDER_VALUES:
        return "number_input"
    return "select_slider"


def keep(key: str, allowed, fallback) -> None:
    """Before drawing widget ``key``: keep its value if still allowed, else use ``fallback``.
    Writing the value back on every run is what keeps it when the user switches pages
    (Streamlit forgets the state of widgets that a page does not draw)."""
    value = st.session_state.get(key, fallback)
    st.session_state[key] = value if value in allowed else fallback


def field_widget(container, spec: KnobSpec, current: Any, workload, key: str) -> Any:
    """Draw one field's widget in ``container``; return the value it holds."""
    kind = widget_kind(spec)
    if kind == "number_input":
        keep(key, range(spec.low, spec.high + 1), min(max(current, spec.low), spec.high))
        return container.number_input(spec.name, min_value=spec.low, max_value=spec.high, step=1, key=key,
                                      help=spec.help)
    options = spec.values(workload)
    if spec.kind is tuple:
        # A tuple value would make select_slider a range slider: the widget holds labels.
        by_label = {format_value(o): o for o in options}
        keep(key, by_label, format_value(nearest(current, options)))
        return by_label[container.select_slider(spec.name, list(by_label), key=key, help=spec.help)]
    keep(key, options, nearest(current, options))
    if kind == "toggle":
        return container.toggle(spec.name, key=key, help=spec.help)
    if kind == "selectbox":
        return container.selectbox(spec.name, options, key=key, help=spec.help)
    return container.select_slider(spec.name, options, key=key, help=spec.help, format_func=format_value)


def fields(container, params_class: type[Params], current: Params, workload, prefix: str) -> dict[str, Any]:
    """Widgets for every field of ``params_class``; the values they hold, by name.
    ``workload`` gives the allowed splits (None for the workload's own shape fields)."""
    return {
        spec.name: field_widget(container, spec, getattr(current, spec.name), workload, f"{prefix}{spec.name}")
        for spec in params_class.specs()
    }


def forget(prefixes: tuple[str, ...]) -> None:
    """Drop widget state under these key prefixes, so the widgets re-seed from the spec."""
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(prefixes)]:
        del st.session_state[key]
