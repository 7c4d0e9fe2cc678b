"""The Explorer's panels of a build: its launch summary and headline numbers, and a tab per
analysis (explorer/analyses.py: the tabs' order and titles), drawn by ``explorer.figures``.

``PANELS`` holds the analyses with a panel of their own (widgets, several figures, tables), keyed
by the analysis's name; :func:`default_panel` shows any other: its figure, then its text."""
from __future__ import annotations

import math

import numpy as np
import streamlit as st

from explorer import figures, targets
from explorer.analyses import Analysis
from explorer.analysis import banks, ncu, races, tree
from explorer.analysis.resources import analyze_resources
from explorer.analysis.roofline import compute_types, no_roofline_reason, published_ceilings
from explorer.analysis.roofline import roofline as place_on_roofline
from explorer.analysis.sass import SHARED_NOTE, analyze_sass, compile_binary, dynamic_shared, resources_line, sass_text
from explorer.analysis.tiling import analyze_tiling
from explorer.analysis.vthread import WHAT_VTHREADS_DO, compare_vthreads
from explorer.analysis.written import analyze_written, is_written
from explorer.build import Build
from explorer.errors import ExplorerError
from explorer.units import byte_size, count

from . import code_view, latency, server, session, ui

# A heatmap larger than this is slow to build (Plotly validates every cell) and to draw.
MAX_FIGURE_CELLS = 1 << 16


def launch_summary(built: Build) -> str:
    """One line: kernels, grid × block, shared memory; e.g. for the line that says how a setting built."""
    if not built.kernels:
        return f"{targets.target_label(built.target)}: host code only"
    parts = []
    for k in built.kernels:
        parts.append(f"{count(k.blocks, 'block')} × {count(k.threads_per_block, 'thread')}, "
                     f"{byte_size(k.shared_bytes)} shared")
    return f"{targets.target_label(built.target)}: " + "; ".join(parts)


def shared_split(kernel) -> str:
    """A kernel's shared memory in bytes, static and dynamic: what a block asks for."""
    if not kernel.dynamic_shared_bytes:
        return f"{kernel.shared_bytes:,} bytes, all static"
    return (f"{kernel.shared_bytes:,} bytes: {kernel.static_shared_bytes:,} static, {kernel.dynamic_shared_bytes:,} "
            "dynamic (given at launch)")


def metrics(built: Build, container=st) -> None:
    """Headline numbers of the launch (of the first kernel, the others in the table)."""
    if not built.kernels:
        container.caption("No GPU kernel in this build.")
        return
    k = built.kernels[0]
    cols = container.columns(4)
    cols[0].metric("Threads per block", f"{k.threads_per_block}", help=f"block {k.block} (x, y, z)")
    cols[1].metric("Blocks", f"{k.blocks:,}", help=f"grid {k.grid} (x, y, z)")
    cols[2].metric("Shared mem / block", byte_size(k.shared_bytes), help=shared_split(k))
    cols[3].metric("Kernels", f"{len(built.kernels)}",
                   help="Separate kernels round-trip intermediate results through global memory.")


def compiled_binary(built: Build):
    """compile_binary(built): registers, spills and shared memory from the cubin (NVRTC,
    no toolkit needed; nvcc where NVRTC is missing), or None when neither is installed."""
    try:
        with st.spinner("Compiling to a cubin for registers and spills…"):
            return compile_binary(built)
    except ExplorerError as e:
        st.warning(str(e))
        return None


def resources(built: Build) -> None:
    """Threads, shared memory, registers per kernel and the occupancy they allow."""
    binary = compiled_binary(built)
    if binary is None:
        st.caption("Registers: not compiled (neither NVRTC with nvdisasm nor nvcc is installed here; "
                   "pip install -r requirements.txt brings NVRTC and nvdisasm).")
    try:
        report = analyze_resources(built, binary)
    except ExplorerError as e:
        st.info(str(e))
        return
    st.dataframe([
        {"kernel": k.kernel, "grid (x,y,z)": str(k.grid), "block (x,y,z)": str(k.block),
         "threads/block": k.threads_per_block, "shared bytes": k.shared_bytes, "registers/thread": str(k.registers),
         "spill bytes": str(k.spill_bytes), "blocks/SM": k.occupancy.blocks_per_sm,
         "occupancy": f"{k.occupancy.occupancy:.0%}", "limited by": k.occupancy.limiter}
        for k in report.kernels
    ], hide_index=True)
    for kernel in report.kernels:
        ui.chart(figures.occupancy_figure(kernel), key=f"occupancy-{kernel.kernel}")
    st.caption(" ".join(report.notes))


def _sass_report(built):
    """The SASS report of a build, compiled once per CUDA source and architecture
    (explorer.analysis.sass caches it); an ExplorerError when it cannot be made here."""
    with st.spinner("Compiling to a cubin with NVRTC and disassembling it…"):
        return analyze_sass(built)


def sass(built: Build) -> None:
    """The SASS tab: per kernel its resources, the instruction mix (beside the previous
    try's), and the SASS under the CUDA line of each instruction, or its diff."""
    try:
        report = _sass_report(built)
    except ExplorerError as error:
        st.info(str(error))
        return
    previous_try = session.previous_try(built.spec)
    previous = None
    if previous_try is not None and previous_try.build.cuda:
        try:
            previous = _sass_report(previous_try.build)
        except ExplorerError:
            previous = None
    before = {k.kernel: k for k in previous.kernels} if previous is not None else {}
    order = st.segmented_control(
        "Order", ["program", "CUDA line"], default="program", key="ui.sass.order",
        help="Program order shows where the scheduler interleaved the lines; CUDA line gathers each line's "
             "instructions under it once.") or "program"
    mode = "line" if order == "CUDA line" else "address"
    dynamic = dynamic_shared(built)
    for kernel in report.kernels:
        st.markdown(f"**{kernel.kernel}** — {resources_line(kernel, dynamic.get(kernel.kernel, 0))}")
        rows = [{"instruction": label, "count": n} for label, n in kernel.mix.rows()]
        if kernel.kernel in before:
            old = dict(before[kernel.kernel].mix.rows())
            for row in rows:
                row["previous try"] = old.get(row["instruction"], 0)
        st.dataframe(rows, hide_index=True, key=f"sass-mix-{kernel.kernel}")
        text = sass_text(kernel, built.cuda, mode)
        if st.session_state.get("ui.diff") and kernel.kernel in before:
            code_view.show_diff(sass_text(before[kernel.kernel], previous_try.build.cuda, mode), text, "sass",
                                "previous", "now")
        else:
            code_view.show_code(text, "sass", "sass",
                                f"SASS of {kernel.kernel} for {report.arch}, under its CUDA lines")
    st.caption(f"Compiled and read without a CUDA toolkit: {', '.join(report.tools)}. Counts are static: each "
               "instruction once, however often it runs. LDS/STS/LDG/STG/LDL/STL are split by the bits one thread "
               "moves (LDS.64: two floats); SHFL are warp shuffles (a lane reads another lane's register); loop "
               "branches jump back to an earlier address, a loop not unrolled. "
               + SHARED_NOTE)


def tiling(built: Build) -> None:
    """Who computes each output (block, vthread, thread, iteration) and what a block and a
    thread read: the blog's tiling pictures, from this very build."""
    kernel = built.kernels[0] if built.kernels else None
    if kernel is None:
        st.caption("A CPU build has no thread blocks.")
        return
    if is_written(built.spec.template_def):
        written_tiling(built, kernel)
        return
    cols = st.columns([2, 1, 1, 1])
    block = _index_input(cols[1], "Block", kernel.blocks, "ui.tiling.block",
                         "Linear block id (blockIdx.x fastest) for the figures of one block.")
    tx = _index_input(cols[2], "threadIdx.x", kernel.block[0], "ui.tiling.tx")
    ty = _index_input(cols[3], "threadIdx.y", kernel.block[1], "ui.tiling.ty")
    try:
        t = analyze_tiling(built, block, (tx, ty, 0))
    except ExplorerError as e:
        st.info(str(e))
        return
    # Only the colourings that tell this setting's outputs apart: vthreads and inner iterations where it has them.
    roles = {loop.role for loop in t.loops if loop.extent > 1}
    sharing = math.prod(loop.extent for loop in t.loops if loop.role == "thread" and loop.reduces)
    owning = any(loop.role == "thread" and not loop.reduces and loop.extent > 1 for loop in t.loops)
    ways = ["block", *(["vthread"] if "vthread" in roles else []), *(["thread"] if owning else []),
            *(["iteration"] if roles & {"inner", "fixed"} else [])]
    colour_by = "block"
    if len(ways) > 1:
        colour_by = cols[0].segmented_control("Colour the outputs by", ways, default="block",
                                              key="ui.tiling.colour") or "block"
        colour_by = colour_by if colour_by in ways else "block"
    if sharing > 1:
        st.markdown(f"Each block computes **{count(t.outputs_per_block, 'output')}**; its **{sharing}** threads "
                    f"share each one (a reduction across threads), each adding its part of the inputs below.")
    else:
        st.markdown(f"Each thread computes **{count(t.outputs_per_thread, 'output')}**, each block "
                    f"**{count(t.outputs_per_block, 'output')}**.")
    cells = t.ownership.shape[0] * t.ownership.shape[1]
    if cells <= MAX_FIGURE_CELLS:
        left, right = st.columns(2)
        ui.chart(figures.ownership_figure(t, colour_by), "tiling-all", left)
        if owning:
            ui.chart(figures.ownership_figure(t, "thread", block=block), "tiling-block", right)
    else:
        st.caption(f"The output plane {t.ownership.plane} has {cells:,} elements, too many to draw "
                   f"(up to {MAX_FIGURE_CELLS:,}); choose a smaller shape to see it.")
    columns = st.columns(max(len(t.footprints), 1))
    for i, (column, footprint) in enumerate(zip(columns, t.footprints, strict=False)):
        if len(footprint.block_cells) and math.prod(np.ptp(footprint.block_cells, axis=0) + 1) > MAX_FIGURE_CELLS:
            column.caption(f"{footprint.buffer}: block {t.chosen_block} reads {footprint.block_elements:,} elements, "
                           f"thread {t.chosen_thread} reads {footprint.thread_elements:,}; too large to draw.")
        else:
            ui.chart(figures.footprint_figure(t, i), f"footprint-{i}", column)
    if t.notes:
        st.caption(" ".join(t.notes))


def _index_input(container, label: str, extent: int, key: str, help: str | None = None) -> int:
    """An index 0 … extent − 1 (a block, a thread), shown only where there is more than one to choose; a value
    kept from another setting that this one does not have goes back to 0."""
    if extent <= 1:
        return 0
    session.keep_widget(key, range(extent), 0)
    return container.number_input(label, 0, extent - 1, 0, key=key, help=help)


def written_tiling(built: Build, kernel) -> None:
    """A kernel written out: what a block, a warp and a thread own, and (attention) the key and value tiles
    each block walks, read from its own loads and stores (explorer/analysis/written.py)."""
    cols = st.columns([2, 1])
    colour_by = cols[0].segmented_control("Colour the block's elements by", ["warp", "thread"], default="warp",
                                          key="ui.tiling.written_colour") or "warp"
    block = _index_input(cols[1], "Block", kernel.blocks, "ui.tiling.block",
                         "Linear block id (blockIdx.x fastest) of the first kernel: the block described and drawn.")
    try:
        t = analyze_written(built, block)
    except ExplorerError as e:
        st.info(str(e))
        return
    st.markdown("\n".join(f"- {sentence}" for sentence in t.sentences))
    left, right = st.columns(2)
    if t.walk is not None:
        ui.chart(figures.walk_figure(t), "tiling-walk", left)
    elif t.cell_owner is not None:
        ui.chart(figures.cells_figure(t), "tiling-cells", left)
    target = right if t.walk is not None or t.cell_owner is not None else left
    cells = (int(np.ptp(t.rows)) + 1) * (int(np.ptp(t.cols)) + 1) if t.rows.size else 0
    if 0 < cells <= MAX_FIGURE_CELLS:
        ui.chart(figures.written_owners_figure(t, colour_by), "tiling-owners", target)
    else:
        target.caption(f"Block {t.chosen_block}'s part of {t.buffer} is too large to draw (up to "
                       f"{MAX_FIGURE_CELLS:,} elements).")
    st.caption(" ".join((*t.notes, t.loads_rule)))


RACES_SHOWN = 4  # races written out in the tab (the rest counted)


def race_check(built: Build) -> None:
    """The static race check above the bank model: a race makes the result wrong, whatever its speed."""
    report = races.analyze_races(built)
    found = report.races
    if found:
        lines = [f"- {race.kernel}: {race.sentence()}" for race in found[:RACES_SHOWN]]
        if len(found) > RACES_SHOWN:
            lines.append(f"- … and {len(found) - RACES_SHOWN} more pairs of accesses.")
        st.error("**Shared-memory race: this kernel's result is wrong.** A thread writes a location another thread "
                 "reads or writes with nothing ordering them: a __syncthreads() between them (a __syncwarp() for "
                 "lanes of one warp) is missing.\n" + "\n".join(lines), icon=":material/error:")
    elif any(k.checked for k in report.kernels):
        st.caption(f"Race check: no shared-memory race among "
                   f"{sum(k.checked for k in report.kernels):,} accesses checked.")
    if report.unchecked:
        st.caption(" ".join(report.unchecked))


def bank_conflicts(built: Build) -> None:
    """The race check, then the shared-memory bank-conflict model: every access, and one warp's lanes → banks."""
    race_check(built)
    report = banks.analyze_banks(built)
    accesses = [(k, a) for k in report.kernels for a in k.accesses]
    st.markdown("**Modelled bank conflicts for the whole launch** — "
                + " ".join(banks.headline(k) for k in report.kernels))
    tiles = [t for k in report.kernels for t in k.tiles]
    if tiles:
        shared_tiles(tiles)
    if not accesses:
        return
    ui.chart(figures.conflicts_figure(report), key="banks-all")
    modelled = {f"{k.kernel} #{a.number} {a.op} · {a.text}": (k, a) for k, a in accesses if not a.not_modelled}
    if modelled:
        cols = st.columns([3, 1])
        label = cols[0].selectbox("Access", list(modelled), key="ui.banks.access")
        kernel, access = modelled[label]
        warp = cols[1].number_input("Warp", 0, kernel.warps_per_block - 1, 0, key="ui.banks.warp")
        lanes = banks.lane_map(built, kernel.kernel, access.number, warp)
        left, right = st.columns(2)
        ui.chart(figures.bank_figure(lanes), "banks-wavefronts", left)
        ui.chart(figures.lanes_figure(lanes), "banks-lanes", right)
    st.dataframe([
        {"kernel": k.kernel, "#": a.number, "op": a.op, "access": a.text, "bytes/lane": a.access_bytes,
         "max n-way": a.max_degree, "mean n-way": round(a.mean_degree, 2),
         "wavefronts/request": round(a.wavefronts_per_request, 2), "requests": a.requests, "conflicts": a.conflicts,
         "note": a.not_modelled or ("sampled" if a.sampled else "")}
        for k, a in accesses
    ], hide_index=True)
    with st.expander("What the model assumes"):
        st.markdown("\n".join(f"- {line}" for line in (*report.assumptions, *report.notes,
                                                          *races.analyze_races(built).assumptions)))


def shared_tiles(tiles) -> None:
    """The shared buffers that TMA writes, wgmma reads through descriptors and mbarriers guard, and the
    banks of one core matrix under their swizzle (explorer/analysis/tiles.py)."""
    st.dataframe([
        {"kernel": t.kernel, "buffer": t.buffer, "what": t.role, "type": t.dtype, "bytes": t.bytes,
         "TMA copies in the code": t.tma_copies, "wgmma descriptors": t.descriptors,
         "mbarrier instructions": t.barrier_uses,
         "swizzle": f"{t.swizzle_bytes} B" if t.swizzle_bytes else "none",
         "core matrix": f"{t.core_matrix_ways}-way ({t.unswizzled_ways}-way unswizzled)" if t.swizzle_bytes else ""}
        for t in tiles], hide_index=True, key="banks-tiles")
    for row_bytes in sorted({t.swizzle_bytes for t in tiles if t.swizzle_bytes}):
        ui.chart(figures.swizzle_figure(row_bytes), f"banks-swizzle-{row_bytes}")
    st.caption("wgmma reads an operand in 8 × 16-byte core matrices (PTX ISA, matrix descriptors); the model reads "
               "one core matrix of each tile as one 128-byte request. NVIDIA does not document the order in which "
               "wgmma reads shared memory, nor does the TMA unit's writing show as a thread's store: their bank "
               "conflicts are not counted above.")


def reduction_tree(built: Build) -> None:
    """The written sum's shared-memory tree step by step: active and idle threads, idle and
    divergent warps, bank ways and the barrier of each step."""
    try:
        report = tree.analyze_tree(built.spec)
    except ExplorerError as e:
        st.info(str(e))
        return
    st.markdown(f"**A block of {report.threads} threads ({report.warps} warps) adds its sums in "
                f"{len(report.steps)} steps** — worst bank conflict {report.worst_bank_ways}-way; both kernels "
                "run this tree.")
    ui.chart(figures.tree_figure(report), key="tree-steps-figure")
    st.dataframe([
        {"step size s": t.s, "stage": t.stage, "active threads": t.active_threads, "needed": t.needed_threads,
         "idle threads": t.idle_threads, "idle warps": t.idle_warps, "divergent warps": t.divergent_warps,
         "bank ways": "registers only" if t.bank_ways is None else f"{t.bank_ways}-way", "then": t.barrier}
        for t in report.steps
    ], hide_index=True, key="tree-steps")
    st.caption("Active threads execute the step's add; needed ones add a sum a later step reads (the last warp's "
               "lanes all add, needed or not). A divergent warp has lanes that add beside lanes that wait; an idle "
               "warp has none that add. Bank ways: the most distinct 4-byte words one of the 32 banks serves in any "
               "warp's shared-memory access of the step (the Bank conflicts tab counts them for the whole launch).")


def vthreads(built: Build) -> None:
    """This setting beside the same block and threads without vthreads: loop nests, the
    outputs each thread owns, one warp's shared load and its banks, and latencies."""
    try:
        comparison = compare_vthreads(built.spec, built.target)
    except ExplorerError as e:
        st.info(str(e))
        return
    if comparison.missing:
        st.info(comparison.missing)
        return
    st.caption(WHAT_VTHREADS_DO)
    st.markdown("\n".join(f"- {sentence}" for sentence in comparison.explanation))
    for i, (column, side) in enumerate(zip(st.columns(2), comparison.sides, strict=True)):
        with column:
            st.markdown(f"**{side.label.capitalize()}**")
            st.caption(", ".join(f"{name} = {value}" for name, value in comparison.changed_knobs(i).items()))
            latency.side_latency(side)
            st.code("\n".join(side.scheduled), language="python")
            with st.expander("Lowered TIR (the vthread loop is gone)"):
                st.code("\n".join(side.lowered), language="python")
            ui.chart(figures.ownership_figure(side.tiling, "thread", block=0), key=f"vthread-owners-{i}")
            if side.shared_load is not None:
                ui.chart(figures.bank_figure(side.shared_load.lanes, side.shared_load.access.text),
                                key=f"vthread-banks-{i}")


def roofline(built: Build) -> None:
    """The workload's intensity under the device's roofs, the current setting's point
    (measured by the latency panel, else a static estimate) and this session's tries."""
    measured = _latest_measurement(built)
    try:
        ceilings = _measured_ceilings() or published_ceilings(str(built.target.attrs.get("arch", "")))
        tries = tuple((f"try {i}", t.spec.workload, t.latency_us, compute_types(t.spec))
                      for i, t in enumerate(session.tries(), start=1)
                      if t.latency_us is not None and t.spec != built.spec
                      and not no_roofline_reason(t.spec.workload, ceilings, compute_types(t.spec)))
        r = place_on_roofline(built.spec.workload, ceilings, measured.median_us if measured else None, tries,
                              compute_types(built.spec))
    except ExplorerError as e:  # no figures for this target, or a workload the roofline does not cover
        st.info(str(e))
        return
    bandwidth, roof = r.roof
    peak, compute = r.compute_roof
    cols = st.columns(3)
    cols[0].metric("Arithmetic intensity", f"{r.intensity:.2f} FLOP/B",
                   help=f"{r.flops:,} FLOPs over {r.compulsory_bytes:,} compulsory bytes (inputs read once, "
                   "output written once).")
    cols[1].metric("Attainable", f"{r.attainable_gflops:,.0f} GFLOP/s",
                   help=f"min({compute} peak {peak:,.0f} GFLOP/s, intensity × {roof} {bandwidth:,.0f} GB/s)")
    cols[2].metric("This setting" if measured else "Static estimate", f"{r.current.percent_of_attainable:.0f}%",
                   help="Achieved ÷ attainable GFLOP/s." if measured else
                   "Not measured: placed on the roof, the best any schedule can do.")
    ui.chart(figures.roofline_figure(r), key="roofline")
    st.caption(" ".join(r.notes))


def _latest_measurement(built: Build):
    """The server's correct measurement of this setting (the latency panel's), or None."""
    result = server.live().result(built.spec, session.target(), session.remote())
    return result if getattr(result, "correct", False) and result.ceilings is not None else None


def _measured_ceilings():
    """The ceilings of the local device from any measurement so far (they are measured
    once per device), or None before the first one."""
    return server.live().latest_ceilings()


def counters(built: Build) -> None:
    """Nsight Compute's counters of one launch of this setting, each beside the static
    model's prediction, with agreement flagged; without ncu or a GPU, how to get them."""
    if not built.kernels:
        st.caption("A CPU build has no kernel to profile.")
        return
    if ncu.ncu_path() is None or targets.local_gpu_target() is None:
        missing = "Nsight Compute (ncu)" if ncu.ncu_path() is None else "a local NVIDIA GPU"
        st.info(f"The counters need {missing} on the machine that runs this app. {ncu.HOW_TO_GET_NCU} "
                "The bank, resource and roofline tabs show the static models meanwhile.")
        return
    profiles = session.memo("ncu_profiles")
    key = (built.spec, built.target_key)
    if key not in profiles:
        if not st.button("Profile one launch with Nsight Compute (10–30 s)", key="ui.ncu",
                         help="ncu replays the kernel once per group of counters; the kernel is compiled with nvcc, "
                              "as the PTX the bank model reads."):
            return
        with st.spinner("Running ncu on one launch of this setting…"):
            try:
                profiles[key] = ncu.profile(built.spec, metrics=ncu.PANEL_METRICS)
            except ExplorerError as e:
                profiles[key] = str(e)
    result = profiles[key]
    if isinstance(result, str):
        st.error(result)
        return
    for kernel, model in ncu.static_model(built, _measured_ceilings()).items():
        launch = ncu.launch_of(result, kernel)
        if launch is None:
            st.warning(f"Nsight Compute profiled no launch of {kernel}.")
            continue
        rows = ncu.counter_rows(launch, model)
        st.dataframe([{"counter": r.name, "Nsight Compute": r.text(r.measured), "model": r.text(r.model),
                       "agreement": r.verdict, "note": r.note, "metric": r.metric} for r in rows],
                     hide_index=True, key=f"counters-{kernel}")
        if any(r.metric == ncu.METRICS["load", "conflicts"] and r.agrees is False for r in rows):
            st.caption(f"{ncu.instruction_mix(built, kernel)} {ncu.PTXAS_NOTE}")


# The analyses with a panel of their own, by name (explorer/analyses.py); the others get default_panel.
PANELS = {
    "sass": sass,
    "tiling": tiling,
    "banks": bank_conflicts,
    "tree": reduction_tree,
    "resources": resources,
    "vthread": vthreads,
    "roofline": roofline,
    "counters": counters,
}


def default_panel(analysis: Analysis, built: Build) -> None:
    """An analysis without a panel of its own: its figure, then its text (as on the command line)."""
    try:
        result = analysis.analyze(built)
    except ExplorerError as e:
        st.info(str(e))
        return
    if analysis.figure is not None and result is not None:
        ui.chart(analysis.figure(result), key=f"{analysis.name}-figure")
    st.code(analysis.text(result, built), language=None)


def show(analysis: Analysis, built: Build) -> None:
    """The analysis's tab: its own panel, else the default one."""
    own = PANELS.get(analysis.name)
    if own is not None:
        own(built)
    else:
        default_panel(analysis, built)
