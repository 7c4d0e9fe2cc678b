"""The compile processes' libraries: a setting a page's build process kept on disk is generated
from its lowered modules, not scheduled and lowered again, into the same CUDA."""
import os
import subprocess
import sys
import threading

import cloudpickle
import pytest

from explorer import build as build_module
from explorer.cuda_env import SOURCE_ONLY
from explorer.errors import ExplorerError
from explorer.presets import get_preset
from explorer.server import build_disk
from explorer.server.builds import build_source_only
from explorer.server.compiles import COMPILE_LOG, compile_library

SPEC = get_preset("modern-async-1024").spec


@pytest.fixture
def schedules(monkeypatch):
    """The settings scheduled in this process from now on (each lowering starts with one)."""
    made = []
    real = build_module.scheduled

    def counting(spec, target=None):
        made.append(spec)
        return real(spec, target)

    monkeypatch.setattr(build_module, "scheduled", counting)
    return made


@pytest.fixture
def forget_builds(monkeypatch):
    """Empties this process's build cache when called, for this test only: the cache it had comes back
    after the test (the files of its test process build every preset once and read those builds)."""
    def forget():
        monkeypatch.setattr(build_module, "_build_cached", build_module._build_cached)  # handed back after the test
        build_module.keep_builds(build_module._build_cached.cache_info().maxsize)
    return forget


@pytest.fixture
def compile_log(tmp_path, monkeypatch):
    """The compile log's lines, split, as this process writes them."""
    path = tmp_path / "compiles.log"
    monkeypatch.setenv(COMPILE_LOG, str(path))
    return lambda: [line.split() for line in path.read_text().splitlines()] if path.exists() else []


def test_a_kept_build_is_generated_not_lowered_again(tmp_path, forget_builds, schedules, compile_log):
    kept_at = str(tmp_path / "kept.pickle")
    shown = build_source_only(SPEC, "h100", keep_at=kept_at, keep_at_most=10)  # a page's build process
    assert shown.runtime_module is None and shown.host_mod is not None
    forget_builds()
    schedules.clear()
    library = compile_library(SPEC, "h100", str(tmp_path / "libraries"), kept_at)
    assert os.path.isfile(library) and schedules == []
    # The kernel compiled is the one the page shows.
    kept = build_disk.read(kept_at)
    assert build_module.runtime_module_of(kept).imports[0].inspect_source("cuda") == shown.cuda
    assert compile_library(SPEC, "h100", str(tmp_path / "libraries"), kept_at, 12.5) == library  # kept too
    # One line, for the compile that made the library: asked (not given), picked up, the page's build
    # there, generated and exported in that order; its one kernel's binary compiled or read at most
    # once (a machine without the CUDA runtime only generates the source).
    [line] = compile_log()
    assert line[0] == "-" and line[1] <= line[2] <= line[3] <= line[4]
    assert float(line[5]) > 0 and sum(map(int, line[6:9])) <= 1
    assert line[9:] == ["kept", "ok", "matmul_async"]


def test_the_compile_log_says_when_a_compile_was_asked_for(tmp_path, compile_log):
    compile_library(SPEC, "h100", str(tmp_path / "libraries"), None, 12.5)
    [line] = compile_log()
    assert line[0] == "12.500" and float(line[1]) > 12.5 and line[9:] == ["here", "ok", "matmul_async"]


def test_without_a_kept_build_the_compile_builds(tmp_path, forget_builds, schedules):
    forget_builds()
    library = compile_library(SPEC, "h100", str(tmp_path / "libraries"), str(tmp_path / "none.pickle"))
    assert os.path.isfile(library) and schedules == [SPEC]


def test_a_kept_refusal_comes_back_as_the_error(tmp_path, schedules, compile_log):
    kept_at = str(tmp_path / "refused.pickle")
    build_disk.keep(ExplorerError("This setting cannot be built."), kept_at, 10)
    outcome = compile_library(SPEC, "h100", str(tmp_path / "libraries"), kept_at)
    assert isinstance(outcome, ExplorerError) and str(outcome) == "This setting cannot be built."
    assert schedules == []
    [line] = compile_log()
    assert line[3:5] == ["-", "-"] and line[6:] == ["0", "0", "0", "-", "error", "matmul_async"]


def test_a_kept_tensor_core_build_is_generated_in_a_process_that_never_scheduled_one(tmp_path):
    """Code generation of a tensor-core store reads the fragment layout TVM's tensor intrinsics
    register, which scheduling imports: a compile process that only generates imports them."""
    spec_id = "modern-tensorcore-fp16-4096"
    kept_at = str(tmp_path / "kept.pickle")
    build_source_only(get_preset(spec_id).spec, "h100", keep_at=kept_at, keep_at_most=10)
    script = ("import sys\n"
              "from explorer.presets import get_preset\n"
              "from explorer.server.compiles import compile_library\n"
              "assert 'tvm.s_tir.tensor_intrin.cuda' not in sys.modules\n"
              f"print(compile_library(get_preset({spec_id!r}).spec, 'h100', {str(tmp_path / 'libraries')!r}, "
              f"{kept_at!r}))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith(".so") and os.path.isfile(done.stdout.strip().splitlines()[-1])


class BuildInProgress:
    """A page's build process in the middle of building SPEC (holding its lock) until ``finish()``,
    which keeps the build at ``kept_at`` and lets go."""

    def __init__(self, kept_at: str):
        self.kept_at, self.shown = kept_at, build_source_only(SPEC, "h100")
        self.started, self.release = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._build)
        self.thread.start()
        self.started.wait(10)

    def _build(self):
        with build_disk.building(self.kept_at):
            self.started.set()
            self.release.wait(10)
            build_disk.keep(self.shown, self.kept_at, 10)

    def finish(self):
        self.release.set()
        self.thread.join(10)


def waiting(call) -> tuple[threading.Thread, list]:
    """``call()`` in a thread, and whether it is still waiting 0.3 s later; its outcome in the list."""
    outcome = []
    thread = threading.Thread(target=lambda: outcome.append(call()))
    thread.start()
    thread.join(0.3)
    return thread, outcome


def test_a_compile_asked_while_the_page_builds_waits_for_that_build(tmp_path, forget_builds, schedules):
    """A page asks for its measurement before it builds: the compile process waits for the page's
    build process instead of lowering the setting too."""
    kept_at = str(tmp_path / "kept.pickle")
    build = BuildInProgress(kept_at)
    forget_builds()
    schedules.clear()
    compiling, outcome = waiting(lambda: compile_library(SPEC, "h100", str(tmp_path / "libraries"), kept_at))
    assert compiling.is_alive() and outcome == []  # waiting for the page's build
    build.finish()
    compiling.join(30)
    assert os.path.isfile(outcome[0]) and schedules == [] and not os.path.exists(kept_at + ".lock")


def test_two_build_processes_asked_for_one_setting_at_once_build_it_once(tmp_path, forget_builds, schedules):
    kept_at = str(tmp_path / "kept.pickle")
    build = BuildInProgress(kept_at)
    forget_builds()
    schedules.clear()
    other, outcome = waiting(lambda: build_source_only(SPEC, "h100", keep_at=kept_at, keep_at_most=10))
    assert other.is_alive()
    build.finish()
    other.join(10)
    assert outcome[0].cuda == build.shown.cuda and schedules == []


def test_a_build_process_pickles_a_build_once_for_the_disk_and_the_app(tmp_path, monkeypatch):
    kept_at = str(tmp_path / "kept.pickle")
    made = []
    real = build_disk.pickled
    monkeypatch.setattr(build_disk, "pickled", lambda outcome: made.append(outcome) or real(outcome))
    monkeypatch.setattr("explorer.server.builds.pickled", build_disk.pickled)
    sent = build_source_only(SPEC, "h100", ("cuda",), keep_at=kept_at, keep_at_most=10, as_bytes=True)
    assert isinstance(sent, bytes) and len(made) == 1
    with open(kept_at, "rb") as kept:
        assert kept.read() == sent  # the same bytes on disk and to the app process
    shown = build_disk.read(kept_at)
    assert "__global__" in shown.cuda and "cuda" in shown.views_html and shown.runtime_module is None


def test_a_compile_log_that_cannot_be_written_stops_no_compile(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv(COMPILE_LOG, str(tmp_path / "no such folder" / "compiles.log"))
    for attempt in range(2):
        library = compile_library(SPEC, "h100", str(tmp_path / f"libraries{attempt}"), None, 12.5)
        assert os.path.isfile(library)
    said = [r.getMessage() for r in caplog.records if "cannot be written" in r.getMessage()]
    assert len(said) == 1 and "no such folder" in said[0]  # said once, not per compile


def test_a_source_only_build_generates_the_cuda_without_the_host_code(monkeypatch, forget_builds):
    """A process that never runs a kernel (SOURCE_ONLY: the app's, a build or diagnosing process) gets
    the same CUDA without TVM's LLVM code generation of the host side; runtime_module_of makes that
    where a kernel runs."""
    monkeypatch.setenv(SOURCE_ONLY, "1")
    forget_builds()
    shown = build_module.build(SPEC, "h100")
    monkeypatch.delenv(SOURCE_ONLY)
    forget_builds()
    full = build_module.build(SPEC, "h100")
    assert shown.runtime_module is None and full.runtime_module is not None
    assert "__global__" in shown.cuda and shown.cuda == full.cuda and shown.kernels == full.kernels
    assert build_module.runtime_module_of(shown).imports[0].inspect_source("cuda") == shown.cuda


def test_a_builds_texts_are_printed_when_read_and_sent_printed(forget_builds):
    """A diagnosis's neighbours never print their TVMScript; a build process's build reaches the app process
    with both texts printed (the app's one core runs every page)."""
    forget_builds()
    built = build_module.build(SPEC, "h100")
    assert built._tensorir is None and built._lowered is None
    assert built.tensorir == built.schedule_mod.script() and built.lowered == built.device_mod.script()
    forget_builds()
    sent = cloudpickle.loads(build_source_only(SPEC, "h100", as_bytes=True))
    assert sent._tensorir is not None and sent._lowered is not None and "T.prim_func" in sent.lowered
