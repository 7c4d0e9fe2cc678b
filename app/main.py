"""``streamlit run app/main.py``: the TVM schedule explorer.

Pages: Explorer (knobs in, code out), Compare (two settings side by side), Device (the
GPU or target, compile backend, versions). Every page is a thin script over ``explorer``.
"""
import time

import streamlit as st

# `streamlit run` puts only app/ on the path: `app` is the installed package.
from app import handle, script_runs, session
from explorer.errors import ExplorerError

script_runs.keep_finished_runs()  # once per process: a run that ends as a request arrives still reaches the page

# The pages live in views/, not pages/: Streamlit treats a pages/ folder next to the main
# script as an old-style multipage app, and a server's first visitor arriving on a page's
# URL would then run that page without this script.
st.set_page_config(page_title="TVM schedule explorer", page_icon=":material/memory:", layout="wide")
session.init()
pages = [
    st.Page("views/explorer.py", title="Explorer", icon=":material/code:", default=True),
    st.Page("views/lessons.py", title="Lessons", icon=":material/school:"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("views/sweep.py", title="Sweep", icon=":material/grid_view:"),
    st.Page("views/device.py", title="Device", icon=":material/developer_board:"),
    st.Page("views/classroom.py", title="Class", icon=":material/groups:"),
]
try:
    server = handle.server()
except ExplorerError as error:  # a server setting (EXPLORER_*) it cannot take: its sentence, no traceback
    st.error(str(error))
    st.stop()
cpu_started = time.thread_time()  # this session's script thread: what the page costs the server
try:
    st.navigation(pages).run()
finally:
    server.record_page_run(time.thread_time() - cpu_started)
