"""The Explorer's diagnosis panel: the few findings that most limit the current setting,
ranked, each with its evidence, its estimated cost and a link to the setting that addresses
it (explorer.analysis.diagnosis). On a server that measures, the suggestions can be tried
through the server's one queue as background work (behind every student's own
measurement), and each shows whether it was faster, and by how much; one measured slower
moves after the others, so the next suggestion leads. Where no move is estimated faster by
more than the model's error, the panel says the setting is near its limit instead.

A diagnosis builds every neighbouring setting: the server computes it once per setting (after
the setting's measurement, where it is measured), in a process of its own
(explorer.server.diagnosing), while the page polls."""
from __future__ import annotations

from concurrent.futures import Future

import streamlit as st

from explorer.analysis.diagnosis import Diagnosis, Finding
from explorer.build import Build, Spec
from explorer.claims import SAME_SPEED  # within ±5% a suggestion is as fast
from explorer.errors import ExplorerError, summary_line

from . import handle, latency, session, ui

POLL_S = 1.0  # a diagnosis takes seconds
PATIENCE_S = 30.0  # past this the page stops looking and says why (the diagnosing process is busy)


def job(spec: Spec, target: str) -> Future | None:
    """The server's diagnosis of ``spec`` for ``target``: started once, shared by every session;
    None while the setting's measurement is on its way (where this session measures): the
    diagnosis is placed on the measured roofline, so it waits for it (explorer.server.diagnosing)."""
    return handle.server().diagnosis(spec, target, measuring=latency.can_measure())


def panel(built: Build, preset: str | None = None) -> None:
    """The diagnosis at the top of the Explorer page (never blocks the page); its links start
    from ``preset`` (default: the session's)."""
    if not built.kernels:
        return
    with st.container(border=True):
        future = job(built.spec, session.target())
        if future is None:
            _after_the_measurement(built.spec)
            return
        if not future.done():
            ahead, waited_s = handle.server().diagnosis_queue(future)
            if waited_s < PATIENCE_S:
                _diagnosing(future)
            else:  # the page stops looking: a class keeps the diagnosing process busy
                st.caption(f"Diagnosis: not ready after {waited_s:.0f} s. The server diagnoses one setting at a "
                           f"time, a few seconds each, and {ahead} setting(s) the class opened are ahead of this one; "
                           "it stays queued and shows with your next move or when you open this setting again.")
            return
        try:
            diagnosis = future.result()
        except ExplorerError as error:
            st.caption(f"Diagnosis: {error}")
            return
        except Exception as error:  # a bug in one rule must not take the page down; it says what happened
            st.caption(f"Diagnosis failed: {summary_line(error)}")
            return
        show(diagnosis, preset or session.preset_id())


@st.fragment(run_every=POLL_S)
def _after_the_measurement(spec: Spec) -> None:
    if job(spec, session.target()) is not None:
        st.rerun()
    st.caption("Diagnosis: after this setting's measurement, so that it is placed on the measured roofline…")


@st.fragment(run_every=POLL_S)
def _diagnosing(future: Future) -> None:
    ahead, waited_s = handle.server().diagnosis_queue(future)
    if future.done() or waited_s >= PATIENCE_S:
        st.rerun()
    queue = f" ({ahead} ahead of it)" if ahead else ""
    st.caption(f"Diagnosing this setting{queue}: building its neighbouring settings to find what limits it…")


def show(d: Diagnosis, preset: str | None = None) -> None:
    evidence = "static evidence only, no GPU measured this setting" if d.static else \
        f"measured {d.measured_us:.2f} µs, {100 * d.bound_us / d.measured_us:.0f}% of the roofline"
    st.markdown(f"**What limits this setting** — {evidence}; the roofline allows {d.bound_us:.2f} µs "
                f"({d.bound}-bound).")
    if d.limit is not None:
        st.markdown(d.limit)
    if not d.findings:
        st.caption("No finding costs more than a few percent of the roofline's time.")
        return
    tried = _tried(d)
    for rank, found in enumerate(ordered(d, tried), start=1):
        left, right = st.columns([4, 1], vertical_alignment="center")
        share = f", {100 * found.cost_us / d.bound_us:.0f}% of the roofline's time" if d.bound_us else ""
        left.markdown(f"{rank}. :red[**{found.title}**]" if found.wrong else
                      f"{rank}. **{found.title}** ≈ {found.cost_us:.2f} µs{share}")
        s = found.suggestion
        if s is None:
            if found.wrong:
                left.caption("No single knob move removes it.")
            elif d.limit is None:
                left.caption("No single knob move lowers this by more than the model's error.")
        else:
            left.caption(f"Try {s.describe()} (estimate {s.total_us:.2f} µs, now {d.estimate_us:.2f} µs)."
                         + (f" {tried[s.spec][0]}" if s.spec in tried else ""))
            link = ui.explorer_link(s.spec, preset)
            right.link_button("Open this setting", link, icon=":material/open_in_new:", width="stretch")
        with left.expander("Evidence"):
            st.markdown("\n".join(f"- {line}" for line in found.evidence) + f"\n\nCost: {found.cost_rule}.")
    _try_button(d, tried)


# -- trying the suggestions on the GPU ------------------------------------------------------


def _suggested(d: Diagnosis) -> list[Spec]:
    return [s.spec for s in d.suggestions(len(d.findings))]


def ordered(d: Diagnosis, tried: dict[Spec, tuple[str, bool]]) -> list[Finding]:
    """The findings in rank order, except that those whose suggestion the server measured slower than
    this setting (or wrong) go last: the next suggestion leads."""
    def worse(found: Finding) -> bool:
        return found.suggestion is not None and tried.get(found.suggestion.spec, ("", False))[1]

    return [f for f in d.findings if not worse(f)] + [f for f in d.findings if worse(f)]


def _tried(d: Diagnosis) -> dict[Spec, tuple[str, bool]]:
    """What the server's measurements say of each suggestion so far (none asked for here): its
    sentence, and whether it was slower than this setting or wrong."""
    if not latency.can_measure():
        return {}
    server, target, remote = handle.server(), session.target(), session.remote()
    now = server.result(d.spec, target, remote)
    if not getattr(now, "correct", False):
        return {}
    out = {}
    for spec in _suggested(d):
        result = server.result(spec, target, remote)
        if result is not None:
            suggested_us = result.median_us if result.correct else None
            out[spec] = (verdict(now.median_us, suggested_us), not_faster(now.median_us, suggested_us))
    return out


def not_faster(now_us: float, suggested_us: float | None) -> bool:
    """A tried suggestion measured slower than this setting, or wrong: shown after the others."""
    return suggested_us is None or now_us / suggested_us <= 1 - SAME_SPEED


def verdict(now_us: float, suggested_us: float | None) -> str:
    """One sentence on a tried suggestion: faster, slower (shown as such) or the same speed."""
    if suggested_us is None:
        return "Tried on the GPU: its result was wrong."
    ratio = now_us / suggested_us
    if ratio >= 1 + SAME_SPEED:
        return f"Tried on the GPU: faster, {suggested_us:.2f} µs ({ratio:.2f}× this setting's speed)."
    if ratio <= 1 - SAME_SPEED:
        return f"Tried on the GPU: slower, {suggested_us:.2f} µs ({1 / ratio:.2f}× this setting's time)."
    return f"Tried on the GPU: the same speed, {suggested_us:.2f} µs."


def _try_button(d: Diagnosis, tried: dict) -> None:
    if not latency.can_measure():
        return
    asked = session.memo("diagnosis.tries")  # setting -> the background jobs this session asked for
    pending = [spec for spec in _suggested(d) if spec not in tried]
    if pending and d.spec not in asked and st.button(
            "Try the suggestions on the GPU", key="ui.diagnosis.try", icon=":material/science:",
            help="Each suggested setting is measured through the server's queue, behind every student's own "
                 "measurement, then shown here as faster or slower than this one."):
        server, target, remote = handle.server(), session.target(), session.remote()
        asked[d.spec] = [server.request(None, spec, target, remote, background=True) for spec in [d.spec, *pending]]
    jobs = asked.get(d.spec, ())
    if any(not j.done for j in jobs):
        _trying(jobs)


@st.fragment(run_every=POLL_S)
def _trying(jobs) -> None:
    if all(j.done for j in jobs):
        st.rerun()
    waiting = sum(not j.done for j in jobs)
    st.caption(f"Trying the suggestions: {waiting} measurement(s) waiting behind the students' own…")
