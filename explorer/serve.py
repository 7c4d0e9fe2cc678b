"""``python -m explorer serve``: the app server for a class, warm from its first second.

Streamlit runs an app's script only when a browser opens it, so a server started with
``streamlit run`` imports TVM and the templates, starts its build processes and warms the
GPU when the teacher's first page arrives, and that page waits. This launcher starts
Streamlit through ``app.launch`` (the imports done and the measuring worker warming the GPU
before the port opens), waits for its health check, then asks for Streamlit's script health
check, which runs the app's first page once inside the server: the build and compile
processes and the lesson steps have started before anyone connects. Nothing here imports
streamlit; the server is a child process that this one waits on.
"""
from __future__ import annotations

import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

APP_MAIN = Path(__file__).resolve().parents[1] / "app" / "main.py"
HEALTH = "/_stcore/health"
SCRIPT_HEALTH = "/_stcore/script-health-check"  # runs the app's script once, in the server
START_TIMEOUT_S = 120


def streamlit_command(port: int, address: str, extra: list[str], script: Path = APP_MAIN) -> list[str]:
    """The command line of the class server, ``streamlit run``'s own options (``extra``: more of them;
    ``script``: the app, or a copy of it)."""
    # app.launch: Streamlit's command line after the imports, with the GPU warming meanwhile.
    return [sys.executable, "-m", "app.launch", "run", str(script), "--server.headless", "true",
            "--server.port", str(port), "--server.address", address,
            "--server.scriptHealthCheckEnabled", "true",
            # Streamlit takes a copy that is not in a site-packages folder (a --target install,
            # PYTHONPATH) for its own development tree, where it refuses --server.port.
            "--global.developmentMode", "false",
            # A class's server runs a fixed checkout: watching every imported module for changes
            # costs each page run a walk over them (a twentieth of the app process's time).
            "--server.fileWatcherType", "none", *extra]


def local_url(port: int, address: str) -> str:
    host = "127.0.0.1" if address in ("", "0.0.0.0", "::") else address
    return f"http://{host}:{port}"


def wait_healthy(url: str, server: subprocess.Popen | None = None, timeout_s: float = START_TIMEOUT_S) -> float:
    """Seconds until ``url`` answers its health check; raises RuntimeError if ``server``
    (the process serving it, where known) exits or none answers within ``timeout_s``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        if server is not None and server.poll() is not None:
            raise RuntimeError(f"The app server exited with status {server.returncode} before it answered.")
        try:
            with urllib.request.urlopen(url + HEALTH, timeout=2) as answer:
                if answer.status == 200:
                    return time.monotonic() - start
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.1)
    raise RuntimeError(f"The app server did not answer its health check within {timeout_s:.0f} s.")


def warm(url: str, timeout_s: float = START_TIMEOUT_S) -> tuple[bool, str]:
    """Run the app's first page once inside the server (it starts the warm-up); (ran
    without an error, what the server said)."""
    try:
        with urllib.request.urlopen(url + SCRIPT_HEALTH, timeout=timeout_s) as answer:
            return answer.status == 200, answer.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return False, error.read().decode(errors="replace") or str(error)
    except (urllib.error.URLError, OSError) as error:
        return False, str(error)


def serve(port: int, address: str, extra: list[str]) -> int:
    """Start the server, warm it, report, and wait for it (Ctrl-C or SIGTERM stops it)."""
    server = subprocess.Popen(streamlit_command(port, address, extra))
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    url = local_url(port, address)
    try:
        healthy_s = wait_healthy(url, server)
        start = time.monotonic()
        ok, said = warm(url)
        first_s = time.monotonic() - start
        if ok:
            print(f"Serving {url}: healthy after {healthy_s:.1f} s; the first page ran in {first_s:.1f} s "
                  "and the warm-up has started.", flush=True)
        else:
            print(f"Serving {url}: healthy after {healthy_s:.1f} s, but the first page did not run ({said}); "
                  "the warm-up starts with the first visitor.", flush=True)
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        return server.wait()
    except RuntimeError as error:
        server.terminate()
        server.wait()
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1
