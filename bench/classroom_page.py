"""One browser session of a class, through Streamlit's own websocket protocol (what a browser sends
and receives; AppTest would bypass the server): the page loaded over HTTP first, its cookies sent
with the websocket (a reverse proxy that keeps a browser on one app process by a cookie then routes
the websocket where the page came from), reruns sent, deltas read, fragments' auto-reruns answered."""
from __future__ import annotations

import contextlib
import http.cookiejar
import time
import urllib.request
import warnings
from urllib.parse import urlparse

from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from websockets.sync.client import connect

warnings.filterwarnings("ignore", r"connect\(\) must be used as a context manager", DeprecationWarning)

LATENCY = "Latency (median)"
STALE = "now stale"  # the app refused the setting, said why, and kept the last valid one on screen
# A page is closed as a browser closes its tab, waiting for no reply: the observer's page, closed while the
# Device page ran, waited 10 s (websockets' default) for the server's closing handshake, and the report's
# wall time (and the measurements per second and GPU busy share computed from it) with it.
CLOSE_TIMEOUT_S = 0.5


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
