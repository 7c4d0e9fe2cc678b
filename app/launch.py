"""``python -m app.launch run app/main.py [streamlit options]``: Streamlit's own command line,
in a process that has loaded what every page needs and started warming the GPU before its
port opens (``python -m explorer serve`` starts the class server this way).

``streamlit run`` answers its health check at once and imports TVM, the templates and the
analyses on the first page, so the first visitor waits for them; and the measuring worker
starts only then. Here the imports come first and the worker warms the GPU while Streamlit
starts, so the server answers when the first page can be built at once.
"""
import sys

# TVM's FFI imports PyTorch whenever it is installed; this process never runs a kernel (the
# measuring worker does, and imports PyTorch itself), so it keeps the seconds and the memory.
sys.modules.setdefault("torch", None)

from streamlit.web import cli  # noqa: E402

from app import handle, script_runs  # noqa: E402  (TVM, the templates, the analyses)
from explorer.presets import default_spec  # noqa: E402
from explorer.server.api import warm_up_early  # noqa: E402


def main() -> None:
    handle.log_to_stderr()
    script_runs.keep_finished_runs()  # before the first session: its first requests too
    warm_up_early(default_spec())  # unless the server's measuring service warms the GPU
    sys.argv[0] = "streamlit"
    try:
        cli.main()
    finally:
        handle.stop()


if __name__ == "__main__":
    main()
