"""Sweep: every combination of a few knobs of the sidebar's setting, compiled in parallel
and measured on the GPU one at a time (without a GPU: ranked by the static analyses,
labelled so); a heatmap over two of them; "apply best" sets the sidebar's knobs.
Below it, MetaSchedule tunes the same workload with a trial budget."""
import functools

import streamlit as st

from app import server, session, ui, widgets
from explorer.analysis.ranking import static_score
from explorer.errors import ExplorerError
from explorer.export import file_name
from explorer.search import sweep, tune
from explorer.search.figures import heatmap_figure, tuning_figure
from explorer.search.grid import Grid

# Values a knob offers before the user narrows them; knobs with more start at the current value.
MAX_DEFAULT_VALUES = 8
# More points than this are sampled at random (the app is for exploring, bench/ for searching).
MAX_APP_POINTS = 2000
FIRST_AXES = ("num_thread_x", "num_thread_y", "thread_m", "thread_n", "tile_f", "tile_x")


def apply_best(best) -> None:
    """Make the best point the sidebar's setting and show it in the Explorer."""
    session.set_spec(best)
    st.switch_page("views/explorer.py")


def grid_inputs(spec):
    """The knobs to sweep and their values; a Grid, or None with the reason shown."""
    names = [knob.name for knob in spec.knobs.fields()]
    first = [n for n in FIRST_AXES if n in names][:2] or names[:2]
    chosen = st.multiselect("Knobs to sweep (the others keep the sidebar's values)", names, default=first,
                            key=f"sweep.knobs.{spec.template}")
    if not chosen:
        st.info("Choose at least one knob to sweep.")
        return None
    axes = []
    for column, name in zip(st.columns(len(chosen)), chosen, strict=False):
        knob = spec.knobs.field(name)
        options = knob.values(spec.workload)
        default = list(options) if len(options) <= MAX_DEFAULT_VALUES else [getattr(spec.knobs, name)]
        values = column.multiselect(name, options, default=default, format_func=widgets.format_value,
                                    key=f"sweep.values.{spec.template}.{name}", help=knob.help)
        axes.append((name, tuple(values)))
    try:
        return Grid(spec, tuple(axes))
    except ExplorerError as e:
        st.error(str(e))
        return None


def run_sweep(grid, sample, measurer) -> None:
    bar = st.progress(0.0, text="Starting the compile workers…")
    try:
        result = sweep.run(grid, target=session.target(), measurer=measurer, scorer=static_score,
                           sample=sample,
                           on_progress=lambda p: bar.progress(p.fraction, text=p.describe(measurer is not None)))
    except ExplorerError as e:
        bar.empty()
        st.error(str(e))
        return
    bar.empty()
    session.keep_result("sweep", result)


def show_result(result) -> None:
    if result.measured:
        st.success(result.ranking)
    else:
        st.warning(result.ranking)
    best = result.best
    done = f"{len(result.points)} points in {result.elapsed_s:.1f} s ({result.per_minute:.0f} per minute)"
    if best is None:
        st.error(f"No valid combination among {done}.")
    else:
        changed = {n: widgets.format_value(getattr(best.knobs, n)) for n in result.grid.knob_names}
        value = f"{best.latency_us:.2f} µs" if result.measured else f"{best.static.cost:.3g}"
        left, right = st.columns([3, 1])
        left.metric("Best " + result.value_label, value, help=done)
        left.caption("Best: " + ", ".join(f"{n} = {v}" for n, v in changed.items()) + f" · {done}")
        if right.button("Apply best", type="primary", icon=":material/check:", width="stretch",
                        help="Set the sidebar's knobs to the best point and open it in the Explorer."):
            apply_best(result.best_spec())
    if len(result.grid.knob_names) >= 2:
        names = list(result.grid.knob_names)
        x_col, y_col = st.columns(2)
        x = x_col.selectbox("Heatmap x", names, index=0, key="sweep.x")
        y = y_col.selectbox("Heatmap y", [n for n in names if n != x], index=0, key="sweep.y")
        ui.chart(heatmap_figure(result, x, y), "sweep-heatmap")
    st.dataframe(result.table(), hide_index=True, width="stretch")
    reasons = result.skipped_reasons()
    if reasons:
        with st.expander(f"Skipped: {len(result.skipped())} of {len(result.points)}"):
            st.dataframe([{"status": s, "how many": n, "example": r} for s, n, r in reasons], hide_index=True,
                         width="stretch")


def tune_section(spec) -> None:
    st.header("Tune with MetaSchedule")
    has_gpu = server.live().gpu_name() is not None
    timed = "timed on this machine's GPU" if has_gpu else "timed on a GPU, which this machine does not have"
    st.caption(f"TVM's own search over its schedule space for {spec.workload.label()}, with a trial budget; "
               f"candidates are ranked with the '{tune.cost_model_name()}' cost model and {timed}.")
    if not has_gpu:
        st.info("MetaSchedule must run its candidates, and this machine has no GPU: run the app on a GPU machine "
                "to tune (or try `python -m explorer tune PRESET --trials 8 --target llvm` on the CPU).")
    left, right = st.columns(2)
    trials = left.number_input("Trial budget", min_value=1, max_value=tune.MAX_TRIALS, value=64, step=32,
                               key="tune.trials")
    strategy = right.selectbox("Search", ("evolutionary", "replay-trace"), key="tune.strategy",
                               help="evolutionary mutates the best candidates so far; replay-trace samples "
                                    "the space at random.")
    if st.button("Run MetaSchedule", disabled=not has_gpu, icon=":material/tune:"):
        bar = st.progress(0.0, text="Generating candidates…")
        try:
            session.keep_result("tune", tune.tune(
                spec.workload, int(trials), target=session.target(), strategy=strategy,
                on_progress=lambda p: bar.progress(p.fraction, text=p.describe())))
        except ExplorerError as e:
            st.error(str(e))
        bar.empty()
    result = session.kept_result("tune")
    if result is None or result.workload != spec.workload:
        return
    st.metric("MetaSchedule best", f"{result.best_us:.2f} µs",
              help=f"{result.trials} trials in {result.elapsed_s:.0f} s, {result.strategy} search")
    ui.chart(tuning_figure(result.history, result.budget), "tune-progress")
    hand, tuned = st.columns(2)
    try:
        hand_trace = server.build(spec, session.target()).trace
    except ExplorerError as e:
        hand_trace = f"# the sidebar's setting cannot be built: {e}"
    hand.markdown(f"**Hand schedule** · {spec.template}")
    hand.code(hand_trace, language="python", line_numbers=True)
    tuned.markdown("**MetaSchedule's best** (its trace)")
    tuned.code(result.trace, language="python", line_numbers=True)
    st.download_button("Export the tuned schedule as a Python script", data=functools.partial(tune.snippet, result),
                       file_name=file_name(spec, "metaschedule"), mime="text/x-python", on_click="ignore",
                       icon=":material/download:")


spec = session.sidebar() or session.spec()
session.sync_url()
st.title("Sweep")
st.caption(f"{spec.template_def.title} · {spec.workload.label()}")
grid = grid_inputs(spec)
measurer = server.live().measurer(session.target(), session.remote())
if grid is not None:
    sample = None
    if grid.size > MAX_APP_POINTS:
        sample = st.number_input(f"The grid has {grid.size:,} points; try this many, chosen at random",
                                 min_value=1, max_value=MAX_APP_POINTS, value=min(500, MAX_APP_POINTS))
    how = "compiled on every CPU core and measured on the GPU one at a time" if measurer else \
        "compiled on every CPU core; no GPU, so ranked by the static analyses"
    if st.button(f"Run sweep · {sample or grid.size:,} points", type="primary", icon=":material/play_arrow:",
                 help=how):
        run_sweep(grid, sample, measurer)
result = session.kept_result("sweep")
if result is not None and (result.grid.base.template, result.grid.base.workload) == (spec.template, spec.workload):
    show_result(result)
st.divider()
tune_section(spec)
