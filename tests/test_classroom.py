"""Class mode's library: display names, the SQLite store (schema, restart, kill -9 in the
middle of writes, 30 writers at once), submissions checked against NumPy (real kernels on
llvm through the measuring worker), boards ranked per device, the teacher's token."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from test_measure_worker import WORKLOAD, correct_module, wrong_at_2_3_module

from explorer.classroom import (
    InvalidName,
    Store,
    SubmissionRefused,
    board,
    class_remote,
    is_teacher,
    open_store,
    presence,
    set_class_remote,
    submit,
    validate_name,
)
from explorer.classroom.store import MIGRATIONS
from explorer.measure import Measurement, MeasureSettings, Remote, RemoteError, Timing, measure_module, shutdown
from explorer.measure.gate import Check
from explorer.presets import get_preset

ROOT = Path(__file__).resolve().parent.parent
SPEC = get_preset("dw-blog-final-96").spec
FAST = MeasureSettings(repeats=3, time_limit_s=5, roofline=False)


@pytest.fixture(scope="module", autouse=True)
def stop_worker():
    yield
    shutdown()


def timed(median_us: float, graph_us: float | None = None, device: str = "GPU A") -> Measurement:
    """A correct measurement with the given times (for tests of what is recorded)."""
    graph = Timing.from_seconds([graph_us * 1e-6] * 3, 1) if graph_us else None
    timing = Timing.from_seconds([median_us * 1e-6] * 3, 1)
    return Measurement("w", "cuda", device, Check(True, 0.0, 1.0, 0, None), timing, None, 1, 1, 0.0, graph)


def measured_as(result: Measurement):
    return lambda spec, **options: result


# -- names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["Ann", "a", "x" * 32, "Jo-Ann O.Brien_2", "José", "  Li  "])
def test_valid_names(name):
    assert validate_name(name) == name.strip()


@pytest.mark.parametrize("name, reason", [
    ("", "1 to 32 characters"), ("   ", "1 to 32 characters"), ("x" * 33, "at most 32 characters; this one has 33"),
    ("<b>Ann</b>", "not '<'"), ("Ann&co", "not '&'"), ("a\tb", r"not '\\t'"), ("Ann!", "not '!'"),
])
def test_invalid_names_are_refused_with_a_reason(name, reason):
    with pytest.raises(InvalidName, match=reason):
        validate_name(name)


# -- store ---------------------------------------------------------------------------


def test_store_creates_its_folder_uses_wal_and_is_migrated(tmp_path):
    path = tmp_path / "new" / "class.sqlite3"
    store = Store(path)
    assert path.exists()
    assert store.connection().execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.schema_version() == len(MIGRATIONS)
    Store(path)  # opening again migrates nothing twice
    assert store.schema_version() == len(MIGRATIONS) and store.integrity() == "ok"


def test_default_path_comes_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_CLASS_DB", str(tmp_path / "x.sqlite3"))
    assert open_store().path == (tmp_path / "x.sqlite3").resolve()
    assert open_store() is open_store()


def test_class_step_set_and_cleared(tmp_path):
    store = Store(tmp_path / "c.sqlite3")
    assert store.class_step() is None
    store.set_class_step("step", "Shared memory", "/lessons?lesson=l&step=5", lesson="l", step=5)
    state = Store(tmp_path / "c.sqlite3").class_step()  # another connection sees it
    assert state.banner() == "The class is on step 5: Shared memory" and state.link.endswith("step=5")
    store.clear_class_step()
    assert store.class_step() is None


# -- submissions ---------------------------------------------------------------------


def test_a_correct_kernel_is_recorded_with_its_times_device_and_link(tmp_path):
    store = Store(tmp_path / "c.sqlite3")
    real = measure_module(correct_module(), WORKLOAD, target="llvm", settings=FAST)  # checked and timed on the CPU
    entry = submit(store, "Ann", SPEC, measure=measured_as(real), with_pytorch=False)
    assert (entry.name, entry.workload, entry.template) == ("Ann", SPEC.workload.label(), SPEC.template)
    assert entry.device == "CPU" and entry.median_us == real.median_us and entry.graph_us is None
    assert entry.knobs == SPEC.knobs.to_strings() and entry.query["knob.num_thread_x"] == entry.knobs["num_thread_x"]
    assert store.entries() == [entry]


def test_a_wrong_kernel_is_refused_with_the_mismatch(tmp_path):
    store = Store(tmp_path / "c.sqlite3")
    wrong = measure_module(wrong_at_2_3_module(), WORKLOAD, target="llvm", settings=FAST)
    with pytest.raises(SubmissionRefused, match=r"wrong at index \(2, 3\)"):
        submit(store, "Ann", SPEC, measure=measured_as(wrong), with_pytorch=False)
    assert store.entries() == []


def test_an_invalid_name_is_refused_before_measuring(tmp_path):
    def never(spec, **options):
        raise AssertionError("measured")

    with pytest.raises(InvalidName):
        submit(Store(tmp_path / "c.sqlite3"), "<script>", SPEC, measure=never)


def test_board_keeps_each_students_best_per_device_with_pytorch_ratio(tmp_path):
    store = Store(tmp_path / "c.sqlite3")
    for name, median, graph, device in [("Ann", 10, 8, "GPU A"), ("Ann", 9, 4, "GPU A"), ("Bo", 5, 5, "GPU A"),
                                        ("Bo", 3, None, "GPU B")]:
        submit(store, name, SPEC, measure=measured_as(timed(median, graph, device)), pytorch=lambda w: 6.0)
    places = board(store, SPEC.workload.label())
    assert [(p.rank, p.entry.name, p.entry.device, p.entry.score_us) for p in places] == [
        (1, "Ann", "GPU A", pytest.approx(4)), (2, "Bo", "GPU A", pytest.approx(5)),
        (1, "Bo", "GPU B", pytest.approx(3))]
    assert places[0].versus_pytorch == pytest.approx(6 / 4)  # PyTorch's time over the student's
    store.hide_entry(places[0].entry.id)  # Ann's 4 µs hidden: her 8 µs is her best now
    assert board(store, SPEC.workload.label())[1].entry.score_us == pytest.approx(8)
    assert store.reset_board(SPEC.workload.label()) == 4 and board(store, SPEC.workload.label()) == []


# -- lasting -------------------------------------------------------------------------

# The processes that stand for a server before or after a restart load the store's module alone (it needs
# only the standard library): the package would import TVM first (explorer.classroom.moves), most of a
# second of CPU that these tests of what SQLite keeps do not need.
STORE_ALONE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("class_store", "explorer/classroom/store.py")
sys.modules["class_store"] = module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
store = module.Store(sys.argv[1])
"""
WRITER = STORE_ALONE + """
for i in range(100000):
    entry = store.add_entry(name=f"s{i % 30}", workload="w", template="t", knobs={"k": str(i)}, query={}, target="cuda",
                            device="GPU", server=None, graph_us=None, median_us=float(i + 1))
    print(entry.id, flush=True)
"""


def test_the_board_survives_a_restart(tmp_path):
    path = tmp_path / "c.sqlite3"
    submit(Store(path), "Ann", SPEC, measure=measured_as(timed(7.0)), with_pytorch=False)
    # The board's rows are the store's best entries (explorer.classroom.board ranks them), read here by
    # another process.
    read = STORE_ALONE + "print(json.dumps([(e.name, e.median_us) for e in store.best(sys.argv[2])]))"
    out = subprocess.run([sys.executable, "-c", read, str(path), SPEC.workload.label()], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    assert json.loads(out) == [["Ann", pytest.approx(7.0)]]


def test_kill_9_while_writing_loses_nothing_acknowledged(tmp_path):
    path = tmp_path / "c.sqlite3"
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    acknowledged = []
    try:
        while len(acknowledged) < 200:
            acknowledged.append(int(writer.stdout.readline()))
    finally:
        os.kill(writer.pid, signal.SIGKILL)  # in the middle of the next writes
        writer.wait()
    acknowledged += [int(line) for line in writer.stdout.read().split()]  # printed before the kill
    store = Store(path)
    assert store.integrity() == "ok"
    ids = {entry.id for entry in store.entries()}
    assert set(acknowledged) <= ids
    assert all(entry.median_us == entry.id for entry in store.entries())  # no row half-written


def test_thirty_sessions_submit_at_once(tmp_path):
    store = Store(tmp_path / "c.sqlite3")
    start, errors, entries = threading.Barrier(30), [], []

    def student(i: int) -> None:
        try:
            start.wait()
            entries.append(submit(store, f"student {i}", SPEC, measure=measured_as(timed(1.0 + i)), with_pytorch=False))
            store.close()
        except Exception as error:  # noqa: BLE001 (collected and reported below)
            errors.append(error)

    threads = [threading.Thread(target=student, args=(i,)) for i in range(30)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == [] and len(entries) == 30
    assert len(board(store, SPEC.workload.label())) == 30


# -- teacher and presence ------------------------------------------------------------


def test_teacher_token(monkeypatch):
    monkeypatch.delenv("EXPLORER_TEACHER_TOKEN", raising=False)
    assert not is_teacher("") and not is_teacher("anything")  # no token: nobody is the teacher
    monkeypatch.setenv("EXPLORER_TEACHER_TOKEN", "s3cret-ü")
    assert is_teacher("s3cret-ü") and not is_teacher("s3cret") and not is_teacher("s3cret-üx")


def test_presence_counts_recent_students_by_step():
    now = time.monotonic()
    presence.beat("a-test", "test lesson · step 5", now=now)
    presence.beat("b-test", "test lesson · step 5", now=now)
    presence.beat("c-test", "test Explorer", now=now - 60)  # left a minute ago
    presence.beat("t-test", "test Class", teacher=True, now=now)  # the teacher is not a student
    counts = presence.students(now=now)
    assert counts["test lesson · step 5"] == 2 and counts["test Explorer"] == 0 and counts["test Class"] == 0


@pytest.mark.gpu
def test_a_preset_is_submitted_and_measured_on_this_gpu(tmp_path):
    store = Store(tmp_path / "c.sqlite3")
    spec = get_preset("best-dw-96").spec
    entry = submit(store, "GPU test", spec)  # the real path: measure_for_board and pytorch_for_board
    assert entry.median_us > 0 and "CPU" not in entry.device and entry.target.startswith("{")
    places = board(store, spec.workload.label())
    assert [p.entry.id for p in places] == [entry.id]
    assert store.pytorch_us(entry.workload, entry.device) is None or places[0].versus_pytorch > 0


def test_an_older_schema_is_migrated_with_its_entries(tmp_path):
    path = tmp_path / "c.sqlite3"
    old = Store(path)
    submit(old, "Ann", SPEC, measure=measured_as(timed(7.0)), with_pytorch=False)
    with old.connection() as conn:  # back to schema 1, as a file written before the class's GPUs setting
        for table in ("class_settings", "votes", "rounds"):
            conn.execute(f"DROP TABLE {table}")
        conn.execute("UPDATE schema_version SET version = 1")
    store = Store(path)
    assert store.schema_version() == len(MIGRATIONS) == 3
    assert [e.name for e in store.entries()] == ["Ann"]
    assert store.open_round("lesson", 2, "preset").state == "voting"  # schema 3's rounds
    set_class_remote(store, "10.0.0.5:9190", "h100")
    assert class_remote(Store(path)) == Remote("10.0.0.5", 9190, "h100")
    with pytest.raises(RemoteError, match="HOST:PORT"):
        set_class_remote(store, "nowhere", "h100")
    set_class_remote(store, "", "")
    assert class_remote(store) is None


def test_the_class_step_is_read_once_per_second_for_all_sessions(tmp_path, monkeypatch):
    store = Store(tmp_path / "c.sqlite3")
    reads = []
    real = store.class_step
    monkeypatch.setattr(store, "class_step", lambda: reads.append(1) or real())
    with ThreadPoolExecutor(16) as pool:  # sixteen banners at once
        assert list(pool.map(lambda _: store.shared_class_step(max_age_s=60), range(32))) == [None] * 32
    assert len(reads) == 1
    state = store.set_class_step("step", "Shared memory", "/lessons?lesson=l&step=5", lesson="l", step=5)
    assert store.shared_class_step(max_age_s=60) == state  # a write here is seen at once
    assert len(reads) == 2
    Store(tmp_path / "c.sqlite3").clear_class_step()  # another server process's write ...
    assert store.shared_class_step(max_age_s=60) == state  # ... shows once the read is older than max_age_s
    assert store.shared_class_step(max_age_s=0) is None and len(reads) == 3
