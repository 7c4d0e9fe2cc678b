"""The measured latency of a setting: asked for before the page builds it, measured once per
setting and device for the whole server (explorer.live), and shown while the page polls for it
(never blocking on the GPU): the current setting's panel, and a side of the vthread comparison."""
from __future__ import annotations

import time

import streamlit as st
from streamlit.runtime.scriptrunner import get_script_run_ctx

from explorer import figures, targets
from explorer.build import Build
from explorer.measure import QUICK_SETTINGS, describe_budget

from . import server, session, ui


def can_measure() -> bool:
    """Whether this session can time kernels: a GPU in this process, or an RPC tracker."""
    return targets.local_gpu_target() is not None or session.remote() is not None


def latency(built: Build) -> None:
    """The current setting's latency: measured once per setting and device for the whole
    server (checked against NumPy first, then timed), shown beside PyTorch's and on the
    roofline, with this session's tries as a chart. The page never blocks on the GPU: while
    the measurement waits or runs, a fragment polls for it."""
    job = _finished_job(built.spec, session.session_id())
    if job is None:
        return
    if job.error is not None:
        st.error(job.error)
        return
    result = job.result
    if not result.correct:
        st.error(result.summary())
        return
    _latency_metrics(result, built.spec)
    st.caption(f"Timed: {result.timing.describe()}.")  # a slow kernel gets few repeats: how far to trust it
    _versus_pytorch(result, built.spec.workload, server.live())
    st.caption(_measured_when(result, job))
    if getattr(result, "quick", False):
        st.caption(QUICK_NOTE)
    ui.chart(figures.tries_figure([(t.spec, t.latency_us) for t in session.tries()]), "tries")


def start_measuring(spec) -> None:
    """Ask for ``spec``'s measurement before this page builds it (where it can be measured):
    the measuring worker compiles the kernel while this process lowers it and runs the
    analyses. The worker checks the setting as the build does, so one the app refuses costs
    it only that check."""
    if server.live().warm.done:
        server.live().request(session.session_id(), spec, session.target(), session.remote())


def side_latency(side) -> None:
    """The side's measured latency, through the server's queue (its own slot per side, so it
    never replaces the session's main measurement); the page polls while it waits."""
    if not can_measure():
        st.caption("Latency: needs a GPU (or a TVM RPC tracker, Device page).")
        return
    job = _finished_job(side.spec, f"{session.session_id()}:vthread:{side.label}")
    if job is None:
        return
    if job.error is not None or not job.result.correct:
        st.error(job.error or job.result.summary())
    else:
        st.metric("Latency (median)", f"{job.result.median_us:.2f} µs", help=job.result.device)


def _finished_job(spec, slot: str):
    """The server's finished measurement job of ``spec`` for this session's ``slot`` (one
    waiting job per slot), or None while the GPU warms up or the job waits or runs (then
    the page says so and polls)."""
    live = server.live()
    if not live.warm.done:
        _warming_up(live)
        return None
    job = live.request(slot, spec, session.target(), session.remote())
    if not job.done:
        if poll_interval(live.position(job)) == POLL_NEAR_S:
            _measuring_near(job)
        else:
            _measuring_far(job)
        return None
    return job


QUICK_NOTE = (f"Timed with a short budget ({describe_budget(QUICK_SETTINGS)}) while other students' measurements "
              "waited; the server measures it again in full once the GPU is free, and the next look at this setting "
              "shows that.")

# While a measurement waits, a fragment reruns to show its place and then the latency:
# often near the front of the queue (short next to a warm measurement), once a second
# further back, so that a class waiting behind a long queue costs the server a few script
# runs a second instead of five per student.
POLL_NEAR_S = 0.25
POLL_FAR_S = 1.0
FAR_AHEAD = 3  # measurements ahead of a job from which its page polls POLL_FAR_S
WARM_UP_POLL_S = 0.5  # the warm-up takes seconds


def poll_interval(ahead: int | None) -> float:
    """How often a page waiting for a job with ``ahead`` measurements before it looks again
    (None: compiling, a second or two)."""
    return POLL_FAR_S if ahead is not None and ahead >= FAR_AHEAD else POLL_NEAR_S


@st.fragment(run_every=WARM_UP_POLL_S)
def _warming_up(live) -> None:
    if live.warm.done:
        st.rerun()
    steps = ", ".join(name for name, _ in live.warm.steps) or "starting"
    st.info(f"Warming up the GPU… ({steps}; {time.time() - live.warm.started:.0f} s). "
            "The code and the analyses below are ready; the latency follows.", icon=":material/hourglass_top:")


@st.fragment(run_every=POLL_NEAR_S)
def _measuring_near(job) -> None:
    _measuring(job, POLL_NEAR_S)


@st.fragment(run_every=POLL_FAR_S)
def _measuring_far(job) -> None:
    _measuring(job, POLL_FAR_S)


def _measuring(job, polling_every: float) -> None:
    """What a job waiting for the GPU is doing; the whole page again once it is done, or
    once it comes near the front of the queue (to look more often)."""
    ahead = server.live().position(job)
    if not job.done and not ahead and _looking_again():
        # Compiling or on the GPU: wait for the end here (at most until the next look) rather
        # than see it a look later. Only when looking again: the page's first run goes on to
        # the code views.
        job.wait(polling_every)
    if job.done or poll_interval(ahead) < polling_every:
        st.rerun()
    if job.state == "unreachable":
        st.info(job.error, icon=":material/sync:")
    elif job.state == "compiling":
        st.info("Compiling the kernel (NVRTC, on the server's compile processes); then the GPU checks and times it…",
                icon=":material/build:")
    elif ahead:
        st.info(f"Waiting for the GPU: {ahead} measurement(s) ahead of this one (one kernel is timed at a time).",
                icon=":material/hourglass_top:")
    else:
        st.info("Measuring: checking the result against NumPy, then timing…", icon=":material/timer:")


def _looking_again() -> bool:
    """Whether this run is a waiting fragment's own run (its timer's), not the page's."""
    context = get_script_run_ctx()
    return bool(context is not None and getattr(context, "fragment_ids_this_run", None))


def _latency_metrics(result, spec) -> None:
    session.record_latency(spec, result.median_us)
    previous = session.previous_try(spec)
    before = previous.latency_us if previous is not None else None
    cols = st.columns(4)
    cols[0].metric("Latency (median)", f"{result.median_us:.2f} µs",
                   f"{result.median_us - before:+.2f} µs" if before is not None else None, delta_color="inverse",
                   help=f"{result.device}; min {result.timing.min_us:.2f}, max {result.timing.max_us:.2f} µs")
    cols[1].metric("Compute", f"{result.gflops:,.0f} GFLOP/s")
    cols[2].metric("Compulsory traffic", f"{result.gbps:,.0f} GB/s", help="Inputs read once, output written once.")
    if result.percent_of_roofline is not None:
        cols[3].metric("Of the roofline", f"{result.percent_of_roofline:.0f}%",
                       help=f"The roofline allows {result.roofline_us:.2f} µs at best ({result.ceilings.source}): "
                       "100% is on the roof. The Roofline tab has the picture.")
    if result.graph is not None:
        roofline = (f"; {result.graph_percent_of_roofline:.0f}% of the roofline"
                 if result.graph_percent_of_roofline is not None else "")
        st.caption(f"Replayed from a CUDA graph, as PyTorch is timed: {result.graph_us:.2f} µs per launch{roofline}. "
                   "Back to back, each launch also pays the host's launch cost, "
                   "which a kernel of a few µs cannot hide.")


def _versus_pytorch(result, workload, live) -> None:
    """PyTorch's time on the same GPU, measured once per workload for the server."""
    if session.remote() is not None:
        return
    base = live.baseline(workload)
    if base is None:
        _baseline_pending(live, workload)
    elif base.median_us is not None:
        tvm_us, how = result.versus_pytorch
        st.caption(f"{base.library} on {base.device}: {base.median_us:.2f} µs — this schedule is "
                   f"{base.median_us / tvm_us:.2f}× its speed ({how}).")


@st.fragment(run_every=1.0)
def _baseline_pending(live, workload) -> None:
    if live.baseline(workload) is not None:
        st.rerun()
    st.caption("PyTorch's time for this workload is being measured (once for the whole class)…")


def _measured_when(result, job) -> str:
    age = job.age_s()
    when = "just now" if age < 60 else f"{age / 60:.0f} min ago"
    shared = len(job.sessions) - 1
    also = f"; {shared} other session(s) asked for this setting too" if shared > 0 else ""
    gpu = f" (GPU {result.gpu} of the server's)" if getattr(result, "gpu", None) is not None else ""
    return (f"Measured {when} on {result.device}{gpu}{also}. Each setting is measured once for the whole class and "
            f"again after {server.live().settings.measure_max_age_s / 60:.0f} min.")

