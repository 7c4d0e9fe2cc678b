"""Shared test configuration. Tests marked ``gpu`` run a kernel on a local CUDA GPU and
are skipped on machines without one (CI has none)."""
import atexit
import functools
import gc
import os
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path

import pytest

# Bytecode kept (__pycache__, ignored by git) even where the environment says not to
# (PYTHONDONTWRITEBYTECODE): without it each test process rewrote the assertions of every test
# module again (3 of its 6.5 s of collection), and each server and pool process the tests start
# compiled the library's sources again.
sys.dont_write_bytecode = False
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

# A collection of the garbage collector's youngest generation after this many allocations (Python's default:
# 700), and of the older ones after 20 of the younger (10): the test processes after their collection
# (pytest_collection_finish), and every other Python process of the run from its start, the test processes'
# own and those they start (servers, pools, sessions, scripts: tests/every_process/sitecustomize.py, first
# on their PYTHONPATH), which import TVM, Streamlit and the explorer first.
GC_THRESHOLDS = (10_000, 20, 20)
os.environ["EXPLORER_TESTS_GC"] = ",".join(map(str, GC_THRESHOLDS))
EVERY_PROCESS = str(Path(__file__).resolve().parent / "every_process")
if EVERY_PROCESS not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [EVERY_PROCESS, os.environ.get("PYTHONPATH")]))

# The class's SQLite file: one per test process (pytest-xdist runs several, which must not share
# one class), never the checkout's data/ folder.
_CLASS_DIR = tempfile.mkdtemp(prefix="explorer-tests-")
atexit.register(shutil.rmtree, _CLASS_DIR, ignore_errors=True)
os.environ["EXPLORER_CLASS_DB"] = os.path.join(_CLASS_DIR, "class.sqlite3")

# The pages' diagnoses (a process per server that builds every neighbour of each setting shown) are
# off in the servers and app tests here, this process's and those it starts: they kept the cores busy
# for settings no test asks about. The tests of the diagnosis compute theirs in their own process
# (diagnoses_in_this_process); tests/test_server.py checks the diagnosing process itself.
os.environ["EXPLORER_DIAGNOSE"] = "0"

# The app tests' server (app.handle.server() in a test process) builds in that process: no build process
# to start, no build copied back, and a file's tests share one build per setting with the builds they
# make themselves. The servers the tests start keep a class server's build processes
# (test_classroom_bench.server_environment); tests/test_server.py tests the build processes.
os.environ["EXPLORER_BUILD_WORKERS"] = "0"

# No builds kept on disk: the tests count the builds each server makes, and a folder shared with earlier
# runs would answer them; tests/test_build_disk_cache.py gives each of its servers a folder of its own.
os.environ["EXPLORER_BUILD_DISK_CACHE"] = "0"
# Nor measurements (explorer/server/measure_store.py), for the same reason: tests/test_prepare.py gives
# its servers a folder of their own.
os.environ["EXPLORER_MEASURE_DIR"] = ""


def _compiled_once(get_bytecode):
    """ScriptCache.get_bytecode, shared by every AppTest of this process: each run of an AppTest makes a
    new cache and compiles the app's scripts again (parsed twice for Streamlit's magic), though they only
    change between runs when their file does."""
    compiled = {}

    def once(cache, script_path: str):
        key = (os.path.abspath(script_path), os.stat(script_path).st_mtime_ns)
        if key not in compiled:
            compiled[key] = get_bytecode(cache, script_path)
        return compiled[key]

    return once


def _wait_for_the_script(runner, timeout: float = 3) -> None:
    """AppTest's wait for a script run, without its polling: every millisecond it searched the run's
    events (one per element sent, thousands) for the end, taking the GIL from the script it waits for
    (a tenth of the app tests' CPU). The script's thread ends when the run ends; the rest is AppTest's."""
    runner._script_thread.join(timeout)
    if not runner.script_stopped():
        runner.request_stop()
        runner.join()
        raise RuntimeError(f"AppTest script run timed out after {timeout}(s)")


def _quicker_app_tests() -> None:
    """AppTest as this process's app tests run it (in the processes that run tests: the process that hands
    them out never runs an AppTest, and importing Streamlit there delayed the test processes' start by half
    a second)."""
    try:  # the GPU machine runs the kernel tests without Streamlit
        from streamlit.components.v2 import manifest_scanner
        from streamlit.runtime.scriptrunner.script_cache import ScriptCache
        from streamlit.testing.v1 import local_script_runner
    except ImportError:
        return
    # Every AppTest scans the metadata of every installed package for Streamlit components on its
    # first run (a fifth of a second each, a third of the app tests' time); nothing is installed
    # while the tests run, so one scan per process finds the same components.
    manifest_scanner.scan_component_manifests = functools.cache(manifest_scanner.scan_component_manifests)
    ScriptCache.get_bytecode = _compiled_once(ScriptCache.get_bytecode)
    local_script_runner.require_widgets_deltas = _wait_for_the_script


# Files run one after the other in one test process, which makes once what they all need: the files that
# build every preset (explorer.build's cache: each preset is built once there instead of once per
# process), and the other files that import TVM's tensor-core intrinsics (1.6-2.8 s of CPU in each
# process that imports them: explorer/schedules/tensor_intrinsics.py); the two files whose pages diagnose
# one step (its neighbours' builds and its cubin made once: 7.6 -> 5.3-5.7 CPU-s).
EVERY_PRESET = ("test_app.py", "test_export.py", "test_lessons.py", "test_preset_claims.py", "test_presets.py")
TENSOR_INTRINSICS = ("test_analysis_roofline.py", "test_compile_library.py", "test_golden.py", "test_lowering.py",
                     "test_schedule_matmul_modern.py", "test_tune.py", "test_tvmscript_frames.py")
GROUPS = {"one process": EVERY_PRESET + TENSOR_INTRINSICS,
          "diagnosed pages": ("test_class_moves.py", "test_diagnosis_panel.py")}


def group(path: str) -> str:
    """The group of tests that one test process runs, one after the other: a file, or the files of a
    group of GROUPS."""
    name = Path(path).name
    return next((together for together, files in GROUPS.items() if name in files), path)


# Groups that take five seconds or more (on the 2-core machine; the number of tests says little of a group's
# time: test_browser.py's three take 13 s, test_compile_library.py's six 8 s, test_app_urlstate.py's 125 a tenth
# of one): handed out before the other groups that keep a core busy, so that none of them starts last and ends
# the run alone.
LONG = ("one process", "test_schedule_attention_hopper.py", "test_knob_space.py", "test_classroom_rpc.py",
        "test_browser.py", "test_schedule_attention.py", "test_schedule_attention_mma.py", "test_property.py",
        "test_analysis_sass.py", "test_schedule_matmul_hopper.py", "test_analysis_diagnosis.py",
        "test_schedule_conv2d_async.py", "test_measure.py", "test_sweep.py", "test_class_hosts.py")


@functools.cache
def waits(name: str) -> bool:
    """Whether a group's tests mostly wait (a class in real time, a slow warm-up: little CPU for their
    seconds): its file says ``pytestmark = pytest.mark.waits``. Read from the file, as the process that
    hands out the groups collects no tests."""
    path = Path(__file__).parent.parent / name
    return path.is_file() and re.search(r"^pytestmark\b.*\bpytest\.mark\.waits\b", path.read_text(), re.M) is not None


def _order_groups(items) -> None:
    """The order in which the groups are offered (``--no-loadscope-reorder`` in pyproject.toml): those of
    LONG first, in its order, then the others largest first. A file's tests keep their order."""
    groups = {item: group(item.nodeid.split("::", 1)[0]) for item in items}
    sizes = Counter(groups.values())
    first = {name: i for i, name in enumerate(LONG)}
    rank = {name: i for i, name in enumerate(sorted(sizes, key=lambda name: (
        first.get(Path(name).name, len(LONG)), -sizes[name], name)))}
    items.sort(key=lambda item: rank[groups[item]])


try:  # pytest-xdist (requirements-dev.txt); the GPU machine runs the tests in one process without it
    from xdist.scheduler import LoadScopeScheduling
except ImportError:
    LoadScopeScheduling = None
else:
    class GroupScheduling(LoadScopeScheduling):
        """pytest-xdist's scheduling of whole files (``--dist loadfile``), a group of them (group()) as one,
        with one more test process than cores (pytest_xdist_auto_num_workers): the groups that wait (waits())
        go to one test process at a time, the first of them as soon as none waits, while the others keep
        the cores busy with the rest (in _order_groups' order). Two that wait at once left part of a core idle
        while they overlapped (handed out in turn with the others, the two largest started together: 1.6-1.8
        cores busy for the first 26 s); one after the other they end well before the rest. Once only groups
        that wait are left, they go to every free process. A process is handed its next group while it still
        runs the last tests of one (pytest-xdist's workers need the next test to run the last): behind a group
        that waits, that is the smallest group left, not the first (a group of 8 s waited there 25 s behind the
        last waiting group, and ended the run)."""

        def _split_scope(self, nodeid: str) -> str:
            return group(nodeid.split("::", 1)[0])

        def _assign_work_unit(self, node) -> None:
            waiting_elsewhere = sum(
                waits(scope) and not all(done.values())
                for other, work in self.assigned_work.items() if other is not node for scope, done in work.items())
            wanted = waiting_elsewhere < max(1, len(self.nodes) - len(os.sched_getaffinity(0)))
            waiting_here = any(waits(scope) and not all(done.values())
                               for scope, done in self.assigned_work.get(node, {}).items())
            otherwise = next(reversed(self.workqueue)) if waiting_here else next(iter(self.workqueue))
            scope = next((s for s in self.workqueue if waits(s) == wanted), otherwise)
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    def pytest_xdist_make_scheduler(config, log):
        return GroupScheduling(config, log)

    def pytest_xdist_auto_num_workers(config):
        """``-n auto``: one test process per core, and one more for the groups that wait (GroupScheduling)."""
        return len(os.sched_getaffinity(0)) + 1


def pytest_configure(config):
    """In a process that runs tests: AppTest made quicker (_quicker_app_tests). In the process that hands out the
    tests, before it starts the test processes: the bytecode of the sources and pytest's rewritten test modules,
    where a fresh checkout has none. Otherwise every test process compiled and rewrote them all at once in its
    collection (2.8 of its 5 CPU-s), each for itself."""
    if os.environ.get("PYTEST_XDIST_WORKER") or not getattr(config.option, "numprocesses", None):
        _quicker_app_tests()
        return
    import compileall
    import multiprocessing

    from _pytest.assertion import assertstate_key
    from _pytest.assertion.rewrite import PYC_TAIL, _read_pyc, _rewrite_test, _write_pyc, get_cache_dir

    root = Path(__file__).parent.parent
    state = config.stash[assertstate_key]
    tests = sorted((root / "tests").glob("test_*.py")) + [root / "tests" / "conftest.py"]
    missing = [path for path in tests if _read_pyc(path, get_cache_dir(path) / (path.name[:-3] + PYC_TAIL),
                                                   state.trace) is None]

    def rewrite(paths):  # in a forked process (this one has started no thread yet): 1.8 CPU-s in all
        for path in paths:
            source_hash, code = _rewrite_test(path, config)
            _write_pyc(state, code, source_hash, get_cache_dir(path) / (path.name[:-3] + PYC_TAIL))

    cores = len(os.sched_getaffinity(0))
    rewriters = [multiprocessing.get_context("fork").Process(target=rewrite, args=(missing[i::cores],))
                 for i in range(cores) if missing[i::cores]]
    for rewriter in rewriters:
        rewriter.start()
    for folder in ("explorer", "app", "bench", "tests"):
        compileall.compile_dir(root / folder, quiet=1)
    for rewriter in rewriters:
        rewriter.join()


# The niceness a test process takes before its first group that does not wait (GroupScheduling's test
# processes only): below the processes that the groups that wait start (a class server, a slow warm-up), which
# then get a core as soon as they have something to do. Their groups wait on those processes in real time, one
# after the other, 100 s and more in all on the 2-core machine: behind two busy test processes they waited for
# the cores too (their files' times varied by up to 20 s from run to run) and the last of them ended the run.
BEHIND_THE_WAITING = 5
_stepped_behind = []  # once: a process cannot take its niceness back


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    """A test process of GroupScheduling steps behind the groups that wait at its first test of another group."""
    if (os.environ.get("PYTEST_XDIST_WORKER") and not _stepped_behind
            and not waits(group(item.nodeid.split("::", 1)[0]))):
        _stepped_behind.append(os.nice(BEHIND_THE_WAITING))


def pytest_sessionfinish(session):
    """The app tests' server (``app.handle.server()`` of this process) closed when the tests end: its
    threads (on a GPU, the warm-up measuring every lesson step ahead) end with it, not while the
    interpreter and pytest's streams are taken down."""
    handle = sys.modules.get("app.handle")
    if handle is not None:
        handle.stop()


def pytest_collection_finish(session):
    """Fewer garbage collections in a test process: what the collection imported (TVM, Streamlit, the
    test modules) is frozen out of every later collection, and a collection starts after 10,000
    allocations rather than 700. A test process keeps hundreds of builds and pages alive, and the
    default thresholds scanned them again and again: a tenth of the preset files' CPU (4.4 of 44 s in
    the garbage collector, 1.6 s so)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def pytest_collection_modifyitems(config, items):
    import tvm  # here, not at the top: the process that hands out the tests (xdist's) never needs TVM

    _order_groups(items)
    if tvm.cuda(0).exist:
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def run_on_gpu():
    """Run a build's kernel on the local GPU; return (output in float32, NumPy reference)."""

    def run(built, seed: int = 0):
        import tvm

        workload = built.spec.workload
        device = tvm.cuda(0)
        inputs = workload.random_inputs(seed)
        output = tvm.runtime.empty(workload.output_shape(), workload.output_dtype(), device)
        from explorer.build import runtime_module_of

        kernel = tvm.runtime.Executable(runtime_module_of(built)).jit()
        kernel["main"](*(tvm.runtime.tensor(x, device) for x in inputs), output)
        return output.numpy().astype("float32"), workload.reference(*inputs)

    return run


@pytest.fixture
def assumed_calibration(monkeypatch):
    """The diagnosis's rules with their models' constants as assumed and the assumed margin, whatever
    explorer/analysis/diagnosis/calibration.json holds: hand-computed expectations do not move when
    bench/calibrate_diagnosis.py rewrites it (the bench scripts grade the calibrated diagnosis)."""
    from explorer.analysis.diagnosis import calibration

    monkeypatch.setattr(calibration, "table", lambda: {})


@pytest.fixture
def diagnoses_in_this_process(monkeypatch):
    """The app servers' diagnoses (the server's own and a stand-in GPU's), the same function,
    computed in this process rather than in the server's diagnosing process. That process runs
    below every other's priority (tests/test_server.py checks it), so while the other tests keep
    the cores busy a test waiting on a diagnosis waits minutes for its turn."""
    import explorer.server.api
    from app import handle
    from explorer.server.diagnosing import Diagnoses, diagnose_in_process

    # The app's own server first, before Diagnoses is replaced: made here, it would keep one of
    # the diagnoses closed below, and every later test of this process would meet it closed.
    server = handle.server()
    made = [Diagnoses(diagnose_in_process)]

    def in_this_process(run):
        made.append(Diagnoses(diagnose_in_process))
        return made[-1]

    monkeypatch.setattr(explorer.server.api, "Diagnoses", in_this_process)
    monkeypatch.setattr(server, "_diagnoses", made[0])
    yield
    for diagnoses in made:  # the diagnoses still queued would otherwise run before this process can exit
        diagnoses.close()


@pytest.fixture(scope="module")
def measuring_worker():
    """The GPU tests of a module measure in explorer.measure's worker process, stopped after them."""
    yield
    from explorer.measure import shutdown

    shutdown()
