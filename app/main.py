"""``streamlit run app/main.py``: the TVM schedule explorer.

Pages: Start (what the tool is, the lessons as the way in), Lessons, Explorer (knobs in, code
out), Compare (two settings side by side), Sweep, Device (the GPU or target, compile backend,
versions), Class. Every page is a thin script over ``explorer``.
"""
import time

import streamlit as st

# `streamlit run` puts only app/ on the path: `app` is the installed package.
from app import script_runs, server, session, ui
from explorer.errors import ExplorerError

APP_TITLE = "TVM schedule explorer"
script_runs.keep_finished_runs()  # once per process: a run that ends as a request arrives still reaches the page

# The pages live in views/, not pages/: Streamlit treats a pages/ folder next to the main
# script as an old-style multipage app, and a server's first visitor arriving on a page's
# URL would then run that page without this script.
st.set_page_config(page_title=APP_TITLE, page_icon=":material/memory:", layout="wide")
session.init()
pages = [
    st.Page("views/start.py", title="Start", icon=":material/home:", default=True),
    st.Page("views/lessons.py", title="Lessons", icon=":material/school:"),
    st.Page("views/explorer.py", title="Explorer", icon=":material/code:"),
    st.Page("views/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("views/sweep.py", title="Sweep", icon=":material/grid_view:"),
    st.Page("views/device.py", title="Device", icon=":material/developer_board:"),
    st.Page("views/classroom.py", title="Class", icon=":material/groups:", url_path="class"),
    # The Class page at its first address too: a link or a bookmark from before still opens it.
    st.Page("views/classroom.py", title="Class", url_path="classroom", visibility="hidden"),
]
try:
    live = server.live()
except ExplorerError as error:  # a server setting (EXPLORER_*) it cannot take: its sentence, no traceback
    st.error(str(error))
    st.stop()
cpu_started = time.thread_time()  # this session's script thread: what the page costs the server
try:
    page = st.navigation(pages)
    st.set_page_config(page_title=f"{page.title} · {APP_TITLE}")  # a tab, a bookmark and a screen reader name the page
    ui.setup_page([p.url_path for p in pages])
    page.run()
finally:
    live.page_runs.record(time.thread_time() - cpu_started)
