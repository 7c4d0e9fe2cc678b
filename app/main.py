"""``streamlit run app/main.py``: the TVM schedule explorer.

Pages: Explorer (knobs in, code out), Compare (two settings side by side), Device (the
GPU or target, compile backend, versions). Every page is a thin script over ``explorer``.
"""
import sys
from pathlib import Path

import streamlit as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # `streamlit run app/main.py` puts only app/ on the path
    sys.path.insert(0, str(ROOT))

from app import session  # noqa: E402  (needs ROOT on the path)

st.set_page_config(page_title="TVM schedule explorer", page_icon=":material/memory:", layout="wide")
session.init()
pages = [
    st.Page("pages/explorer.py", title="Explorer", icon=":material/code:", default=True),
    st.Page("pages/lessons.py", title="Lessons", icon=":material/school:"),
    st.Page("pages/compare.py", title="Compare", icon=":material/compare_arrows:"),
    st.Page("pages/sweep.py", title="Sweep", icon=":material/grid_view:"),
    st.Page("pages/device.py", title="Device", icon=":material/developer_board:"),
]
st.navigation(pages).run()
