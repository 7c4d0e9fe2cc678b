"""Widgets generated from knob and shape dataclasses (``Params.fields()``).

One widget per field, chosen from the field's domain: a select slider over the allowed
values for sizes, thread counts and tile splits, a selectbox for text choices (cache
scopes), a toggle for booleans, a number box for wide integer ranges (shapes). The
field's help sentence is the widget's tooltip. This module draws; the widgets' state is
seeded from the current value by ``session.fields`` (the one writer of session state), so a
preset, a link or "reset to preset" sets them by replacing the value and forgetting the
widget's key.
"""
from __future__ import annotations

import math
from typing import Any

from explorer.knobs import Knob

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


def widget_kind(knob: Knob) -> str:
    if knob.kind is bool:
        return "toggle"
    if knob.kind is str:
        return "selectbox"
    if knob.kind is int and knob.choices is None and knob.high - knob.low + 1 > MAX_SLIDER_VALUES:
        return "number_input"
    return "select_slider"


def offered(knob: Knob, workload) -> range | tuple:
    """The values the widget of ``knob`` offers (a number box: its range)."""
    if widget_kind(knob) == "number_input":
        return range(knob.low, knob.high + 1)
    return knob.values(workload)


def seed(knob: Knob, current: Any, options: range | tuple) -> tuple[Any, Any]:
    """What the widget of ``knob`` may hold, and the value to hold when it holds none or one no
    longer allowed: ``current``, or the nearest allowed value. A split's widget holds labels
    (a tuple value would make select_slider a range slider)."""
    if isinstance(options, range):
        return options, min(max(current, options.start), options.stop - 1)
    if knob.kind is tuple:
        return [format_value(o) for o in options], format_value(nearest(current, options))
    return options, nearest(current, options)


def field_widget(container, knob: Knob, options: range | tuple, key: str) -> Any:
    """Draw one field's widget in ``container`` (its state seeded); return the value it holds."""
    kind = widget_kind(knob)
    if kind == "number_input":
        return container.number_input(knob.name, min_value=knob.low, max_value=knob.high, step=1, key=key,
                                      help=knob.help)
    if knob.kind is tuple:
        by_label = {format_value(o): o for o in options}
        return by_label[container.select_slider(knob.name, list(by_label), key=key, help=knob.help)]
    if kind == "toggle":
        return container.toggle(knob.name, key=key, help=knob.help)
    if kind == "selectbox":
        return container.selectbox(knob.name, options, key=key, help=knob.help)
    return container.select_slider(knob.name, options, key=key, help=knob.help, format_func=format_value)
