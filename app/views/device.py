"""Device: which GPU (or target) the code is generated for, how CUDA is compiled, versions."""
import functools
import os
import platform
import subprocess
import time
from importlib import metadata

import streamlit as st
import tvm

from app import handle, session
from explorer.analysis.roofline import ceiling_rows, published_for
from explorer.cuda_compile import nvcc_path
from explorer.errors import ExplorerError
from explorer.measure import QUICK_SETTINGS, Remote, describe_budget
from explorer.server.api import UNREACHABLE, prepared_sentence, this_machines_plan
from explorer.targets import NAMES, local_gpu_target, resolve_target, target_label


@functools.lru_cache(maxsize=1)
def nvcc_version() -> str:
    path = nvcc_path()
    if path is None:
        return "not installed"
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
    return f"{out[-1] if out else '?'} ({path})"


PAGE_CPU = "Page run CPU (p95)"


def on_target() -> None:
    session.set_target(st.session_state["ui.target"])


session.sync_url()
st.title("Device")
device = tvm.cuda(0)
if device.exist:
    st.success(f"GPU: **{device.device_name}**, compute capability {device.compute_version}, "
               f"{device.multi_processor_count} SMs.")
else:
    st.info("**No GPU: code and diagrams only.** CUDA is generated for the target below without compiling it; "
            "kernels run and are timed on a machine with an NVIDIA GPU.")

names = ["auto", *NAMES]
session.seed_widget("ui.target", session.target())
choice = st.selectbox(
    "Target", names if session.target() in names else [*names, session.target()], key="ui.target",
    on_change=on_target, accept_new_options=True,
    help="auto = this machine's GPU, or an H100 when there is none. Also a TVM target tag "
         "(nvidia/nvidia-a100) or an architecture (sm_80).",
)
try:
    target = resolve_target(choice)
except ExplorerError as e:
    st.error(str(e))
    session.set_target("auto")
    target = resolve_target("auto")
st.markdown(f"Code is generated for **{target_label(target)}**"
            + (" (this machine's GPU)." if local_gpu_target() is not None and choice == "auto" else "."))
with st.expander("Target details"):
    st.json(target.export())

st.header("Remote GPU (TVM RPC)")
st.caption("Measure on GPUs registered at a TVM RPC tracker (start them with `python -m explorer.measure.rpc_server`). "
           "Leave empty to measure on this machine's GPU.")
current = session.remote()
cols = st.columns([2, 1])
address = cols[0].text_input("Tracker HOST:PORT", f"{current.host}:{current.port}" if current else "",
                             key="ui.rpc.address")
key = cols[1].text_input("Key", current.key if current else "", key="ui.rpc.key")
if address.strip():
    try:
        session.set_remote(Remote.parse(address, key))
        st.success(f"Kernels are measured on '{key}' GPUs through the tracker at {address}.")
    except ExplorerError as e:
        st.error(str(e))
else:
    session.set_remote(None)

st.header("This server")
server = handle.server()
st.caption(this_machines_plan().sentence())  # the bound its processes stay under (explorer/server/settings.py)
warm = server.warm_up_state()
if not warm.done:
    st.info("Warming up the GPU… " + ", ".join(f"{name} ({at:.1f} s)" for name, at in warm.steps))
elif warm.error:
    st.caption(f"Measuring: {warm.error}")
else:
    st.caption(f"GPU warm since {time.strftime('%H:%M:%S', time.localtime(warm.started))}: "
               + ", ".join(f"{name} ({at:.1f} s)" for name, at in warm.steps))
stats = server.stats()
builds, measured, pages = stats["builds"], stats.get("measurements"), stats["pages"]
prepared = prepared_sentence((measured or {}).get("stored"), stats.get("prepared"), server.measure_max_age_s)
if prepared is not None:  # python -m explorer prepare, or an earlier server's measurements on disk
    st.success(prepared, icon=":material/inventory_2:")
cols = st.columns(5)
cols[0].metric("Builds cached", f"{builds['entries']} / {builds['capacity']}",
               help=f"Shared by every session: {builds['hits']} hits, {builds['shared']} waited for a build already "
                    f"running, {builds['misses']} built in {builds['workers']} compile processes.")
cols[4].metric(PAGE_CPU, f"{pages['p95_ms']:.0f} ms" if pages["p95_ms"] is not None else "—",
               help=f"This app process's CPU for one page run (its script thread), 95th percentile of the latest "
                    f"runs; median {pages['p50_ms'] or 0:.0f} ms over {pages['runs']} runs so far. One app process "
                    "runs the pages of its sessions on about one core.")
hosts = builds.get("worker hosts")  # serve --workers: the builds and compiles on a cluster's hosts
if hosts is not None:
    ran = ", ".join(f"{name}: {count}" for name, count in sorted(hosts["ran on"].items())) or "none yet"
    st.caption(f"Worker hosts of {hosts['address']}, calls run by each: {ran}; {hosts['ran here']} run on this "
               f"machine because no host could; {hosts['libraries not whole']} library(ies) sent back not whole "
               "and compiled here.")
if measured is None:  # an app process of a multi-process server whose measuring service is restarting
    st.info(UNREACHABLE)
else:
    cols[1].metric("Measurements cached", f"{measured['results']} / {measured['capacity']}",
                   help=f"Re-measured after {measured['max_age_s'] / 60:.0f} min; {measured['measured']} measured so "
                        "far.")
    cols[2].metric("GPU queue", f"{measured['running']} running, {measured['waiting']} waiting",
                   help=f"{measured['compiling']} compiling on the compile processes first. One kernel is timed at a "
                        "time per device; each session has at most one measurement waiting.")
    cols[3].metric("PyTorch baselines", f"{stats['baselines']['entries']}")
    if len(measured.get("gpus", ())) > 1:  # one measuring worker per GPU of the server
        died = " (its worker died {} time(s); each of those measurements went to another GPU)"
        st.caption("GPUs: " + "; ".join(f"GPU {index}: {counts['measured']} measured"
                                        + (died.format(counts["crashed"]) if counts["crashed"] else "")
                                        for index, counts in enumerate(measured["gpus"])) + ".")
    st.caption(f"Server's own work: {measured['background']} measurement(s) ahead of the class or again in full, "
               f"taken only while no student waits; {measured['compile_failures']} setting(s) failed to compile (no "
               "GPU time spent). While students' measurements wait, a kernel is timed with a short budget "
               f"({describe_budget(QUICK_SETTINGS)}) and measured again in full once the GPU is free.")

st.header("Roofline ceilings")
try:
    ceilings = server.ceilings() or published_for(target)
except ExplorerError as e:  # a target without published figures, and nothing measured
    st.caption(str(e))
else:
    st.caption(f"The roofs of the Roofline tab, {ceilings.source}. Float32 matrices are bound by the CUDA cores' "
               "FP32 peak, float16 and bfloat16 ones by the tensor cores' peak for their type.")
    st.dataframe([{"roof": name, "figure": figure} for name, figure in ceiling_rows(ceilings)], hide_index=True)

mode = os.environ.get("TVM_CUDA_COMPILE_MODE", "nvrtc")
st.header("Compile backend")
st.markdown(
    f"- Kernels to run: {'NVRTC' if mode != 'nvcc' else 'nvcc'} through TVM "
    f"(`TVM_CUDA_COMPILE_MODE={mode}`){'' if device.exist else ' — only with a GPU'}.\n"
    f"- Registers and spills (Resources tab): `nvcc -Xptxas -v`, {nvcc_version()}."
)

st.header("Versions")
packages = ["apache-tvm", "apache-tvm-ffi", "streamlit", "numpy", "plotly", "pygments"]
st.dataframe(
    [{"component": "Python", "version": platform.python_version()}]
    + [{"component": name, "version": metadata.version(name)} for name in packages],
    hide_index=True,
)
