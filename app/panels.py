"""Panels below the code: launch summary, resources, and the analyses and measurements
of the library modules that are installed.

The analyses (``explorer.analysis`` / ``explorer.figures``) and measurement
(``explorer.measure``) are optional at render time: :func:`optional` imports a module
or returns None, and a panel whose module is missing is simply not offered.
"""
from __future__ import annotations

import importlib

import pandas as pd
import plotly.graph_objects as go
import streamlit as st

from explorer.build import Build, compile_binary, nvcc_path
from explorer.errors import ExplorerError
from explorer.targets import target_label

from .session import Try


def optional(name: str):
    """The module ``name``, or None when it (or something it needs) is not installed."""
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def launch_summary(built: Build) -> str:
    """One line: kernels, grid × block, shared memory; e.g. for the status label."""
    if not built.kernels:
        return f"{target_label(built.target)}: host code only"
    parts = []
    for k in built.kernels:
        blocks = k.grid[0] * k.grid[1] * k.grid[2]
        parts.append(f"{blocks:,} blocks × {k.threads_per_block} threads, {k.shared_bytes:,} B shared")
    return f"{target_label(built.target)}: " + "; ".join(parts)


def metrics(built: Build, container=st) -> None:
    """Headline numbers of the launch (of the first kernel, the others in the table)."""
    if not built.kernels:
        container.caption("No GPU kernel in this build.")
        return
    k = built.kernels[0]
    cols = container.columns(4)
    cols[0].metric("Threads per block", f"{k.threads_per_block}", help=f"block {k.block} (x, y, z)")
    cols[1].metric("Blocks", f"{k.grid[0] * k.grid[1] * k.grid[2]:,}", help=f"grid {k.grid} (x, y, z)")
    cols[2].metric("Shared mem / block", f"{k.shared_bytes / 1024:.1f} KB", help=f"{k.shared_bytes:,} bytes, static")
    cols[3].metric("Kernels", f"{len(built.kernels)}",
                   help="Separate kernels round-trip intermediate results through global memory.")


def kernel_table(built: Build) -> pd.DataFrame:
    return pd.DataFrame([
        {"kernel": k.name, "grid (x,y,z)": str(k.grid), "block (x,y,z)": str(k.block),
         "threads/block": k.threads_per_block, "shared bytes": k.shared_bytes}
        for k in built.kernels
    ])


def resources(built: Build) -> None:
    """Kernels with their launch and shared memory; registers and spills from nvcc on demand
    (it takes about a second, so it never runs on a plain knob change)."""
    if not built.kernels:
        st.caption("A CPU build has no kernels.")
        return
    table = kernel_table(built)
    compiled = st.session_state.setdefault("nvcc", {})
    binary = compiled.get(built.cuda)
    if binary is None and nvcc_path() is not None:
        if st.button("Compile with nvcc for registers and spills (about 1 s)", key="ui.nvcc"):
            with st.spinner("Running nvcc -Xptxas -v …"):
                try:
                    binary = compiled[built.cuda] = compile_binary(built)
                except ExplorerError as e:
                    st.error(str(e))
    if binary is not None:
        table["registers/thread"] = [binary.registers.get(k) for k in table["kernel"]]
        table["spill bytes"] = [binary.spill_bytes.get(k, 0) for k in table["kernel"]]
        st.caption(f"Registers and spills: ptxas for {binary.arch}.")
    elif nvcc_path() is None:
        st.caption("Registers: not compiled (nvcc is not installed here).")
    st.dataframe(table, hide_index=True)


def bank_conflicts(built: Build) -> None:
    """The shared-memory bank-conflict model of explorer.analysis, one row per access."""
    banks = optional("explorer.analysis.banks")
    report = banks.analyze_banks(built)
    rows = [
        {"kernel": k.kernel, "#": a.number, "op": a.op, "access": a.text, "bytes/lane": a.access_bytes,
         "max n-way": a.max_degree, "mean n-way": round(a.mean_degree, 2),
         "wavefronts/request": round(a.wavefronts_per_request, 2), "requests": a.requests, "conflicts": a.conflicts,
         "note": a.not_modelled or ("sampled" if a.sampled else "")}
        for k in report.kernels for a in k.accesses
    ]
    if not rows:
        st.caption("This kernel does not use shared memory: no bank conflicts to model.")
    else:
        totals = [f"{k.kernel}: {k.loads.conflicts:,} load and {k.stores.conflicts:,} store conflicts"
                  for k in report.kernels]
        st.markdown("**Modelled bank conflicts for the whole launch** — " + "; ".join(totals))
        st.dataframe(pd.DataFrame(rows), hide_index=True)
    with st.expander("What the model assumes"):
        st.markdown("\n".join(f"- {line}" for line in (*report.assumptions, *report.notes)))


def tries_figure(tries: list[Try]) -> go.Figure:
    """This session's measured tries in order; hover lists the knobs of each."""
    measured = [(i, t) for i, t in enumerate(tries, start=1) if t.latency_us is not None]
    hover = ["<br>".join(f"{name} = {value}" for name, value in t.spec.knobs.to_strings().items())
             for _, t in measured]
    figure = go.Figure(go.Scatter(
        x=[i for i, _ in measured], y=[t.latency_us for _, t in measured], mode="lines+markers",
        hovertext=hover, hovertemplate="try %{x}: %{y:.2f} µs<br>%{hovertext}<extra></extra>",
    ))
    figure.update_layout(xaxis_title="try", yaxis_title="latency (µs)", height=280, margin=dict(l=10, r=10, t=10, b=10))
    return figure
