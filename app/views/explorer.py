"""Explorer: read the sidebar's knobs → build one Spec → show its code and analyses."""
import functools

import streamlit as st

from app import class_mode, code_view, diagnosis_panel, latency, panels, session, ui
from explorer.analyses import ANALYSES
from explorer.export import file_name, snippet
from explorer.highlight import view_text
from explorer.presets import get_preset

spec = session.sidebar() or session.spec()
session.sync_url()
class_mode.show(f"Explorer · {session.preset_id() or 'own setting'}")
template = spec.template_def
preset = get_preset(session.preset_id()) if session.preset_id() else None
held = class_mode.holds_back(spec)  # the class answers a question about this setting: no claim, time or diagnosis yet

st.title(template.title)
st.caption(f"{spec.workload.label()} · {template.summary}")
notice = session.link_notice(spec)
if notice:
    element, sentence = notice
    getattr(st, element)(ui.plain(sentence, limit=600))  # the link's values, shown as text
if preset is not None and preset.spec == spec and not held:
    with st.container(border=True):
        st.markdown(f"**Step {preset.step}: {preset.title}** — {preset.claim}")
        if preset.explanation:
            with st.expander("Why this step"):
                st.write(preset.explanation)
                st.caption(f"Source: {preset.source}")

measurable = latency.can_measure()
if measurable:
    latency.start_measuring(spec)
# A line, not st.status: Streamlit's status box waits 50 ms when it is made, on every run of the
# page (three quarters of a rerun whose build is cached).
compiling = st.empty()
compiling.caption(":material/progress_activity: Compiling…")
built, error = session.build_current(spec)
if built is not None:
    total = sum(built.timings_ms.values())
    compiling.caption(f":material/check_circle: Built in {total:.0f} ms — {panels.launch_summary(built)}")
else:
    compiling.caption(":material/error: This setting cannot be built")

stale = built is None
if stale:
    st.error(error)
    last = session.last_try()
    if last is None:
        st.stop()
    built = last.build
    st.warning(f"Below: the last valid setting, now stale. Since then: {session.describe_change(built.spec, spec)}.")

panels.metrics(built)
if not stale:
    if not held:
        diagnosis_panel.panel(built)
    class_mode.record_move(built.spec)
if measurable and not stale and built.kernels and not held:
    latency.latency(built)
previous = session.previous_try(built.spec) if not stale else None
left, right = st.columns([3, 1])
show_diff = left.toggle(
    "Show changes since the previous try", key="ui.diff", disabled=previous is None,
    help="A line diff of each view against the last setting you built in this session.",
)
if previous is not None:
    left.caption(f"Previous try: {session.describe_change(previous.spec, built.spec)}")
right.download_button(
    "Export as a Python script", data=functools.partial(snippet, built.spec, session.target(),
                                                       preset.title if preset and preset.spec == spec else ""),
    file_name=file_name(built.spec, session.preset_id()), mime="text/x-python", on_click="ignore",
    icon=":material/download:", width="stretch",
    help="A standalone script (TVM 0.27 + NumPy only) that applies this schedule, prints the TIR and CUDA, "
         "and checks and times the kernel on a GPU.",
)

analyses = [analysis for analysis in ANALYSES.values() if analysis.applies(built.spec.template_def)]
labels = [*code_view.VIEWS, *(analysis.title for analysis in analyses)]
session.keep_widget("ui.view", labels, labels[0])  # a tab of the template before, which this one has not
tabs = st.tabs(labels, key="ui.view", on_change="rerun")
for tab, (label, (attribute, language)) in zip(tabs, code_view.VIEWS.items(), strict=False):
    if not tab.open:
        continue
    with tab:
        text = getattr(built, attribute)
        if show_diff and previous is not None:
            code_view.show_diff(getattr(previous.build, attribute), text, attribute, "previous", "now")
        elif attribute == "cuda" and not st.toggle("Show TVM's preamble (includes and type aliases)",
                                                   key="ui.preamble"):
            kernels, first = view_text(built, attribute)
            code_view.show_code(kernels, language, attribute, f"{label} from line {first} · {spec.workload.label()}",
                                stale=stale, first_line=first, highlighted=built.views_html.get(attribute))
        else:
            code_view.show_code(text, language, attribute, f"{label} · {spec.workload.label()}", stale=stale,
                                highlighted=built.views_html.get(attribute) if attribute != "cuda" else None)
for tab, analysis in zip(tabs[len(code_view.VIEWS):], analyses, strict=True):
    if tab.open:
        with tab:
            panels.show(analysis, built)
