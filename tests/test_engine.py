"""The class's builds and compiles on worker hosts (explorer/server/engine.py), without a cluster: the
cache's keys by content, a library checked whole before the measuring worker loads it, a call that no
host can take run on this machine, the launcher's ``--workers`` and ``worker``, and Dask imported only by
a server given a cluster. tests/test_class_hosts.py runs a class on two hosts."""
import ast
import os
import shutil
import sys
from pathlib import Path

import pytest

from explorer.cuda_env import SOURCE_ONLY
from explorer.errors import ExplorerError
from explorer.presets import get_preset
from explorer.server import content_keys, engine, launcher
from explorer.server.compiles import CompileService, compile_library, library_path, whole_library
from explorer.server.pool import ProcessPool
from explorer.server.settings import WORKERS, ServerSettings
from explorer.targets import resolve_target

ROOT = Path(__file__).resolve().parents[1]
SPEC = get_preset("dw-blog-final-96").spec


# -- the keys of the class's cache ------------------------------------------------------------------


def test_the_fingerprint_is_the_sources_content_not_their_times(tmp_path):
    package = tmp_path / "one"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("x = 1\n")
    (package / "sub" / "b.py").write_text("y = 2\n")
    before = content_keys.package_fingerprint(package)
    os.utime(package / "a.py", ns=(10**9, 10**9))  # another checkout of the same commit: other times
    assert content_keys.package_fingerprint(package) == before
    shutil.copytree(package, tmp_path / "elsewhere")  # another host's copy
    assert content_keys.package_fingerprint(tmp_path / "elsewhere") == before
    (package / "sub" / "b.py").write_text("y = 3\n")
    assert content_keys.package_fingerprint(package) != before


def test_a_key_names_the_setting_target_versions_and_source():
    sm90 = str(resolve_target("sm_90a"))
    key = content_keys.content_key("library", SPEC, sm90, "tvm 0.27", "source")
    others = {content_keys.content_key("build", SPEC, sm90, "tvm 0.27", "source"),
              content_keys.content_key("library", SPEC.with_knobs(num_thread_x=8), sm90, "tvm 0.27", "source"),
              content_keys.content_key("library", SPEC, str(resolve_target("sm_80")), "tvm 0.27", "source"),
              content_keys.content_key("library", SPEC, sm90, "tvm 0.28", "source"),
              content_keys.content_key("library", SPEC, sm90, "tvm 0.27", "edited")}
    assert key not in others and len(others) == 5
    assert "nvrtc" in content_keys.versions() and "apache-tvm" in content_keys.versions()


def test_a_library_is_named_for_the_resolved_architecture(tmp_path):
    """"auto" is another GPU on another host: the file is named for what it resolves to here."""
    here = str(resolve_target("auto"))
    assert library_path(SPEC, "auto", str(tmp_path)) == library_path(SPEC, here, str(tmp_path))
    assert library_path(SPEC, "sm_80", str(tmp_path)) != library_path(SPEC, "sm_90a", str(tmp_path))


# -- what a worker host sends back -------------------------------------------------------------------


def a_library() -> bytes:
    import _ctypes  # a shared object that every Python has

    return Path(_ctypes.__file__).read_bytes()


def test_a_library_is_whole_only_as_an_elf_shared_object_with_all_its_sections():
    library = a_library()
    assert whole_library(library)
    assert not whole_library(library[: len(library) - 100])  # cut short
    assert not whole_library(b"")
    assert not whole_library(b"\x7fELF" + b"\0" * 100)  # not a shared object
    assert not whole_library(Path(sys.executable).read_bytes()[:200])


class FakeEngine:
    """A cluster's client whose every call answers ``answer`` (or raises it)."""

    def __init__(self, answer):
        self.answer, self.calls, self.broken = answer, [], 0

    def run(self, function, *args, **options):
        self.calls.append((function.__name__, args, options))
        if isinstance(self.answer, type) and issubclass(self.answer, Exception):
            raise self.answer("gone")
        return self.answer


def compile_service(tmp_path, answer) -> CompileService:
    service = CompileService(ServerSettings(library_dir=str(tmp_path / "libraries"), build_dir=str(tmp_path / "b"),
                                            compile_workers=1))
    service.engine = FakeEngine(answer)
    service.ready.set()
    return service


def test_a_hosts_library_is_kept_whole_for_the_measuring_worker(tmp_path):
    service = compile_service(tmp_path, a_library())
    path = service.compile(SPEC, "auto")
    assert path == library_path(SPEC, "auto", str(tmp_path / "libraries"))
    assert Path(path).read_bytes() == a_library() and os.listdir(tmp_path / "libraries") == [Path(path).name]
    [(name, args, options)] = service.engine.calls
    # The host gets the resolved target, no build (none kept yet) and the library's content key.
    assert name == "compile_library_bytes" and args == (SPEC, str(resolve_target("auto")), None)
    assert options["key"] == "library-" + Path(path).stem and options["source_only"] is False
    assert service.compile(SPEC, "auto") == path and len(service.engine.calls) == 1  # kept: not asked again


def test_a_library_that_is_not_whole_is_compiled_on_this_machine(tmp_path, monkeypatch):
    service = compile_service(tmp_path, a_library()[:5000])
    here = []
    monkeypatch.setattr(service, "run_here", lambda function, *args, doing: here.append(function) or "here.so")
    assert service.compile(SPEC, "auto") == "here.so"
    assert here == [compile_library] and service.engine.broken == 1
    assert not (tmp_path / "libraries").exists() or os.listdir(tmp_path / "libraries") == []


def test_a_call_no_host_can_take_runs_on_this_machine(monkeypatch):
    pool = ProcessPool(ServerSettings(), 1, None, priority=1)
    pool.engine = FakeEngine(engine.NoWorkers)
    monkeypatch.setattr(pool, "run_here", lambda function, *args, doing: ("here", function(*args)))
    assert pool.run(len, "abc") == ("here", 3) and len(pool.engine.calls) == 1


def test_a_call_that_kills_every_host_it_is_given_says_so(monkeypatch):
    pool = ProcessPool(ServerSettings(), 1, None, priority=0)
    pool.engine = FakeEngine(engine.Crashed)
    with pytest.raises(ExplorerError, match="crashed on this setting on every worker host"):
        pool.run(len, "abc")


def test_a_setting_that_cannot_be_built_on_a_host_says_why():
    pool = ProcessPool(ServerSettings(), 1, None, priority=1)
    pool.engine = FakeEngine(ExplorerError("A block has too many threads."))
    with pytest.raises(ExplorerError, match="too many threads"):
        pool.run(len, "abc")


def test_an_unreachable_cluster_leaves_the_work_here_and_says_so_once(monkeypatch):
    with __import__("socket").socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        address = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setattr(engine, "CONNECT_TIMEOUT_S", 0.5)  # a server's is 10 s: Dask tries again meanwhile
    workers = engine.Workers(address)
    with pytest.raises(engine.NoWorkers, match="could not be reached"):
        workers.connect()
    assert not workers.has_workers()
    with pytest.raises(engine.NoWorkers):
        workers.run(len, "abc")
    assert workers.stats()["ran here"] == 1


def test_a_hosts_call_runs_as_a_build_or_a_compile_process(monkeypatch):
    distributed = pytest.importorskip("distributed")
    monkeypatch.setattr(distributed, "get_worker", lambda: type("W", (), {"name": "host-a"})())
    monkeypatch.delenv(SOURCE_ONLY, raising=False)
    assert engine.host_call(True, os.environ.get, SOURCE_ONLY) == ("host-a", "1")
    assert SOURCE_ONLY not in os.environ  # as it was
    monkeypatch.setenv(SOURCE_ONLY, "1")
    assert engine.host_call(False, os.environ.get, SOURCE_ONLY) == ("host-a", None)
    assert os.environ[SOURCE_ONLY] == "1"


# -- the launcher ---------------------------------------------------------------------------------


def test_workers_takes_a_schedulers_address_and_refuses_one_where_nothing_answers():
    import socket

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        assert launcher.cluster_address(f"127.0.0.1:{port}") == f"tcp://127.0.0.1:{port}"
        assert launcher.cluster_address(f"tcp://127.0.0.1:{port}") == f"tcp://127.0.0.1:{port}"
    with pytest.raises(ExplorerError, match="No Dask scheduler answers at tcp://127.0.0.1:.*class-server-hosts"):
        launcher.cluster_address(f"127.0.0.1:{port}", timeout_s=1)
    with pytest.raises(ExplorerError, match="tcp://HOST:PORT"):
        launcher.cluster_address("tls://somewhere:1")


def test_serve_workers_reaches_every_process_of_the_server(monkeypatch):
    monkeypatch.setattr(os, "environ", {name: value for name, value in os.environ.items()
                                        if name not in (WORKERS, "EXPLORER_COMPILE_WORKERS")})
    monkeypatch.setattr(launcher, "cluster_address", lambda text: "tcp://10.1.2.3:8786")
    monkeypatch.setattr(launcher, "serve", lambda *args: os.environ[WORKERS])
    args = launcher.add_arguments(__import__("argparse").ArgumentParser()).parse_args(["--workers", "10.1.2.3"])
    assert launcher.command(args) == "tcp://10.1.2.3:8786" and ServerSettings().workers == "tcp://10.1.2.3:8786"
    # As many compiles asked of the cluster at once as its hosts may run; this machine's own stay one per core.
    assert ServerSettings().compile_workers == launcher.CLUSTER_COMPILES
    assert CompileService(ServerSettings()).workers == min(launcher.CLUSTER_COMPILES, os.cpu_count())


def test_a_hosts_worker_offers_its_versions_and_starts_dasks_worker(monkeypatch):
    started = []
    monkeypatch.setattr(os, "execve", lambda path, command, env: started.append((command, env)))
    launcher.worker_main(["tcp://10.0.0.1:8786", "--processes", "3", "--", "--memory-limit", "4GiB"])
    [(command, env)] = started
    assert command[1:3] == ["-m", "distributed.cli.dask_worker"] and command[-1] == "tcp://10.0.0.1:8786"
    assert command[command.index("--nworkers") + 1] == "3" and command[command.index("--nthreads") + 1] == "1"
    assert command[command.index("--resources") + 1] == content_keys.host_resource() + "=1"
    assert command[command.index("--preload") + 1] == "explorer.server.host_worker"
    assert command[-3:-1] == ["--memory-limit", "4GiB"] and SOURCE_ONLY not in env


def test_only_a_server_given_a_cluster_imports_dask():
    """The default server (and the test suite) never pays for the engine's import: only engine.py
    imports it, and only inside the functions a server with --workers calls."""
    found = []
    for path in [*(ROOT / "explorer").rglob("*.py"), *(ROOT / "app").rglob("*.py")]:
        tree = ast.parse(path.read_text())
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            if any(name.split(".")[0] in ("distributed", "dask") for name in names):
                found.append((path.relative_to(ROOT).as_posix(), id(node) in top))
    assert found and {path for path, _ in found} == {"explorer/server/engine.py"}
    assert not any(at_top for _, at_top in found)
