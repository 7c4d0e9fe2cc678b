"""Session state shared by the pages: the current Spec (workload, template, knobs), the
preset it started from, the target, this session's tries; the sidebar that edits them;
the URL that mirrors them.

``st.session_state["spec"]`` is the source of truth. Widgets are seeded from it (see
widgets.py), read back every run into a new validated Spec, and the URL's query
parameters are rewritten from it, so a link restores exactly the view (urlstate.py).

This module is the only writer of ``st.session_state``: pages read widget values from it,
and change state only through the functions below (tests/test_app_state.py checks), so
everything a session keeps is listed here.
"""
from __future__ import annotations

import dataclasses
import uuid
from typing import Any

import streamlit as st

from explorer import urlstate
from explorer.build import Build, Spec
from explorer.errors import ExplorerError
from explorer.knobs import Params
from explorer.presets import all_presets, default_preset, get_preset
from explorer.schedules import TEMPLATES, get_template, templates_for, workload_classes

from . import server, ui, widgets

HISTORY_LENGTH = 50
# Tries that keep their whole Build: the last (shown, stale, when the current setting cannot be
# built) and the one before it (what the diffs compare with). A Build with its highlighted views
# holds about 1.2 MB (its IRModules in TVM's memory besides), so every try keeping one made each
# session pin up to 50 builds past the server's bounded cache: an app process grew by a build per
# new setting until all its sessions (and the disconnected ones Streamlit keeps) held 50 each.
# Older tries keep their setting and latency, all the tries chart shows.
TRIES_WITH_BUILD = 2
KNOB_PREFIX = "knob:"
SHAPE_PREFIX = "shape:"
# Keys of what a session keeps besides its widgets.
SESSION_ID = "session_id"  # its measurement slot in the server's queue and its presence in the class
TEACHER = "class.teacher"  # the teacher's controls are unlocked (never the token itself)
WHERE = "class.where"  # what it looks at, for the teacher's view of the class
COMPARE_PRESET, COMPARE_SPEC = "compare.preset", "compare.spec"  # Compare's B, kept across page switches
B_PRESET_WIDGET = "ui.b_preset"


@dataclasses.dataclass(frozen=True)
class Try:
    """One setting this session built: what the diff and the tries chart show. ``build`` is
    None past the latest ``TRIES_WITH_BUILD`` tries."""

    spec: Spec
    build: Build | None
    latency_us: float | None = None


LINK_NOTICE = "link_notice"  # what a link could not use: (Streamlit element, sentence, the Spec it opened)


def init() -> None:
    """First run of a session: open the link's view (what of it can be used), else the default
    preset; what the link could not use is kept for the Explorer to say (:func:`link_notice`)."""
    if "spec" in st.session_state:
        return
    spec, preset, error = None, None, None
    params = st.query_params.to_dict()
    if urlstate.has_spec(params):
        link = urlstate.read_link(params)
        spec, preset = link.spec, link.preset
        if spec is None:
            error = ("error", f"This link could not be opened ({link.summary()}): here is the first lesson's first "
                              "step.")
        elif link.dropped:
            error = ("warning", f"This link was opened without {link.summary()}")
    if spec is None:
        preset = default_preset()
        spec = get_preset(preset).spec
    st.session_state.update(spec=spec, preset=preset, target="auto", tries=[], link_opened=urlstate.has_spec(params),
                            **{LINK_NOTICE: (*error, spec) if error else None})


def link_notice(current: Spec) -> tuple[str, str] | None:
    """What the link this session arrived on could not use, as (Streamlit element, sentence), for as
    long as the setting is still the one the link opened (the page reruns by itself, when its
    diagnosis or its latency arrives: a message shown once was gone before it could be read)."""
    notice = st.session_state.get(LINK_NOTICE)
    if notice is None or notice[2] != current:
        st.session_state[LINK_NOTICE] = None
        return None
    return notice[0], notice[1]


def take_link() -> bool:
    """Whether this session arrived on a link to a setting and the URL still holds it (once: the
    Start page sends such a link on to the Explorer, which shows it; a later visit to the Start page
    stays there)."""
    return bool(st.session_state.pop("link_opened", False)) and urlstate.has_spec(st.query_params.to_dict())


def spec() -> Spec:
    return st.session_state["spec"]


def preset_id() -> str | None:
    return st.session_state["preset"]


def target() -> str:
    return st.session_state["target"]


def tries() -> list[Try]:
    return st.session_state["tries"]


def remote():
    """The RPC tracker and key to measure on (an ``explorer.measure.Remote``), or None."""
    return st.session_state.get("remote")


def set_target(name: str) -> None:
    st.session_state["target"] = name


def set_remote(remote) -> None:
    """Measure on ``remote`` (an ``explorer.measure.Remote``), or on this machine's GPU (None)."""
    st.session_state["remote"] = remote


def set_spec(new: Spec) -> None:
    """Make ``new`` the sidebar's setting; its knob widgets re-seed from it."""
    st.session_state["spec"] = new
    forget_widgets((KNOB_PREFIX,))


def session_id() -> str:
    """This browser session's id: its measurement slot in the server's queue, its presence
    in the class."""
    return st.session_state.setdefault(SESSION_ID, uuid.uuid4().hex)


def flash(name: str, message: str | None) -> None:
    """A message for the next page run to show once (see :func:`flashed`)."""
    st.session_state[name] = message


def flashed(name: str) -> str | None:
    """The message :func:`flash` left under ``name``, removed: shown once."""
    return st.session_state.pop(name, None)


def keep_result(name: str, result: Any) -> None:
    """A page's last result (a sweep, a tuning run), kept across reruns and page switches."""
    st.session_state[f"{name}.result"] = result


def kept_result(name: str) -> Any:
    return st.session_state.get(f"{name}.result")


def memo(name: str) -> dict:
    """A dict this session keeps under ``name`` (results a page computes once), created empty."""
    return st.session_state.setdefault(name, {})


# -- the Lessons page's lesson and step, in the URL ---------------------------------------------

LESSON, STEP = "lesson", "step"  # the Lessons page's widgets, and its query parameters
LESSON_URL = "lessons.url"  # the lesson and step the Lessons page last wrote into the URL


def follow_lesson_link(steps: dict[str, int], titles: dict[str, str]) -> str | None:
    """Before the Lessons page draws its pickers (``steps``: lesson id -> its number of steps, in
    order): a lesson and step in the URL other than those the page last wrote there (a link, a
    reload) set them; without either, the page opens where it was. Returns a sentence for a lesson
    or a step the link names that does not exist (the link's text not yet escaped)."""
    params = st.query_params
    wanted = (params.get(LESSON), params.get(STEP))
    last = st.session_state.get(LESSON_URL)
    if wanted == last:
        return None
    if wanted == (None, None):
        if last is None:
            return None
        wanted = last
    lesson, text = wanted
    problems = []
    if lesson is None:
        lesson = st.session_state.get(LESSON, next(iter(steps)))
    elif lesson not in steps:
        problems.append(f"There is no lesson '{lesson}' here: this is the first lesson.")
        lesson, text = next(iter(steps)), None
    number = 1
    if text is not None:
        number = int(text) if text.isdigit() else 0
        if not 1 <= number <= steps[lesson]:
            number = min(max(number, 1), steps[lesson])
            problems.append(f"“{titles[lesson]}” has steps 1 to {steps[lesson]}, not '{text}': this is step {number}.")
    st.session_state.update({LESSON: lesson, STEP: number})
    return " ".join(problems) or None


def sync_lesson_url(lesson: str, number: int) -> None:
    """Write the Lessons page's lesson and step into the URL (only when they changed)."""
    query = {LESSON: lesson, STEP: str(number)}
    if st.query_params.to_dict() != query:
        st.query_params.from_dict(query)
    st.session_state[LESSON_URL] = (lesson, str(number))


# -- class mode ----------------------------------------------------------------------------


def is_teacher() -> bool:
    return bool(st.session_state.get(TEACHER))


def unlock_teacher() -> None:
    """The teacher's controls for the rest of this session (the token was checked)."""
    st.session_state[TEACHER] = True


def place() -> str:
    return st.session_state.get(WHERE, "")


def set_place(where: str) -> None:
    st.session_state[WHERE] = where


# -- Compare's setting B --------------------------------------------------------------------


def start_compare_b(preset: str) -> None:
    """B starts again from ``preset`` (its knob widgets re-seed, see compare.py)."""
    st.session_state.update({COMPARE_PRESET: preset, COMPARE_SPEC: get_preset(preset).spec})


def compare_b(first_preset: str) -> Spec:
    """Setting B: kept outside widget state across page switches; ``first_preset`` at first."""
    if COMPARE_PRESET not in st.session_state:
        start_compare_b(first_preset)
    st.session_state.setdefault(B_PRESET_WIDGET, st.session_state[COMPARE_PRESET])
    return st.session_state[COMPARE_SPEC]


def set_compare_b(spec_b: Spec) -> None:
    st.session_state[COMPARE_SPEC] = spec_b


# -- widget state: seeded from the setting, forgotten to re-seed ------------------------------


def keep_widget(key: str, allowed, fallback) -> None:
    """Before drawing widget ``key``: keep its value if still allowed, else use ``fallback``.
    Writing the value back on every run is what keeps it when the user switches pages
    (Streamlit forgets the state of widgets that a page does not draw)."""
    value = st.session_state.get(key, fallback)
    st.session_state[key] = value if value in allowed else fallback


def seed_widget(key: str, value: Any) -> None:
    """Widget ``key`` starts at ``value`` unless it holds one already."""
    st.session_state.setdefault(key, value)


def set_widget(key: str, value: Any) -> None:
    """Set widget ``key`` (from a callback, before the widget is drawn again)."""
    st.session_state[key] = value


def take_widget_value(key: str, default: Any = None) -> Any:
    """Widget ``key``'s value, removed from the session (a password is not kept)."""
    return st.session_state.pop(key, default)


def forget_widgets(prefixes: tuple[str, ...]) -> None:
    """Drop widget state under these key prefixes, so the widgets re-seed from the spec."""
    for key in [k for k in st.session_state if isinstance(k, str) and k.startswith(prefixes)]:
        del st.session_state[key]


def fields(container, params_class: type[Params], current: Params, workload, prefix: str) -> dict[str, Any]:
    """Widgets for every field of ``params_class``, seeded from ``current``; the values they
    hold, by name. ``workload`` gives the allowed splits (None for the workload's own shape)."""
    values = {}
    for knob in params_class.fields():
        key = f"{prefix}{knob.name}"
        options = widgets.offered(knob, workload)
        keep_widget(key, *widgets.seed(knob, getattr(current, knob.name), options))
        values[knob.name] = widgets.field_widget(container, knob, options, key)
    return values


def record_latency(current: Spec, latency_us: float) -> None:
    """Attach a measured latency to the latest try of ``current`` (for the tries chart)."""
    history = tries()
    for i in range(len(history) - 1, -1, -1):
        if history[i].spec == current:
            history[i] = dataclasses.replace(history[i], latency_us=latency_us)
            return


# -- choosing a workload, template, preset -----------------------------------------------


def presets_for(template: str) -> list[str]:
    return [p.id for p in all_presets().values() if p.spec.template == template]


def _start(spec: Spec, preset: str | None) -> None:
    """Replace the current view (a preset, a template, a workload was picked)."""
    st.session_state.update(spec=spec, preset=preset)
    st.session_state["ui.workload"] = spec.workload.kind
    st.session_state["ui.template"] = spec.template
    st.session_state["ui.preset"] = preset
    forget_widgets((KNOB_PREFIX, SHAPE_PREFIX))


def _start_template(name: str) -> None:
    ids = presets_for(name)
    if ids:
        _start(get_preset(ids[0]).spec, ids[0])
    else:
        template = get_template(name)
        _start(Spec(name, template.default_workload(), template.knobs()), None)


def _on_workload() -> None:
    _start_template(templates_for(st.session_state["ui.workload"])[0].name)


def _on_template() -> None:
    _start_template(st.session_state["ui.template"])


def _on_preset() -> None:
    chosen = st.session_state["ui.preset"]
    if chosen is None:
        st.session_state["preset"] = None
    else:
        _start(get_preset(chosen).spec, chosen)


def reset_to_preset() -> None:
    _start(get_preset(preset_id()).spec, preset_id())


def _preset_label(preset: str | None) -> str:
    return "— none (custom) —" if preset is None else ui.preset_label(preset)


def sidebar() -> Spec | None:
    """The sidebar: workload, template, preset, shape and knobs. Returns the Spec the
    widgets describe (and makes it current), or None when the shape is invalid (the
    reason is shown; the current Spec stays)."""
    current = spec()
    bar = st.sidebar
    workloads = workload_classes()
    keep_widget("ui.workload", list(workloads), current.workload.kind)
    kind = bar.selectbox("Workload", list(workloads), key="ui.workload", on_change=_on_workload,
                         format_func=lambda k: workloads[k].title)
    names = [t.name for t in templates_for(kind)]
    keep_widget("ui.template", names, current.template if current.template in names else names[0])
    name = bar.selectbox("Schedule template", names, key="ui.template", on_change=_on_template,
                         format_func=lambda n: TEMPLATES[n].title, help=TEMPLATES[current.template].summary)
    template = get_template(name)
    ids = [None, *presets_for(name)]
    keep_widget("ui.preset", ids, preset_id() if preset_id() in ids else ids[0])
    preset = bar.selectbox("Preset (a lesson step)", ids, key="ui.preset", on_change=_on_preset,
                           format_func=_preset_label)

    shape_box = bar.expander(f"Shape · {current.workload.label()}")
    shape = fields(shape_box, template.workload, current.workload, None, SHAPE_PREFIX + kind + ".")
    try:
        workload = template.workload.from_mapping(shape)
    except ExplorerError as e:
        bar.error(str(e))
        return None

    bar.markdown("**Knobs**")
    values = fields(bar, template.knobs, current.knobs, workload, KNOB_PREFIX + name + ".")
    new = Spec(name, workload, template.knobs.from_mapping(values))
    st.session_state["spec"] = new
    st.session_state["preset"] = preset

    if preset is not None:
        base = get_preset(preset).spec
        changed = [*new.workload.changed_from(base.workload), *new.knobs.changed_from(base.knobs)]
        bar.button("Reset to preset", on_click=reset_to_preset, disabled=not changed, width="stretch",
                   help="Put every knob and shape back to the preset's values.")
        if changed:
            bar.caption("Changed from the preset: " + ", ".join(changed))
    return new


def sync_url() -> None:
    """Write the current view into the URL (only when it changed, to keep history clean)."""
    query = urlstate.to_query(spec(), preset_id())
    if st.query_params.to_dict() != query:
        st.query_params.from_dict(query)


# -- building, with this session's tries --------------------------------------------------


def build_current(current: Spec) -> tuple[Build | None, str | None]:
    """Build ``current`` for the session's target: (build, None) or (None, the reason).
    A successful build that differs from the last try is recorded as a new try."""
    try:
        built = server.build(current, target())
    except ExplorerError as e:
        return None, str(e)
    history = tries()
    if not history or history[-1].spec != current or history[-1].build.target_key != built.target_key:
        history.append(Try(current, built))
        del history[:-HISTORY_LENGTH]
        if len(history) > TRIES_WITH_BUILD:
            history[-TRIES_WITH_BUILD - 1] = dataclasses.replace(history[-TRIES_WITH_BUILD - 1], build=None)
    return built, None


def last_try() -> Try | None:
    return tries()[-1] if tries() else None


def previous_try(current: Spec) -> Try | None:
    """The try before the current one (what the diffs compare with)."""
    history = tries()
    if history and history[-1].spec == current:
        history = history[:-1]
    return history[-1] if history else None


def describe_change(old: Spec, new: Spec) -> str:
    """'num_thread_x 16 → 8, unroll off → on' (or the template/workload when those changed)."""
    if old.template != new.template:
        return f"template {old.template} → {new.template}"
    parts = [
        f"{name} {widgets.format_value(getattr(a, name))} → {widgets.format_value(getattr(b, name))}"
        for a, b in ((old.workload, new.workload), (old.knobs, new.knobs))
        for name in b.changed_from(a)
    ]
    return ", ".join(parts) or "same setting"
