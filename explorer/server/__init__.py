"""The class server: one process's share of a server that many sessions use at once.

Nothing here imports streamlit; the app holds one server per process (``app/``). This package's
``__init__`` imports nothing, so that the launcher (``launcher.py``, ``python -m explorer serve``)
starts and watches the server's processes without loading TVM.
"""
