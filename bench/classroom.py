"""A class of students against a *running* app server, through Streamlit's own websocket
protocol (what a browser sends and receives; AppTest would bypass the server).

Each student opens a lesson step from a link, then every ``--think-time`` seconds (±50%)
moves one knob slider of the sidebar to another value that the library can build (a valid
move; the app would refuse the others with its reason), and records the time from the
move until the new code is on the page and until the new latency is (the page polls for
it, as a browser does, by answering the server's fragment auto-reruns). An observer
session reads the Device page every few seconds (the GPU queue). With ``--run-log`` it
also checks, from the measuring worker's log of kernel runs, that no two kernels were
ever timed at the same time.

Each student loads the page over HTTP first and sends its cookies with the websocket, as a
browser does: a reverse proxy that keeps a browser on one app process by a cookie then routes
the websocket to the process the page came from.

The steps come from ``--lesson NAME`` (repeatable) or ``--links ID,...`` (default: the
depthwise tutorial's); ``--same-link`` makes every student open the first of them at the
same moment, reported as a phase of its own. The server is found by the port it listens on
(or ``--server-pid``) and taken whole: the ``explorer serve`` launcher above that process,
where there is one, and everything below it (the proxy, the measuring service, each app
process, their pools). Every 2 s each part's CPU is sampled with the server's memory; the
report says how many kernels were measured per second, the share of samples in which each
part was at 90% of what it can use, and which parts limited the class.

A load test counts only if it made the load it names: the report puts the demand the class
meant to make (``students / (think time + --intended-reply)`` moves per second) beside the
moves per second it delivered, and each process playing students samples its own CPU (its
websockets, and its checks of the students' moves, which schedule them with TVM). A run in
which one of those processes was at 90% of a core in a quarter of its samples is no verdict
on the server: the report says so and the script exits with status 3 (1: a student met an
error; 0: neither).

    python bench/classroom.py --url http://localhost:8501 --students 30 --seconds 300 \\
        --think-time 5 [--lesson matmul_modern] [--same-link] [--run-log /tmp/explorer-kernel-runs.log] [--write LABEL]
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import http.cookiejar
import json
import multiprocessing
import os
import platform
import random
import shlex
import statistics
import sys
import threading
import time
import urllib.request
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode, urlparse

import psutil
from docs_section import write_section
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import connect

from app.widgets import format_value
from explorer.build import scheduled
from explorer.errors import ExplorerError
from explorer.lessons import get_lesson
from explorer.measure.worker import read_run_line
from explorer.presets import get_preset
from explorer.serve import wait_healthy
from explorer.services.compiles import COMPILE_LOG_CUBINS, COMPILE_LOG_TIMES

warnings.filterwarnings("ignore", r"connect\(\) must be used as a context manager", DeprecationWarning)

# The steps students open: the depthwise tutorial's, as a teacher would hand them out.
LINKS = ("dw-blog-blocking-96", "dw-blog-threads-case2", "dw-blog-vthread-case2", "dw-blog-final-96")
KNOB_PREFIX = "knob:"
LATENCY = "Latency (median)"
PAGE_CPU = "Page run CPU (p95)"  # the Device page's figure of what a page run costs the server
GPUS_CAPTION = "GPUs: "  # the Device page's line of measurements per GPU, on a server of several
CONNECT_S = 5.0  # with --same-link, the time the students get to connect before they all open the link
PROCESS_START_S = 2.0  # ... and, on top, per load process: a spawned one imports TVM and Streamlit's protocol first
STALE = "now stale"  # the app refused the setting, said why, and kept the last valid one on screen
SAMPLE_EVERY_S = 2.0  # the server's parts and each load generator process: a CPU sample this often
SATURATED = 0.9  # of what a part can use (cores, or the GPU's time): a sample at this much is saturated
LIMIT_SHARE = 0.25  # of a part's samples saturated make it a limit (a load generator process: the run's)
INTENDED_REPLY_S = 1.0  # the reply a class is meant to get: a move's code on the page in about a second
# A page is closed as a browser closes its tab, waiting for no reply: the observer's page, closed while the
# Device page ran, waited 10 s (websockets' default) for the server's closing handshake, and the report's
# wall time (and the measurements per second and GPU busy share computed from it) with it.
CLOSE_TIMEOUT_S = 0.5


@dataclass
class Student:
    number: int
    link: str
    code_s: list = field(default_factory=list)  # move → new code shown
    latency_s: list = field(default_factory=list)  # move → new latency shown, for a setting new to the server
    revisit_s: list = field(default_factory=list)  # ... for a setting the class had seen
    open_s: float | None = None  # link → first code
    first_latency_s: float | None = None  # link → first latency
    seed: float = 0.0  # of this student's random moves
    moves: int = 0
    refused: int = 0  # settings the app refused with its reason (not errors)
    no_latency: int = 0  # moves whose latency had not come before the next move
    waiting_notices: list = field(default_factory=list)  # what the page said instead, each time
    errors: list = field(default_factory=list)
    lost: list = field(default_factory=list)  # the moves that showed no code in time: their settings
    timeline: list = field(default_factory=list)  # (time of the move, template, code_s, latency_s or None)


def page_cookie(page_url: str, stream_url: str, timeout: float, cookie: str = "") -> tuple[str, str | None]:
    """The Cookie header a browser sends with its websocket to ``stream_url`` after loading
    ``page_url`` with the cookies ``cookie`` it already had ("" where the server set none, as a
    plain Streamlit server does), and the app process that answered (a class server's proxy
    names it in ``X-Explorer-App``; None elsewhere)."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with opener.open(urllib.request.Request(page_url, headers={"Cookie": cookie} if cookie else {}),
                     timeout=timeout) as answer:
        answer.read()
        app = answer.headers.get("X-Explorer-App")
    request = urllib.request.Request(stream_url)
    jar.add_cookie_header(request)  # the jar's own rules of domain and path, as a browser's
    cookies = dict(part.split("=", 1) for part in cookie.split("; ") if "=" in part)
    cookies.update(part.split("=", 1) for part in request.get_header("Cookie", "").split("; ") if "=" in part)
    return "; ".join(f"{name}={value}" for name, value in cookies.items()), app


class Page:
    """One browser session: loads the page (``query``: its link's; ``cookie``: what the browser
    already holds), sends reruns, reads deltas,
    answers auto-reruns."""

    def __init__(self, url: str, timeout: float, query: str = "", cookie: str = ""):
        parts = urlparse(url)
        base = f"{parts.netloc}{parts.path.rstrip('/')}"
        # The page first, as a browser loads it: a proxy that keeps each browser on one app process
        # by a cookie sets it here, and routes the websocket that sends it back to the same process.
        self.cookie, self.app = page_cookie(f"{parts.scheme}://{base}/" + (f"?{query}" if query else ""),
                                            f"{parts.scheme}://{base}/_stcore/stream", timeout, cookie)
        cookie = self.cookie
        scheme = "wss" if parts.scheme == "https" else "ws"
        self._closing = contextlib.ExitStack()  # websockets wants its connection used as a context manager
        self.ws = self._closing.enter_context(connect(f"{scheme}://{base}/_stcore/stream", subprotocols=["streamlit"],
                                                      additional_headers={"Cookie": cookie} if cookie else None,
                                                      open_timeout=timeout, close_timeout=CLOSE_TIMEOUT_S,
                                                      max_size=None))
        self.sliders: dict[str, tuple[str, list[str]]] = {}  # key → (widget id, options)
        self.fragments: dict[str, tuple[float, float]] = {}  # fragment id → (interval, next time)
        self.pages: dict[str, str] = {}  # page url name → script hash
        self.page = ""  # the page the server last ran: a browser's reruns name it (a link to / goes on to the Explorer)
        self.query = query

    def rerun(self, widget=None, fragment_id: str = "", page_hash: str = "") -> None:
        msg = BackMsg()
        state = msg.rerun_script
        state.query_string = self.query
        if page_hash or self.page:
            state.page_script_hash = page_hash or self.page
        if fragment_id:
            state.fragment_id, state.is_auto_rerun = fragment_id, True
        if widget is not None:
            widget_id, value = widget
            entry = state.widget_states.widgets.add()
            entry.id = widget_id
            entry.string_array_value.data.append(value)
        self.ws.send(msg.SerializeToString())

    def read(self, until: float):
        """Yield ForwardMsgs until ``until`` (None on a quiet 50 ms), firing auto-reruns."""
        while time.time() < until:
            now = time.time()
            for fid, (interval, due) in list(self.fragments.items()):
                if now >= due:
                    self.fragments[fid] = (interval, now + interval)
                    self.rerun(fragment_id=fid)
            try:
                raw = self.ws.recv(timeout=0.05)
            except TimeoutError:
                yield None
                continue
            msg = ForwardMsg()
            msg.ParseFromString(raw)
            self._track(msg)
            yield msg

    def _track(self, msg: ForwardMsg) -> None:
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            if not msg.metadata.run.fragment_ids:  # a full run registers its fragments again (a browser does the same)
                self.fragments.clear()
            self.page = msg.new_session.page_script_hash or self.page
            for page in msg.new_session.app_pages:
                self.pages[page.url_pathname or page.page_name] = page.page_script_hash
        elif kind == "navigation":
            for page in msg.navigation.app_pages:
                self.pages[page.url_pathname or page.page_name] = page.page_script_hash
        elif kind == "auto_rerun":
            interval = msg.auto_rerun.interval
            self.fragments[msg.auto_rerun.fragment_id] = (interval, time.time() + interval)
        elif kind == "stop_auto_rerun":
            self.fragments.clear()
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            element = msg.delta.new_element
            if element.WhichOneof("type") == "slider":
                slider = element.slider
                key = slider.id.rsplit("-", 1)[-1] if "-" in slider.id else slider.id
                self.sliders[key] = (slider.id, list(slider.options))

    def close(self) -> None:
        self._closing.close()


def element_of(msg):
    if msg is None or msg.WhichOneof("type") != "delta" or msg.delta.WhichOneof("type") != "new_element":
        return None, None
    element = msg.delta.new_element
    return element.WhichOneof("type"), element


def watch(page: Page, started: float, until: float, want_latency: bool, trace: list | None = None):
    """(seconds to new code, seconds to new latency, refused, errors, the last notice the
    page showed) of one script run; ``trace`` gets what arrived meanwhile (a message's kind, a
    finished run's status), for a move that showed no code."""
    code = latency = None
    notice = ""
    refused, errors, alerts = False, [], []
    for msg in page.read(until):
        if trace is not None and msg is not None:
            trace.append(message_kind(msg, time.time() - started))
        kind, element = element_of(msg)
        if kind == "html" and code is None and "data-view=" in element.html.body:
            code = time.time() - started
        elif kind == "metric" and element.metric.label == LATENCY and latency is None:
            latency = time.time() - started
        elif kind == "exception":
            errors.append(f"{element.exception.type}: {element.exception.message}")
        elif kind == "alert" and STALE in element.alert.body:
            refused = True
        elif kind == "alert" and element.alert.format == 1:  # ERROR
            alerts.append(element.alert.body[:200])
        elif kind == "alert":
            notice = element.alert.body
        if code is not None and (latency is not None or not want_latency or refused):
            break
    return code, latency, refused, errors + ([] if refused else alerts), notice


def message_kind(msg, at: float) -> str:
    """A ForwardMsg in a few words: its type, a delta's element, a finished run's status."""
    kind = msg.WhichOneof("type")
    if kind == "delta":
        element_kind, element = element_of(msg)
        kind += ":" + (element_kind if element_kind else msg.delta.WhichOneof("type") or "")
        if element_kind in ("alert", "markdown", "exception"):  # what the page said, in short
            text = getattr(element, element_kind)
            kind += " " + repr((getattr(text, "body", "") or getattr(text, "message", ""))[:80])
    elif kind == "new_session":  # a run starts: the page's (the move's) or a waiting part's own
        kind += ":fragment" if msg.metadata.run.fragment_ids else ":page"
    elif kind == "script_finished":
        kind += f":{msg.script_finished}"
    elif kind == "session_status_changed":
        kind += ":running" if msg.session_status_changed.script_is_running else ":idle"
    return f"{at:.2f} {kind}"


def valid_move(spec, sliders: dict, rng: random.Random, tries: int = 30):
    """A random knob slider moved to another value that the library schedules (the app would
    refuse the others, with its reason; the few it refuses later, while lowering, count as
    refused): (new spec, widget id, label, the label it had), or None."""
    prefix = f"{KNOB_PREFIX}{spec.template}."
    knobs = {key[len(prefix):]: key for key in sliders if key.startswith(prefix)}
    if not knobs:  # the page showed no knob (it failed: that is counted as its error)
        return None
    for _ in range(tries):
        name = rng.choice(sorted(knobs))
        widget_id, labels = sliders[knobs[name]]
        by_label = {format_value(v): v for v in spec.knobs.field(name).values(spec.workload)}
        label = rng.choice(labels)
        if label not in by_label or by_label[label] == getattr(spec.knobs, name):
            continue
        try:
            candidate = spec.with_knobs(**{name: by_label[label]})
            _buildable(candidate)
        except ExplorerError:
            continue
        return candidate, widget_id, label, format_value(getattr(spec.knobs, name))
    return None


@functools.lru_cache(maxsize=4096)
def _buildable(spec) -> bool:
    # A third of a build: a load generator on the server's machine takes little of its CPU. It is
    # the load generator's own CPU all the same (TVM's scheduling, under its GIL): sampled with it.
    scheduled(spec, "auto")  # raises ExplorerError for a setting the app would refuse
    return True


def student(url: str, me: Student, end: float, think: float, want_latency: bool, rng: random.Random,
            seen: set, revisit_every: int = 0, open_at: float | None = None) -> None:
    """One student: open ``me.link`` (at the time ``open_at``, where given: the same moment
    as the others), then move a knob every ``think`` seconds or so until ``end``."""
    try:
        page = Page(url, timeout=30, query=urlencode({"preset": me.link}))
    except Exception as error:  # the server refused or is down
        me.errors.append(f"connect: {error}")
        return
    try:
        spec = get_preset(me.link).spec
        if open_at is not None:
            time.sleep(max(0.0, open_at - time.time()))
        started = time.time()
        page.rerun()
        code, latency, _, errors, notice = watch(page, started, min(end, started + 120), want_latency)
        me.open_s, me.first_latency_s = code, latency
        me.errors += errors
        if latency is None and want_latency:
            me.waiting_notices.append(notice)
        elif latency is not None:
            seen.add(spec)
        undo = None  # the last move, reversed (a revisit)
        while time.time() < end:
            pause = think * rng.uniform(0.5, 1.5)
            for _ in page.read(min(end, time.time() + pause)):
                pass
            revisit = bool(revisit_every and undo and (me.moves + 1) % revisit_every == 0)
            move = undo if revisit else valid_move(spec, page.sliders, rng)
            if move is None or time.time() >= end:
                continue
            before = spec
            spec, widget_id, label, previous_label = move
            undo = None if revisit else (before, widget_id, previous_label, label)
            started = time.time()
            page.rerun((widget_id, label))
            me.moves += 1
            trace: list[str] = []
            code, latency, refused, errors, notice = watch(page, started, started + max(30.0, think * 3),
                                                           want_latency, trace)
            me.errors += errors
            if refused:
                me.refused += 1
                continue
            if code is None:
                me.errors.append("no code shown within the time limit")
                # Which setting, and what the page said meanwhile: the report's lost_moves.
                me.lost.append({"at": started, "template": spec.template, "knobs": repr(spec.knobs),
                                "notice": notice[:200], "messages": trace})
                continue
            me.code_s.append(code)
            me.timeline.append((started, spec.template, code, latency))
            setting = spec
            if latency is not None:
                (me.revisit_s if setting in seen else me.latency_s).append(latency)
            elif want_latency:
                me.no_latency += 1
                me.waiting_notices.append(notice)
            seen.add(setting)
    except Exception as error:  # a broken connection is an error of the run, not of the bench
        me.errors.append(f"{type(error).__name__}: {error}")
    finally:
        page.close()


def is_launcher(cmdline: list[str]) -> bool:
    """Whether a process with this command line is ``explorer serve``'s launcher (``python -m explorer
    serve``, ``tvm-explorer serve``): the top of the server, above all its processes."""
    return "explorer serve" in " ".join(cmdline)


def role_of(cmdline: list[str]) -> str:
    """The part of the server that a process with this command line is: "app" (a Streamlit process,
    ``python -m app.launch run`` or ``streamlit run``), "proxy" (caddy), "measuring" (the measuring
    service), or "workers" (the others: the launcher, the pools' processes, the measuring worker)."""
    names = [os.path.basename(part) for part in cmdline]
    if "explorer.measuring" in cmdline:  # python -m explorer.measuring
        return "measuring"
    if names and names[0] in ("caddy", "caddy.exe"):
        return "proxy"
    if "app.launch" in cmdline or any(name in ("streamlit", "streamlit.exe") for name in names):
        return "app"
    return "workers"


def worker_kind(process) -> str:
    """What a worker process does, from the name the server gives it (explorer.processes: "build
    worker", "compile worker", "diagnose worker", "measure worker"), or "other" (the launcher, a
    process not named)."""
    try:
        name = process.name()
    except psutil.Error:
        return "other"
    return name.removesuffix(" worker") if name.endswith(" worker") else "other"


def _cmdline(process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # gone, or not ours to read
        return []


def server_process(url: str, pid: int | None = None):
    """The server's top process, whose tree is the whole server: the process listening on ``url``'s
    port (or ``pid``'s), or its nearest ancestor that is ``explorer serve``'s launcher (of the proxy,
    the measuring service and the app processes). When ``pid`` is a wrapper (``timeout``, a shell,
    a test), the launcher below it, else the Streamlit process below it."""
    if pid is None:
        port = urlparse(url).port or (443 if urlparse(url).scheme == "https" else 80)
        pid = next((c.pid for c in psutil.net_connections("tcp")
                    if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid), None)
        if pid is None:
            return None
    process = psutil.Process(pid)
    for candidate in [process, *process.parents()]:
        if is_launcher(_cmdline(candidate)):
            return candidate
    if role_of(_cmdline(process)) != "workers":  # the server itself: a Streamlit process, or the proxy
        return process
    below = process.children(recursive=True)
    return (next((c for c in below if is_launcher(_cmdline(c))), None)
            or next((c for c in below if role_of(_cmdline(c)) == "app"), process))


def server_tree(root) -> list[tuple]:
    """(process, role, parent's pid) of ``root`` and every process below it, by ``role_of``."""
    members = [root, *root.children(recursive=True)]
    parents, roles = {}, {}
    for member in members:
        try:
            parents[member.pid] = member.ppid()
        except psutil.Error:
            parents[member.pid] = None
        roles[member.pid] = role_of(_cmdline(member))
    tree = []
    for member in members:
        role = roles[member.pid]
        if role != "workers" and roles.get(parents[member.pid]) == role:
            role = "workers"  # a forked child runs under its parent's command line: one of its workers
        tree.append((member, role, parents[member.pid]))
    return tree


def cpu_sample(tree: list[tuple], previous: dict) -> dict | None:
    """Cores each part of the server used since ``previous`` (its last reading: "t", and "cpu":
    (pid, start time) → CPU seconds; updated): "app", one number per app process (each its own
    part: one Python process's GIL); "workers" (all the other processes, summed); "proxy" and
    "measuring" where the server has them. None on the first reading."""
    now, cpu, queued = time.time(), {}, {}
    since = previous.get("t")
    # kinds: the workers' cores by kind; queued: by kind, the seconds per second its processes were
    # ready to run but waited for a core (the kernel's run-queue time, /proc/PID/schedstat)
    used: dict = {"app": [], "workers": 0.0, "kinds": collections.Counter(), "queued": collections.Counter()}
    for member, role, _ in tree:
        try:
            key = (member.pid, member.create_time())
            times = member.cpu_times()
        except psutil.Error:  # gone meanwhile (a pool restarts its processes)
            continue
        cpu[key] = times.user + times.system
        if role == "workers":
            queued[key] = run_queue_s(member.pid)
        if role in ("proxy", "measuring"):
            used.setdefault(role, 0.0)
        if since is None or now <= since:
            continue
        if key in previous["cpu"]:
            seconds = cpu[key] - previous["cpu"][key]
        elif key[1] >= since:  # started since the last reading: all of its CPU is this interval's
            seconds = cpu[key]
        elif role == "app":  # an app process not seen before: no reading of its own yet
            continue
        else:
            seconds = 0.0
        rate = seconds / (now - since)
        if role == "app":
            used["app"].append(rate)
        else:
            used[role] += rate
        if role == "workers":
            used["kinds"][worker_kind(member)] += rate
            if queued[key] is not None and previous.get("queued", {}).get(key) is not None:
                used["queued"][worker_kind(member)] += (queued[key] - previous["queued"][key]) / (now - since)
    previous["t"], previous["cpu"], previous["queued"] = now, cpu, queued
    used["kinds"], used["queued"] = dict(used["kinds"]), dict(used["queued"])
    return used if since is not None else None


def run_queue_s(pid: int) -> float | None:
    """Seconds the process has waited, ready to run, for a core (Linux's schedstat); None elsewhere."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _rss(process) -> int:
    """A process's resident memory in bytes; 0 when it is gone (a pool restarts its processes)."""
    try:
        return process.memory_info().rss
    except psutil.Error:
        return 0


def memory_sample(tree: list[tuple]) -> dict:
    """The server's resident memory (MiB): its app processes ("rss_mib"), with the processes below
    them ("rss_with_workers_mib"), and all its processes ("rss_server_mib")."""
    if not tree:
        return {"rss_mib": None, "rss_with_workers_mib": None, "rss_server_mib": None, "rss_parts_mib": None,
                "rss_kinds_mib": None}
    rss = {member.pid: _rss(member) for member, _, _ in tree}
    parents = {member.pid: parent for member, _, parent in tree}
    apps = {member.pid for member, role, _ in tree if role == "app"}

    def below_an_app(pid):
        while pid in parents:
            if pid in apps:
                return True
            pid = parents[pid]
        return False

    return {"rss_mib": sum(rss[pid] for pid in apps) / 2**20,
            "rss_with_workers_mib": sum(rss[pid] for pid in rss if below_an_app(pid)) / 2**20,
            "rss_server_mib": sum(rss.values()) / 2**20,
            "rss_parts_mib": {role: sum(rss[m.pid] for m, r, _ in tree if r == role) / 2**20
                              for role in sorted({r for _, r, _ in tree})},
            "rss_kinds_mib": dict(sum((collections.Counter({worker_kind(m): rss[m.pid] / 2**20})
                                       for m, r, _ in tree if r == "workers"), collections.Counter()))}


def sample_server(root, latest: dict, samples: list, stop: threading.Event, every: float = SAMPLE_EVERY_S) -> None:
    """Every ``every`` s until ``stop`` (and once more then): the cores of each part of the server
    (the tree under ``root``, again each time: pools restart their processes) and its memory, with
    the Device page's reading taken since the last sample (``latest["reading"]``, taken out)."""
    previous: dict = {}
    tree: list = []
    if root is not None:
        with contextlib.suppress(psutil.Error):
            cpu_sample(server_tree(root), previous)
    while True:
        stopping = stop.wait(every)
        since, tree, cores = previous.get("t"), [], None
        if root is not None:
            try:
                tree = server_tree(root)
                cores = cpu_sample(tree, previous)
            except psutil.Error:  # the server is gone
                tree = []
        queue, page_cpu = latest.pop("reading", (None, None))
        samples.append({"t": time.time(), "since": since, "queue": queue, "page_cpu": page_cpu,
                        **memory_sample(tree), "cores": cores,
                        "processes": dict(collections.Counter(role for _, role, _ in tree))})
        if stopping:
            return


def observe(url: str, end: float, samples: list, server_pid: int | None, every: float = SAMPLE_EVERY_S,
            gpus_seen: list | None = None) -> None:
    """Until ``end``: the Device page's GPU queue and page-run CPU (and, into ``gpus_seen``, its line
    of measurements per GPU), read again ``every`` s after each answer, and, every ``every`` s on its
    own thread (a slow page does not stretch the samples), the cores and memory of the server's
    processes (``sample_server``)."""
    root = server_process(url, server_pid)
    gpus_seen = [] if gpus_seen is None else gpus_seen
    latest: dict = {}
    stop = threading.Event()
    sampler = threading.Thread(target=sample_server, args=(root, latest, samples, stop, every))
    sampler.start()
    try:
        page = Page(url, timeout=30)
    except BaseException:
        stop.set()
        sampler.join()
        raise
    try:
        page.rerun()
        for msg in page.read(time.time() + 30):
            if msg is not None and msg.WhichOneof("type") == "script_finished":
                break
        device = next((h for name, h in page.pages.items() if "device" in name.lower()), "")
        while time.time() < end:
            queue = page_cpu = None
            page.rerun(page_hash=device)
            for msg in page.read(time.time() + 5):
                kind, element = element_of(msg)
                if kind == "metric" and element.metric.label == "GPU queue":
                    queue = element.metric.body
                elif kind == "metric" and element.metric.label == PAGE_CPU:
                    page_cpu = element.metric.body
                elif kind == "markdown" and element.markdown.body.startswith(GPUS_CAPTION):
                    gpus_seen.append(element.markdown.body)  # the page's count per GPU (a server of several)
                if queue is not None and page_cpu is not None:
                    break
            latest["reading"] = (queue, page_cpu)  # one assignment: the sampler takes both or neither
            time.sleep(max(0.0, min(every, end - time.time())))
    finally:
        stop.set()
        sampler.join()
        page.close()


def kernel_runs_by_gpu(log_path: str, since_ns: int) -> dict[str, list[tuple[int, int]]]:
    """(start, end) in ns of each kernel run in the measuring workers' log since ``since_ns``, by the
    GPU that ran it (a server with several GPUs logs ``gpu=N`` before the phases; "" otherwise)."""
    runs = collections.defaultdict(list)
    for line in Path(log_path).read_text().splitlines():
        head = line.split("|", 1)[0].split()
        pid, start, end = head[:3]
        gpu = head[-1][len("gpu="):] if head[-1].startswith("gpu=") else ""
        if int(start) >= since_ns:
            runs[gpu].append((int(start), int(end)))
    return {gpu: sorted(times) for gpu, times in runs.items()}


def kernel_runs(log_path: str, since_ns: int) -> list[tuple[int, int]]:
    """(start, end) in ns of every kernel run in the log since ``since_ns``, whichever GPU ran it."""
    return sorted(run for runs in kernel_runs_by_gpu(log_path, since_ns).values() for run in runs)


def overlapping_runs(log_path: str, since_ns: int) -> tuple[int, int]:
    """(kernel runs in the log since ``since_ns``, pairs that overlapped in time on one GPU)."""
    by_gpu = kernel_runs_by_gpu(log_path, since_ns)
    overlaps = sum(1 for runs in by_gpu.values() for a, b in zip(runs, runs[1:], strict=False) if b[0] < a[1])
    return sum(len(runs) for runs in by_gpu.values()), overlaps


def run_phases(log_path: str, since_ns: int) -> dict[str, float]:
    """Mean milliseconds per kernel run of each phase the measuring workers logged since ``since_ns``
    (load, data, copy, check, time, graph: a phase a run skipped counts 0; bench/worker_phases.py
    has their medians per template)."""
    totals, runs = collections.Counter(), 0
    for line in Path(log_path).read_text().splitlines():
        run = read_run_line(line)
        if run.start_ns < since_ns:
            continue
        runs += 1
        totals.update(run.phases_ms)
    return {name: total / runs for name, total in totals.items()} if runs else {}


def job_stages(log_path: str, since_s: float) -> dict[str, dict]:
    """Where the students' measurements (the scheduler's job log, explorer/measure/scheduler.py)
    spent their time since ``since_s``: compiling (asked → in the GPU's line), waiting for the GPU,
    and on it; the percentiles of each, in seconds. Background jobs and full re-measurements are
    counted apart (``others``: how many ran, and their seconds on the GPU)."""
    compile_s, wait_s, run_s, others, others_s = [], [], [], 0, 0.0
    for line in Path(log_path).read_text().splitlines():
        asked, compiled, started, finished, kind = line.split()[:5]
        if float(asked) < since_s or started == "-":  # never reached the GPU (its compile failed)
            continue
        if kind != "student":  # a full re-measurement was compiled for its first, quick one
            others += 1
            others_s += float(finished) - float(started)
            continue
        compile_s.append(float(compiled) - float(asked))
        wait_s.append(float(started) - float(compiled))
        run_s.append(float(finished) - float(started))
    return {"compile": percentiles(compile_s), "wait_for_gpu": percentiles(wait_s), "on_gpu": percentiles(run_s),
            "others": {"n": others, "gpu_s": others_s}}


COMPILE_STAGES = (("for_a_process", "asked", "started"), ("for_the_page_build", "started", "built"),
                  ("generating", "built", "generated"), ("exporting", "generated", "exported"))
COMPILE_STAGE_WORDS = {"for_a_process": "waiting for a compile process",
                       "for_the_page_build": "waiting for the page's build",
                       "generating": "generating the code (NVRTC)", "exporting": "exporting the library"}


def compile_stages(log_path: str, since_s: float) -> dict:
    """Where the compile processes' seconds went (their compile log, explorer/services/compiles.py)
    since ``since_s``: waiting for a compile process, for the page's build, generating the code
    (NVRTC) and exporting the library, the percentiles of each in seconds; the CPU seconds of a
    compile; the binaries compiled, read from the disk and waited for; the builds that were the
    page's ("kept") and those made in the compile process ("here")."""
    stages = {name: [] for name, _, _ in COMPILE_STAGES}
    cpu, cubins, builds, outcomes = [], collections.Counter(), collections.Counter(), collections.Counter()
    for line in Path(log_path).read_text().splitlines():
        fields = iter(line.split())  # the times, the CPU seconds, the binaries counted, the build, the outcome
        times = {name: None if value == "-" else float(value)  # the names first: zip takes no field past them
                 for name, value in zip(COMPILE_LOG_TIMES, fields, strict=False)}
        if (times["started"] or 0) < since_s:
            continue
        for name, start, end in COMPILE_STAGES:
            if times[start] is not None and times[end] is not None:
                stages[name].append(times[end] - times[start])
        cpu.append(float(next(fields)))
        cubins.update({kind: int(next(fields)) for kind in COMPILE_LOG_CUBINS})
        builds[next(fields)] += 1
        outcomes[next(fields)] += 1
    return {"stages": {name: percentiles(values) for name, values in stages.items()}, "cpu_s": percentiles(cpu),
            "cpu_s_total": sum(cpu), "cubins": dict(cubins), "builds": dict(builds), "outcomes": dict(outcomes)}


def gpu_busy(runs: list[tuple[int, int]], seconds: float, gpus: int = 1) -> float:
    """The share of ``seconds`` during which the measuring workers had a kernel on their ``gpus`` GPUs."""
    return sum(end - start for start, end in runs) / 1e9 / seconds / gpus if seconds > 0 else 0.0


def busy_between(runs: list[tuple[int, int]], start: float, end: float, gpus: int = 1) -> float:
    """The share of the seconds ``start``..``end`` during which kernels of ``runs`` (ns) were on the
    ``gpus`` GPUs."""
    if end <= start:
        return 0.0
    lo, hi = start * 1e9, end * 1e9
    return min(1.0, sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in runs) / (hi - lo) / gpus)


PARTS = ("app", "measuring", "proxy", "workers", "gpu")  # in the order the report names them


def saturation(samples: list[dict], machine_cores: int, runs: list[tuple[int, int]] | None = None,
               gpus: int = 1) -> dict:
    """For each part of the server, from its samples: what it can use ("capacity", cores; the GPU: its
    time), its mean use, and the "share" of its samples at SATURATED of that or more. What a part can use:
    an app process, one core (one Python process's GIL; each app process's sample counts on its own,
    "samples" counts those pairs); the measuring service, one core (its own GIL); the proxy, the machine's
    cores (Go's threads); the workers, the machine's cores less the app processes' and the measuring
    service's; the GPU (from ``runs``, the kernel runs in ns), all of each sample's time."""
    readings = collections.defaultdict(list)  # part → [(used, capacity)]
    processes: dict = collections.defaultdict(int)  # part → the most processes of it in one sample
    for sample in samples:
        cores = sample.get("cores")
        if not cores:
            continue
        apps = cores.get("app", [])
        readings["app"] += [(used, 1.0) for used in apps]
        processes["app"] = max(processes["app"], len(apps))
        for part, capacity in (("measuring", 1.0), ("proxy", float(machine_cores))):
            if part in cores:
                readings[part].append((cores[part], capacity))
                processes[part] = 1
        others = len(apps) + ("measuring" in cores)
        readings["workers"].append((cores.get("workers", 0.0), max(1.0, float(machine_cores - others))))
        if runs is not None and sample.get("since") is not None:
            readings["gpu"].append((busy_between(runs, sample["since"], sample["t"], gpus), 1.0))
    parts = {}
    for part in PARTS:
        pairs = readings.get(part)
        if not pairs:
            continue
        parts[part] = {
            "samples": len(pairs), "processes": processes.get(part), "mean": statistics.mean(u for u, _ in pairs),
            "capacity": collections.Counter(c for _, c in pairs).most_common(1)[0][0],
            "share": sum(used >= SATURATED * capacity for used, capacity in pairs) / len(pairs)}
    return parts


def limits(parts: dict) -> list[str]:
    """The parts of ``saturation``'s answer saturated in LIMIT_SHARE of their samples or more."""
    return [part for part in PARTS if part in parts and parts[part]["share"] >= LIMIT_SHARE]


def part_text(part: str, p: dict) -> str:
    """"app processes at ≥ 90% of a core in 48% of samples (...)": one part of ``saturation``'s answer."""
    share = f"in {p['share']:.0%} of samples"
    if part == "gpu":
        return f"the GPU busy ≥ {SATURATED:.0%} of the time {share} (mean {p['mean']:.0%})"
    if part == "app":
        return (f"app processes at ≥ {SATURATED:.0%} of a core {share} ({p['processes']} of them, "
                f"mean {p['mean']:.2f} cores each)")
    what = {"measuring": "the measuring service", "proxy": "the proxy", "workers": "the workers"}[part]
    of = "a core" if p["capacity"] == 1 else f"{p['capacity']:.0f} cores"
    return f"{what} at ≥ {SATURATED:.0%} of {of} {share} (mean {p['mean']:.2f} cores)"


LIMIT_WHY = {
    "app": "one Python process runs every page of its sessions, so its GIL caps it near one core",
    "measuring": "one Python process hands out every build and measurement",
    "proxy": "every request and websocket message goes through it",
    "workers": "the build, compile and measuring processes used the cores the others leave",
    "gpu": "one kernel is timed at a time",
}


def limiter(parts: dict) -> str:
    """Which parts of the server limited the class, from ``saturation``'s answer: those saturated
    in LIMIT_SHARE of their samples or more (a run's mean hides a part at one core half of the time)."""
    named = limits(parts)
    if named:
        return "; ".join(f"{part_text(part, parts[part])}: {LIMIT_WHY[part]}" for part in named)
    return (f"none saturated (no part at ≥ {SATURATED:.0%} of what it can use in {LIMIT_SHARE:.0%} of its "
            f"samples): the class asked for no more")


def demand(students: int, think: float, intended_reply: float, moves: int, playing_s: float) -> dict:
    """The moves per second the class meant to make (each student a move every ``think`` s plus the
    ``intended_reply`` it waits for) and those it made in ``playing_s`` seconds of play."""
    cycle = think + intended_reply
    return {"intended_reply_s": intended_reply, "playing_s": playing_s,
            "intended_moves_per_s": students / cycle if cycle > 0 else None,
            "delivered_moves_per_s": moves / playing_s if playing_s > 0 else 0.0}


@contextlib.contextmanager
def own_cpu(every: float = SAMPLE_EVERY_S):
    """This process's cores (CPU seconds over wall seconds), a sample every ``every`` s until the
    block ends, into the list it yields: what the load generator itself used."""
    cores: list[float] = []
    stop = threading.Event()

    def sample():
        me = psutil.Process()
        before = (time.monotonic(), sum(me.cpu_times()[:2]))
        while not stop.wait(every):
            now = (time.monotonic(), sum(me.cpu_times()[:2]))
            if now[0] > before[0]:
                cores.append((now[1] - before[1]) / (now[0] - before[0]))
            before = now

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield cores
    finally:
        stop.set()
        thread.join()


def generator_load(plays: list[dict]) -> dict:
    """Per load generator process (``plays``: what each ``play`` said of itself), its mean cores and the
    share of its samples at SATURATED of a core; the run is generator-limited when any process was there
    in LIMIT_SHARE of its samples or more (its students' moves and readings waited for its GIL)."""
    generator = [{"pid": p["pid"], "samples": len(p["cores"]),
                  "mean_cores": statistics.mean(p["cores"]) if p["cores"] else None,
                  "busy_share": sum(c >= SATURATED for c in p["cores"]) / len(p["cores"]) if p["cores"] else 0.0,
                  "cores": p["cores"]} for p in plays]
    return {"generator": generator, "generator_limited": any(g["busy_share"] >= LIMIT_SHARE for g in generator)}


def percentiles(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "p50": None, "p95": None, "max": None}
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, int(round(0.95 * (len(ordered) - 1))))]
    return {"n": len(values), "p50": statistics.median(ordered), "p95": p95, "max": ordered[-1]}


def lesson_links(names: list[str]) -> tuple[str, ...]:
    """The preset ids of the steps of the lessons ``names``, in order (raises ExplorerError)."""
    return tuple(dict.fromkeys(step.preset.id for name in names for step in get_lesson(name).steps))


def play(url: str, class_: list[Student], end: float, think: float, want_latency: bool, revisit_every: int = 0,
         open_at: float | None = None) -> tuple[list[Student], dict]:
    """``class_`` in this process, one thread each, until ``end``: the students, with what they saw, and
    this process (its pid, when its students began, its cores every SAMPLE_EVERY_S s: ``own_cpu``)."""
    seen: set = set()  # settings these students saw measured (the server's caches are shared)
    threads = [threading.Thread(target=student, args=(url, s, end, think, want_latency, random.Random(s.seed),
                                                      seen, revisit_every, open_at)) for s in class_]
    with own_cpu() as cores:
        began = time.time()
        for t in threads:
            t.start()
            if open_at is None:
                time.sleep(0.02)  # a class does not press enter in the same millisecond
        for t in threads:
            t.join(max(0.0, end - time.time()) + 300)
    return class_, {"pid": os.getpid(), "began": began, "cores": cores}


# How the load processes start: spawned, each importing Streamlit's protocol, the app's widgets and the explorer
# (TVM) again. A test forks them (docs/architecture.md, the test suite): they start before this process starts
# its observer thread (play_in_processes), so no thread of ours holds a lock that a forked child would inherit.
START_METHOD = "spawn"


def play_in_processes(processes: int, url: str, class_: list[Student], *args,
                      started=lambda: None) -> tuple[list[Student], list[dict]]:
    """``play`` with the class shared among ``processes`` processes: one Python process cannot
    read a hundred students' websockets and check their moves without its own GIL delaying them.
    ``started()`` is called once the processes have started (the observer starts there).
    The students, and what each process said of itself."""
    if processes <= 1:
        started()
        students, me = play(url, class_, *args)
        return students, [me]
    with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context(START_METHOD)) as pool:
        shares = [pool.submit(play, url, class_[i::processes], *args) for i in range(processes)]
        started()  # forked, they all started at the first submit, before the pool's threads and the observer
        played = [share.result() for share in shares]
        return [s for students, _ in played for s in students], [me for _, me in played]


def run(url: str, students: int, seconds: float, think: float, want_latency: bool, server_pid: int | None = None,
        run_log: str | None = None, seed: int = 0, revisit_every: int = 0, links: tuple[str, ...] = LINKS,
        same_link: bool = False, processes: int = 1, intended_reply: float = INTENDED_REPLY_S,
        job_log: str | None = None, compile_log: str | None = None) -> dict:
    """``revisit_every`` K > 0: every K-th move of a student moves the last slider back (a
    setting the server has measured); otherwise every move is a random valid one.
    ``same_link``: every student opens ``links[0]`` at the same moment (once all are connected).
    ``intended_reply``: the seconds a move is meant to wait for its code (the demand the class means
    to make is ``students / (think + intended_reply)`` moves per second)."""
    since_ns = time.time_ns()
    started = time.time()
    end = started + seconds
    rng = random.Random(seed)
    class_ = [Student(i, links[0] if same_link else links[i % len(links)], seed=rng.random()) for i in range(students)]
    open_at = started + CONNECT_S + PROCESS_START_S * processes if same_link else None
    samples: list = []
    gpus_seen: list = []
    observer = threading.Thread(target=observe, args=(url, end, samples, server_pid), kwargs={"gpus_seen": gpus_seen})
    class_, plays = play_in_processes(processes, url, class_, end, think, want_latency, revisit_every, open_at,
                                      started=observer.start)
    observer.join(60)
    # Play begins when the first process's students start (a spawned process imports first), or, with
    # same_link, when they open the link together; no move is sent after ``end``.
    began = max(min(p["began"] for p in plays), open_at or started)
    moves = sum(s.moves for s in class_)
    report = {
        "url": url, "students": students, "seconds": seconds, "think_time_s": think, "links": list(links),
        "same_link": links[0] if same_link else None, "wall_s": time.time() - started,
        "moves": moves, "refused": sum(s.refused for s in class_),
        **demand(students, think, intended_reply, moves, max(0.0, end - began)),
        **generator_load(plays),
        "errors": [e for s in class_ for e in s.errors],
        "lost_moves": [move for s in class_ for move in s.lost],
        "open_to_code": percentiles([s.open_s for s in class_ if s.open_s is not None]),
        "open_to_latency": percentiles([s.first_latency_s for s in class_ if s.first_latency_s is not None]),
        "knob_to_code": percentiles([x for s in class_ for x in s.code_s]),
        "knob_to_latency": percentiles([x for s in class_ for x in s.latency_s + s.revisit_s]),
        "knob_to_latency_new": percentiles([x for s in class_ for x in s.latency_s]),
        "knob_to_latency_revisit": percentiles([x for s in class_ for x in s.revisit_s]),
        "moves_without_latency": sum(s.no_latency for s in class_),
        "waiting_notices": collections.Counter(n[:120] for s in class_ for n in s.waiting_notices).most_common(3),
        "samples": samples,
        "device_page_gpus": gpus_seen[-1] if gpus_seen else None,
        "slowest_to_code": slowest_moves(class_, 2, started),
        "slowest_to_latency": slowest_moves(class_, 3, started),
    }
    runs = None
    if run_log and Path(run_log).exists():
        runs, gpus = kernel_runs(run_log, since_ns), max(1, len(kernel_runs_by_gpu(run_log, since_ns)))
        report["kernel_runs"], report["overlapping_runs"] = overlapping_runs(run_log, since_ns)
        report["gpus"] = gpus
        report["measurements_per_s"] = report["kernel_runs"] / report["wall_s"]
        report["gpu_busy"] = gpu_busy(runs, report["wall_s"], gpus)
        report["run_phases_ms"] = run_phases(run_log, since_ns)
    if job_log and Path(job_log).exists():
        report["job_stages"] = job_stages(job_log, started)
    if compile_log and Path(compile_log).exists():
        report["compile_stages"] = compile_stages(compile_log, started)
    if any(s.get("cores") for s in samples):
        parts = saturation(samples, os.cpu_count() or 1, runs, report.get("gpus", 1))
        report["saturation"] = parts
        report["cores"] = {part: p["mean"] for part, p in parts.items() if part != "gpu"}
        report["limits"] = limits(parts)
        report["limited_by"] = limiter(parts)
    return report


SLOWEST_SHARE = 0.05  # the moves above the 95th percentile: what a p95 goal is about
FIRST_MINUTE_S = 60


def slowest_moves(class_: list, column: int, started: float) -> dict:
    """The slowest 5% of the class's moves by ``column`` of their timeline (2: to code, 3: to
    latency): how many, the templates they moved, and how many came in the run's first minute
    (when the server still builds and measures the lesson steps ahead)."""
    moves = sorted((m for s in class_ for m in s.timeline if m[column] is not None), key=lambda m: -m[column])
    slowest = moves[:max(1, round(len(moves) * SLOWEST_SHARE))] if moves else []
    return {"count": len(slowest), "templates": collections.Counter(m[1] for m in slowest).most_common(),
            "in_first_minute": sum(m[0] - started < FIRST_MINUTE_S for m in slowest),
            "templates_of_all": collections.Counter(m[1] for m in moves).most_common()}


def goal_rows(report: dict, goals: dict[str, float]) -> list[str]:
    """Rows "| goal | measured | verdict |" for goals such as {"knob_to_code.p95": 1.0}."""
    rows = ["| goal | measured | |", "| --- | ---: | --- |"]
    for name, limit in goals.items():
        section, stat = name.rsplit(".", 1)
        value = report[section][stat]
        if value is None:
            verdict, shown = "not measured", "—"
        else:
            verdict = "met" if value <= limit else f"**missed by {value - limit:.3f} s**"
            shown = f"{value:.3f} s"
        rows.append(f"| {section.replace('_', ' ')} {stat} ≤ {limit:g} s | {shown} | {verdict} |")
    return rows


def demand_text(report: dict) -> str:
    """"Demand: 16.7 moves/s intended (...), 12.1 delivered (72%) over 290 s of play."""
    intended, delivered = report["intended_moves_per_s"], report["delivered_moves_per_s"]
    share = f" ({delivered / intended:.0%})" if intended else ""
    intended_text = f"{intended:.1f}" if intended is not None else "—"
    return (f"Demand: {intended_text} moves/s intended ({report['students']} students, a move every "
            f"~{report['think_time_s']:g} s + {report['intended_reply_s']:g} s for its code), {delivered:.1f} "
            f"delivered{share} over {report['playing_s']:.0f} s of play.")


def generator_text(report: dict) -> list[str]:
    """What the load generator's own processes used, and, when one was saturated, that the run is no verdict."""
    generator = report.get("generator") or []
    if not generator:
        return []
    each = "; ".join(
        f"{'the main process' if len(generator) == 1 else f'process {i}'} "
        + (f"{g['mean_cores']:.2f} cores mean, at ≥ {SATURATED:.0%} of a core in {g['busy_share']:.0%} of "
           f"{g['samples']} samples" if g["samples"] else "no sample (a run shorter than one)")
        for i, g in enumerate(generator, 1))
    lines = [f"Load generator (its own CPU, every {SAMPLE_EVERY_S:g} s): {each}."]
    if report.get("generator_limited"):
        busy = ", ".join(f"{'the main process' if len(generator) == 1 else f'process {i}'} in {g['busy_share']:.0%}"
                         for i, g in enumerate(generator, 1) if g["busy_share"] >= LIMIT_SHARE)
        lines.insert(0, f"Not a verdict: the load generator was at ≥ {SATURATED:.0%} of a core in "
                        f"{LIMIT_SHARE:.0%} of its samples or more ({busy}), so its students' moves and readings "
                        "waited for it as well as for the server; share the class among more --processes.")
    return lines


def worker_kinds_text(samples: list[dict]) -> list[str]:
    """The workers by kind (build, compile, diagnose, measure): mean cores and resident memory
    start → end, from the samples that have them."""
    kinds = [s["rss_kinds_mib"] for s in samples if s.get("rss_kinds_mib")]
    cores = [s["cores"]["kinds"] for s in samples if s.get("cores") and "kinds" in s["cores"]]
    if not kinds:
        return []
    names = sorted(set().union(*kinds, *cores))
    mean = {kind: statistics.mean(c.get(kind, 0.0) for c in cores) if cores else 0.0 for kind in names}
    queued = [s["cores"]["queued"] for s in samples if s.get("cores") and s["cores"].get("queued")]
    waited = {kind: statistics.mean(q.get(kind, 0.0) for q in queued) for kind in names} if queued else {}
    return ["Workers by kind, mean cores; resident memory start → end (MiB): " + "; ".join(
        f"{kind} {mean[kind]:.2f} cores, {kinds[0].get(kind, 0):.0f} → {kinds[-1].get(kind, 0):.0f}"
        for kind in names) + "."] + ([
        "Workers by kind, waiting for a core while ready to run (process-seconds per second, mean): " + "; ".join(
            f"{kind} {waited[kind]:.2f}" for kind in names) + "."] if waited else [])


def describe(report: dict, goals: dict[str, float] | None = None) -> str:
    def row(name, p):
        if not p["n"]:
            return f"| {name} | 0 | — | — | — |"
        return f"| {name} | {p['n']} | {p['p50']:.3f} | {p['p95']:.3f} | {p['max']:.3f} |"

    queue = [s["queue"] for s in report["samples"] if s["queue"]]
    rss = [s.get("rss_server_mib", s["rss_mib"]) for s in report["samples"]]
    rss = [x for x in rss if x is not None]
    opening = (f"All {report['students']} students opened `{report['same_link']}` at the same moment, then moved "
               "knobs. " if report.get("same_link") else "")
    generator = generator_text(report)
    lines = [
        opening +
        f"{report['students']} students, {report['seconds']:.0f} s, a move every ~{report['think_time_s']:g} s each: "
        f"{report['moves']} moves ({report['refused']} refused by the app with a reason), "
        f"{len(report['errors'])} errors.",
        *(["", generator[0]] if report.get("generator_limited") else []),
        "",
        *([demand_text(report), ""] if "intended_moves_per_s" in report else []),
        "| from | n | p50 (s) | p95 (s) | max (s) |",
        "| --- | ---: | ---: | ---: | ---: |",
        row("link → code", report["open_to_code"]),
        row("link → latency", report["open_to_latency"]),
        row("knob → code", report["knob_to_code"]),
        row("knob → latency", report["knob_to_latency"]),
        row("… a setting new to the server", report["knob_to_latency_new"]),
        row("… a setting seen before (revisit)", report["knob_to_latency_revisit"]),
        "",
    ]
    if goals:
        lines += [*goal_rows(report, goals), ""]
    for what, key in (("code", "slowest_to_code"), ("latency", "slowest_to_latency")):
        slow = report.get(key)
        if slow and slow["count"]:
            moved = ", ".join(f"{template} {n}" for template, n in slow["templates"])
            every = ", ".join(f"{template} {n}" for template, n in slow["templates_of_all"])
            lines.append(f"The slowest 5% of moves to {what} ({slow['count']}): {moved}; {slow['in_first_minute']} of "
                         f"them in the first minute (all moves: {every}).")
    if report.get("moves_without_latency"):
        lines.append(f"Moves whose latency had not come before the student's next move: "
                     f"{report['moves_without_latency']}.")
    for notice, times in report.get("waiting_notices", ()):
        lines.append(f"When a latency had not come, the page said ({times}×): {notice or '(nothing)'}")
    if rss:
        third = max(1, len(rss) // 3)
        lines.append(f"Server RSS (all its processes): {rss[0]:.0f} MiB at the start, "
                     f"{statistics.mean(rss[third:2 * third] or rss):.0f} MiB mid-run, {rss[-1]:.0f} MiB at the end "
                     f"(max {max(rss):.0f}).")
    parts = [s["rss_parts_mib"] for s in report["samples"] if s.get("rss_parts_mib")]
    if parts:
        lines.append("By part, start → end (MiB): " + "; ".join(
            f"{role} {parts[0].get(role, 0):.0f} → {parts[-1].get(role, 0):.0f}" for role in sorted(parts[-1])) + ".")
    lines += worker_kinds_text(report["samples"])
    if queue:
        waiting = [int(q.split(", ")[1].split()[0]) for q in queue]
        lines.append(f"GPU queue (Device page, every 2 s, {len(queue)} samples): at most {max(waiting)} waiting, "
                     f"mean {statistics.mean(waiting):.1f}; each student has at most one measurement waiting.")
    if "kernel_runs" in report:
        lines.append(f"Kernel runs in the measuring worker's log: {report['kernel_runs']}, overlapping in time: "
                     f"{report['overlapping_runs']}; {report['measurements_per_s']:.2f} measurements per second, "
                     f"the GPU busy {report['gpu_busy']:.0%} of the time.")
    if report.get("run_phases_ms"):
        lines.append("The measuring worker's phases, mean ms per run: " + ", ".join(
            f"{name.replace('_', ' ')} {ms:.1f}" for name, ms in report["run_phases_ms"].items()) + ".")
    if report.get("job_stages"):
        stages = report["job_stages"]
        said = [f"{name.replace('_', ' ')} p50 {stages[name]['p50']:.2f} s, p95 {stages[name]['p95']:.2f} s"
                for name in ("compile", "wait_for_gpu", "on_gpu") if stages[name]["n"]]
        lines.append(f"Students' measurements ({stages['compile']['n']}, the scheduler's job log): " + "; ".join(said)
                     + f". Background jobs and full re-measurements: {stages['others']['n']}, "
                     f"{stages['others']['gpu_s']:.1f} s on the GPU.")
    if report.get("compile_stages", {}).get("cpu_s", {}).get("n"):
        compiles = report["compile_stages"]
        said = [f"{COMPILE_STAGE_WORDS[name]} p50 {stage['p50']:.2f} s, p95 {stage['p95']:.2f} s"
                for name, stage in compiles["stages"].items() if stage["n"]]
        cubins, builds = compiles["cubins"], compiles["builds"]
        lines.append(
            f"Compiles ({compiles['cpu_s']['n']}, the compile processes' log): " + "; ".join(said)
            + f". CPU per compile p50 {compiles['cpu_s']['p50']:.2f} s, p95 {compiles['cpu_s']['p95']:.2f} s, "
            f"{compiles['cpu_s_total']:.0f} s in all. Binaries: {cubins.get('compiled', 0)} compiled, "
            f"{cubins.get('read', 0)} read from the disk, {cubins.get('waited', 0)} waited for while another "
            f"process compiled them. Builds: {builds.get('kept', 0)} the page's, {builds.get('here', 0)} made "
            "in the compile process.")
    if report.get("device_page_gpus"):
        lines.append(f"The Device page's last reading: {report['device_page_gpus']}")
    page_cpu = [s["page_cpu"] for s in report["samples"] if s.get("page_cpu") not in (None, "—")]
    if page_cpu:
        lines.append(f"Server CPU per page run (Device page, 95th percentile of the latest runs): {page_cpu[-1]} "
                     "at the end.")
    lines += generator[1:] if report.get("generator_limited") else generator
    if report.get("saturation"):
        lines.append(f"Server parts (a sample every {SAMPLE_EVERY_S:g} s): "
                     + "; ".join(part_text(part, p) for part, p in report["saturation"].items()) + ".")
    if "limited_by" in report:
        lines.append(f"Limited by: {report['limited_by']}.")
    if report["errors"]:
        lines.append("Errors: " + "; ".join(sorted(set(report["errors"]))[:5]))
    if report.get("lost_moves"):
        lines.append(f"Moves that showed no code in time: {len(report['lost_moves'])} (their settings: the JSON "
                     "report's lost_moves).")
        for move in report["lost_moves"][:3]:  # what the page sent after the move: a run of the page, or not
            runs = [m for m in move["messages"] if "new_session" in m or "script_finished" in m or "alert" in m]
            lines.append(f"- {move['template']} {move['knobs']}: " + ", ".join(runs[:16]) + ".")
    return "\n".join(lines)


def chosen_links(lessons: list[str], links: str | None) -> tuple[str, ...]:
    """The presets students open: ``links`` (comma-separated ids), else the steps of
    ``lessons``, else the depthwise tutorial's; an unknown id or lesson raises ExplorerError."""
    chosen = tuple(filter(None, (part.strip() for part in (links or "").split(",")))) + lesson_links(lessons)
    for link in chosen:
        get_preset(link)
    return tuple(dict.fromkeys(chosen)) or LINKS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://localhost:8501")
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--think-time", type=float, default=5.0)
    parser.add_argument("--intended-reply", type=float, default=INTENDED_REPLY_S, metavar="S",
                        help="the seconds a move is meant to wait for its code: the class means to make "
                             "students / (think time + S) moves per second, reported beside those it made")
    parser.add_argument("--no-latency", action="store_true", help="a server without a GPU: time the code only")
    parser.add_argument("--server-pid", type=int,
                        help="the server's process (its launcher, or a Streamlit process): its whole tree is sampled")
    parser.add_argument("--run-log", help="the measuring worker's kernel-run log, to check runs never overlapped")
    parser.add_argument("--job-log", help="the measuring scheduler's job log (EXPLORER_JOB_LOG), to say where the "
                                          "students' measurements waited")
    parser.add_argument("--compile-log", help="the compile processes' log (EXPLORER_COMPILE_LOG), to say where a "
                                              "compile's seconds went")
    parser.add_argument("--json", help="write the whole report (with samples) here")
    parser.add_argument("--goal", action="append", default=[], metavar="NAME=SECONDS",
                        help="a target to check, e.g. knob_to_code.p95=1.0 or knob_to_latency_new.p50=0.5")
    parser.add_argument("--write", metavar="LABEL", help="write the table into docs/benchmarks.md under LABEL")
    parser.add_argument("--machine", default=platform.node(), help="the machine, as the table should name it")
    parser.add_argument("--revisit-every", type=int, default=0, metavar="K",
                        help="every K-th move of a student undoes the previous one (a revisit); 0: never on purpose")
    parser.add_argument("--lesson", action="append", default=[], metavar="NAME",
                        help="students open this lesson's steps (repeatable); default: the depthwise tutorial's")
    parser.add_argument("--links", metavar="ID,...", help="students open these presets (comma-separated)")
    parser.add_argument("--wait-for-server", type=float, default=0, metavar="S",
                        help="wait up to S seconds for the server's health check, then connect at once "
                             "(a server just started: the time to the first code counts from its first answer)")
    parser.add_argument("--processes", type=int, default=1,
                        help="share the students among this many processes (a large class: one process's GIL "
                             "would delay its students' readings)")
    parser.add_argument("--same-link", action="store_true",
                        help="every student opens the first link at the same moment (a phase of its own)")
    args = parser.parse_args()
    if args.revisit_every < 0:
        parser.error("--revisit-every takes 0 (never on purpose) or a positive number of moves")
    if args.intended_reply < 0 or args.think_time + args.intended_reply <= 0:
        parser.error("--intended-reply takes 0 or more seconds, and with --think-time more than 0")
    try:
        links = chosen_links(args.lesson, args.links)
    except ExplorerError as error:
        parser.error(str(error))
    if args.wait_for_server:
        try:
            waited = wait_healthy(args.url.rstrip("/"), timeout_s=args.wait_for_server)
        except RuntimeError as error:
            parser.error(str(error))
        print(f"The server answered its health check after {waited:.1f} s; the students connect now.", flush=True)
    report = run(args.url, args.students, args.seconds, args.think_time, not args.no_latency, args.server_pid,
                 args.run_log, revisit_every=args.revisit_every, links=links, same_link=args.same_link,
                 processes=args.processes, intended_reply=args.intended_reply, job_log=args.job_log,
                 compile_log=args.compile_log)
    goals = {name: float(limit) for name, limit in (g.split("=", 1) for g in args.goal)}
    text = describe(report, goals)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if args.write:
        command = "python bench/classroom.py " + shlex.join(sys.argv[1:])
        write_section(f"classroom-{args.write}", f"### Classroom: {args.write}\n\nMachine: {args.machine}. "
                      f"Date: {time.strftime('%Y-%m-%d')}. Command (server on the same machine, started with "
                      f"`python -m explorer serve`):\n`{command}`\n\n{text}\n")
    # 3: the run measured its own load generator as much as the server; 1: a student met an error.
    sys.exit(3 if report["generator_limited"] else 1 if report["errors"] else 0)


if __name__ == "__main__":
    main()
