"""Compare: the sidebar's setting (A) beside a second one (B): launch numbers side by
side and each code view as a line diff A → B (or the two texts next to each other)."""
import dataclasses

import streamlit as st

from app import code_view, panels, server, session, ui
from explorer.errors import ExplorerError
from explorer.presets import all_presets, get_preset

B_PREFIX = "bknob:"


def default_b(preset: str | None) -> str:
    """The preset B starts from: the next step of A's lesson, else A's preset or the first."""
    ids = list(all_presets())
    if preset in ids:
        p = get_preset(preset)
        following = [q for q in ids[ids.index(preset) + 1:] if get_preset(q).lesson == p.lesson]
        return following[0] if following else preset
    return ids[0]


def on_b_preset() -> None:
    session.start_compare_b(st.session_state[session.B_PRESET_WIDGET])
    session.forget_widgets((B_PREFIX,))


spec_a = session.sidebar() or session.spec()
session.sync_url()
b_base = session.compare_b(default_b(session.preset_id()))

st.title("Compare two settings")
col_a, col_b = st.columns(2)
with col_a:
    st.header("A · the sidebar's setting")
    st.caption(f"{spec_a.template_def.title} · {spec_a.workload.label()}")
with col_b:
    st.header("B")
    st.selectbox("B starts from preset", list(all_presets()), key=session.B_PRESET_WIDGET, on_change=on_b_preset,
                 format_func=ui.preset_label)
    knob_box = st.expander(f"B's knobs · {b_base.workload.label()}")
    values = session.fields(knob_box, b_base.template_def.knobs, b_base.knobs, b_base.workload,
                            f"{B_PREFIX}{b_base.template}.")
    spec_b = dataclasses.replace(b_base, knobs=b_base.template_def.knobs.from_mapping(values))
    session.set_compare_b(spec_b)

results = {}
for name, spec, column in (("A", spec_a, col_a), ("B", spec_b, col_b)):
    try:
        results[name] = server.build(spec, session.target())
    except ExplorerError as e:
        column.error(f"{name} cannot be built: {e}")
if len(results) < 2:
    st.stop()
a, b = results["A"], results["B"]
panels.metrics(a, col_a)
panels.metrics(b, col_b)
if spec_a == spec_b:
    st.info("A and B are the same setting: pick another preset or change B's knobs.")
else:
    st.caption(f"A → B: {session.describe_change(spec_a, spec_b)}")

side_by_side = st.toggle("Side by side instead of a diff", key="ui.side_by_side")
tabs = st.tabs(list(code_view.VIEWS), key="ui.compare_view", on_change="rerun")
for tab, (label, (attribute, language)) in zip(tabs, code_view.VIEWS.items(), strict=False):
    if not tab.open:
        continue
    with tab:
        if side_by_side:
            left, right = st.columns(2)
            with left:
                code_view.show_code(getattr(a, attribute), language, f"{attribute}-a", f"A · {label}")
            with right:
                code_view.show_code(getattr(b, attribute), language, f"{attribute}-b", f"B · {label}")
        else:
            code_view.show_diff(getattr(a, attribute), getattr(b, attribute), attribute, "A", "B")
