"""The class's lasting state in one SQLite file: the step the class is on, the leaderboard's
entries, PyTorch's time per workload and device, and the question rounds with their votes.

Every server thread (a Streamlit session) gets its own connection to the same file. WAL
mode lets readers go on while one writer commits; writers wait for each other
(``busy_timeout``) instead of failing with "database is locked", and each write is one
``BEGIN IMMEDIATE`` transaction (``with conn:``), so a process killed in the middle of one
leaves either all of it or none of it. ``synchronous=FULL``: a write is on disk before it is
acknowledged.
"""
from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path

DB_ENV = "EXPLORER_CLASS_DB"
DEFAULT_PATH = Path(__file__).resolve().parents[2] / "data" / "class.sqlite3"
BUSY_TIMEOUT_S = 30
# Every student's banner asks for the class step each second; one read per server per this
# many seconds serves them all (a write from this process is seen at once).
SHARED_READ_S = 1.0

# One migration per schema version, applied in order; never edit one that has shipped.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE class_state (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        kind TEXT NOT NULL CHECK (kind IN ('step', 'setting')),
        lesson TEXT, step INTEGER, title TEXT NOT NULL, link TEXT NOT NULL, set_at REAL NOT NULL
    );
    CREATE TABLE entries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL, workload TEXT NOT NULL, template TEXT NOT NULL,
        knobs TEXT NOT NULL, query TEXT NOT NULL, target TEXT NOT NULL, device TEXT NOT NULL, server TEXT,
        graph_us REAL, median_us REAL NOT NULL, created REAL NOT NULL, hidden INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX entries_by_board ON entries (workload, device, hidden);
    CREATE TABLE baselines (
        workload TEXT NOT NULL, device TEXT NOT NULL, pytorch_us REAL NOT NULL, measured REAL NOT NULL,
        PRIMARY KEY (workload, device)
    );
    """,
    # 2: the class's GPUs (an RPC tracker and key), set by the teacher for every session.
    "CREATE TABLE class_settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
    # 3: question rounds (a lesson step's question put to the class) and each student session's
    # answer per vote (1: alone, 2: after the discussion), no names; ``answer`` is the revealed
    # answer (explorer.questions.Answer as JSON).
    """
    CREATE TABLE rounds (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        lesson TEXT NOT NULL, step INTEGER NOT NULL, preset TEXT NOT NULL,
        vote INTEGER NOT NULL DEFAULT 1 CHECK (vote IN (1, 2)),
        state TEXT NOT NULL CHECK (state IN ('voting', 'closed', 'revealed', 'ended')),
        opened REAL NOT NULL, answer TEXT
    );
    CREATE TABLE votes (
        round INTEGER NOT NULL REFERENCES rounds (id), vote INTEGER NOT NULL, session TEXT NOT NULL,
        answer TEXT NOT NULL, at REAL NOT NULL,
        PRIMARY KEY (round, vote, session)
    );
    """,
)


@dataclass(frozen=True)
class ClassStep:
    """Where the teacher has put the class: a lesson's step, or a setting of the Explorer."""

    kind: str  # "step" or "setting"
    lesson: str | None
    step: int | None
    title: str
    link: str  # the app-relative URL that opens it
    set_at: float

    def banner(self) -> str:
        if self.kind == "step":
            return f"The class is on step {self.step}: {self.title}"
        return f"The class is on: {self.title}"


@dataclass(frozen=True)
class Entry:
    """One accepted submission."""

    id: int
    name: str
    workload: str
    template: str
    knobs: dict[str, str]
    query: dict[str, str]  # the link's query parameters (explorer.urlstate)
    target: str
    device: str
    server: str | None  # which GPU server measured it, when measured through a tracker
    graph_us: float | None  # replayed from a CUDA graph (as PyTorch is)
    median_us: float  # launched back to back
    created: float
    hidden: bool = False

    @property
    def score_us(self) -> float:
        """The figure entries are ranked by: the CUDA-graph time where there is one."""
        return self.graph_us if self.graph_us is not None else self.median_us


@dataclass(frozen=True)
class Round:
    """A lesson step's question put to the class (explorer.classroom.rounds moves it along)."""

    id: int
    lesson: str
    step: int
    preset: str  # the step's preset, which carries the question
    vote: int  # 1: the students answer alone; 2: again, after the discussion
    state: str  # "voting", "closed", "revealed" or "ended"
    opened: float
    answer: str | None  # the revealed answer (explorer.questions.Answer as JSON), None before

    @property
    def key(self) -> tuple:
        """What a page showing the round must follow: a new round, vote or state."""
        return (self.id, self.vote, self.state)


@dataclass(frozen=True)
class Vote:
    session: str  # the student's browser session (no name)
    vote: int
    answer: str
    at: float


_ROUND_COLUMNS = "id, lesson, step, preset, vote, state, opened, answer"
_ENTRY_COLUMNS = ("id, name, workload, template, knobs, query, target, device, server, graph_us, median_us, created, "
                  "hidden")


def default_path() -> Path:
    return Path(os.environ.get(DB_ENV) or DEFAULT_PATH)


class Store:
    """The class's SQLite file; safe to share between threads (one connection per thread)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()
        self._shared_lock = threading.Lock()
        self._shared: dict[str, tuple[float, object]] = {}  # what the banners read: name -> (read at, value)
        self._migrate()

    # -- connections and schema ---------------------------------------------------------

    def connection(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            # isolation_level IMMEDIATE: a write transaction takes the write lock when it
            # begins, so two writers queue on busy_timeout instead of deadlocking mid-way.
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level="IMMEDIATE")
            conn.row_factory = sqlite3.Row
            conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_S * 1000}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = FULL")
            self._local.conn = conn
        return conn

    def close(self) -> None:
        """Close this thread's connection (the others close with their threads)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None

    def schema_version(self) -> int:
        return self.connection().execute("SELECT version FROM schema_version").fetchone()[0]

    def _migrate(self) -> None:
        conn = self.connection()
        with conn:  # one transaction: a schema is all migrated or not at all
            conn.execute("BEGIN IMMEDIATE")  # DDL opens no transaction by itself
            conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = conn.execute("SELECT version FROM schema_version").fetchone()
            if row is None:
                conn.execute("INSERT INTO schema_version VALUES (0)")
            version = row[0] if row else 0
            for script in MIGRATIONS[version:]:
                for statement in filter(str.strip, script.split(";")):
                    conn.execute(statement)
            conn.execute("UPDATE schema_version SET version = ?", (len(MIGRATIONS),))

    def integrity(self) -> str:
        return self.connection().execute("PRAGMA integrity_check").fetchone()[0]

    # -- class state --------------------------------------------------------------------

    def class_step(self) -> ClassStep | None:
        row = self.connection().execute("SELECT kind, lesson, step, title, link, set_at FROM class_state").fetchone()
        return ClassStep(*row) if row else None

    def shared_class_step(self, max_age_s: float = SHARED_READ_S) -> ClassStep | None:
        """The class step as this process read it at most ``max_age_s`` ago: the banners of
        all sessions share one read (another server process's change shows within that)."""
        return self._shared_read("step", self.class_step, max_age_s)

    def _shared_read(self, name: str, read, max_age_s: float):
        with self._shared_lock:
            now = time.monotonic()
            if name not in self._shared or now - self._shared[name][0] >= max_age_s:
                self._shared[name] = (now, read())
            return self._shared[name][1]

    def set_class_step(self, kind: str, title: str, link: str, lesson: str | None = None,
                       step: int | None = None) -> ClassStep:
        state = ClassStep(kind, lesson, step, title, link, time.time())
        with self.connection() as conn:
            conn.execute("INSERT OR REPLACE INTO class_state VALUES (1, ?, ?, ?, ?, ?, ?)",
                         (kind, lesson, step, title, link, state.set_at))
        self._forget_shared_step()
        return state

    def clear_class_step(self) -> None:
        with self.connection() as conn:
            conn.execute("DELETE FROM class_state")
        self._forget_shared_step()

    def _forget_shared_step(self) -> None:
        self._forget_shared("step")

    def _forget_shared(self, name: str) -> None:
        with self._shared_lock:
            self._shared.pop(name, None)

    def setting(self, name: str) -> str | None:
        row = self.connection().execute("SELECT value FROM class_settings WHERE name = ?", (name,)).fetchone()
        return row[0] if row else None

    def set_setting(self, name: str, value: str | None) -> None:
        with self.connection() as conn:
            if value is None:
                conn.execute("DELETE FROM class_settings WHERE name = ?", (name,))
            else:
                conn.execute("INSERT OR REPLACE INTO class_settings VALUES (?, ?)", (name, value))

    # -- leaderboard --------------------------------------------------------------------

    def add_entry(self, *, name: str, workload: str, template: str, knobs: dict[str, str], query: dict[str, str],
                  target: str, device: str, server: str | None, graph_us: float | None, median_us: float) -> Entry:
        created = time.time()
        with self.connection() as conn:
            cursor = conn.execute(
                f"INSERT INTO entries ({_ENTRY_COLUMNS}) VALUES (NULL, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
                (name, workload, template, json.dumps(knobs), json.dumps(query), target, device, server, graph_us,
                 median_us, created))
        return Entry(cursor.lastrowid, name, workload, template, dict(knobs), dict(query), target, device, server,
                     graph_us, median_us, created)

    def entries(self, workload: str | None = None, *, include_hidden: bool = False) -> list[Entry]:
        sql = (f"SELECT {_ENTRY_COLUMNS} FROM entries WHERE (? IS NULL OR workload = ?) AND (? OR hidden = 0) "
               "ORDER BY id")
        return [_entry(row) for row in self.connection().execute(sql, (workload, workload, include_hidden))]

    def best(self, workload: str) -> list[Entry]:
        """Each student's fastest visible entry per device, fastest first within a device."""
        sql = f"""
            SELECT {_ENTRY_COLUMNS} FROM (
                SELECT *, ROW_NUMBER() OVER (PARTITION BY name, device
                                             ORDER BY COALESCE(graph_us, median_us), id) AS place
                FROM entries WHERE workload = ? AND hidden = 0)
            WHERE place = 1 ORDER BY device, COALESCE(graph_us, median_us), id"""
        return [_entry(row) for row in self.connection().execute(sql, (workload,))]

    def workloads(self) -> list[str]:
        """Workloads with at least one visible entry."""
        rows = self.connection().execute("SELECT DISTINCT workload FROM entries WHERE hidden = 0 ORDER BY workload")
        return [row[0] for row in rows]

    def hide_entry(self, entry_id: int) -> bool:
        with self.connection() as conn:
            return conn.execute("UPDATE entries SET hidden = 1 WHERE id = ?", (entry_id,)).rowcount == 1

    def reset_board(self, workload: str) -> int:
        """Remove every entry of ``workload``; returns how many."""
        with self.connection() as conn:
            return conn.execute("DELETE FROM entries WHERE workload = ?", (workload,)).rowcount

    # -- question rounds and votes ----------------------------------------------------------

    def open_round(self, lesson: str, step: int, preset: str) -> Round:
        """A new round on ``preset``'s question, its first vote open; the round before ends."""
        opened = time.time()
        with self.connection() as conn:
            conn.execute("UPDATE rounds SET state = 'ended' WHERE state != 'ended'")
            cursor = conn.execute("INSERT INTO rounds (lesson, step, preset, vote, state, opened) "
                                  "VALUES (?, ?, ?, 1, 'voting', ?)", (lesson, step, preset, opened))
        self._forget_shared("round")
        return Round(cursor.lastrowid, lesson, step, preset, 1, "voting", opened, None)

    def round(self, round_id: int) -> Round | None:
        row = self.connection().execute(f"SELECT {_ROUND_COLUMNS} FROM rounds WHERE id = ?", (round_id,)).fetchone()
        return Round(*row) if row else None

    def current_round(self) -> Round | None:
        """The latest round that has not ended, or None."""
        row = self.connection().execute(
            f"SELECT {_ROUND_COLUMNS} FROM rounds WHERE state != 'ended' ORDER BY id DESC LIMIT 1").fetchone()
        return Round(*row) if row else None

    def shared_round(self, max_age_s: float = SHARED_READ_S) -> Round | None:
        """The current round as this process read it at most ``max_age_s`` ago (as the class step)."""
        return self._shared_read("round", self.current_round, max_age_s)

    def rounds(self) -> list[Round]:
        return [Round(*row) for row in self.connection().execute(f"SELECT {_ROUND_COLUMNS} FROM rounds ORDER BY id")]

    def move_round(self, round_id: int, from_states: tuple[str, ...], state: str, vote: int | None = None,
                   answer: str | None = None) -> bool:
        """Move round ``round_id`` to ``state`` (and ``vote``, ``answer`` where given) if it is in
        one of ``from_states``; whether it moved (another teacher's click may have come first)."""
        marks = ", ".join("?" for _ in from_states)
        with self.connection() as conn:
            moved = conn.execute(
                f"UPDATE rounds SET state = ?, vote = COALESCE(?, vote), answer = COALESCE(?, answer) "
                f"WHERE id = ? AND state IN ({marks})", (state, vote, answer, round_id, *from_states)).rowcount == 1
        self._forget_shared("round")
        return moved

    def cast_vote(self, round_id: int, vote: int, session: str, answer: str) -> bool:
        """Record (or change) ``session``'s answer in vote ``vote`` of the round, only while that
        vote is open; whether it was recorded."""
        with self.connection() as conn:
            return conn.execute(
                "INSERT OR REPLACE INTO votes SELECT ?, ?, ?, ?, ? WHERE EXISTS "
                "(SELECT 1 FROM rounds WHERE id = ? AND vote = ? AND state = 'voting')",
                (round_id, vote, session, answer, time.time(), round_id, vote)).rowcount == 1

    def votes(self, round_id: int, vote: int | None = None) -> list[Vote]:
        """The round's answers (of one vote, or both), oldest first."""
        rows = self.connection().execute(
            "SELECT session, vote, answer, at FROM votes WHERE round = ? AND (? IS NULL OR vote = ?) ORDER BY at",
            (round_id, vote, vote))
        return [Vote(*row) for row in rows]

    # -- PyTorch per workload and device -------------------------------------------------

    def pytorch_us(self, workload: str, device: str) -> float | None:
        row = self.connection().execute("SELECT pytorch_us FROM baselines WHERE workload = ? AND device = ?",
                                        (workload, device)).fetchone()
        return row[0] if row else None

    def set_pytorch_us(self, workload: str, device: str, pytorch_us: float) -> None:
        with self.connection() as conn:
            conn.execute("INSERT OR REPLACE INTO baselines VALUES (?, ?, ?, ?)",
                         (workload, device, pytorch_us, time.time()))


def _entry(row: sqlite3.Row) -> Entry:
    values = dict(row)
    values.update(knobs=json.loads(values["knobs"]), query=json.loads(values["query"]), hidden=bool(values["hidden"]))
    return Entry(**values)


_stores: dict[Path, Store] = {}
_stores_lock = threading.Lock()


def open_store(path: str | os.PathLike | None = None) -> Store:
    """The process-wide Store of ``path`` (default: ``$EXPLORER_CLASS_DB`` or data/class.sqlite3)."""
    resolved = Path(path or default_path()).resolve()
    with _stores_lock:
        if resolved not in _stores:
            _stores[resolved] = Store(resolved)
        return _stores[resolved]
