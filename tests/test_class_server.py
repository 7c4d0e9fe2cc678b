"""A class server of two app processes behind Caddy with one measuring service (``python -m
explorer serve --app-processes 2``, a stand-in GPU): a short class through the proxy, a browser
kept on one process with its export download, an app process killed mid-class, the measuring
service killed mid-run, and no two measurements at once on the one GPU."""
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request

import classroom  # bench/ (pytest's pythonpath)
import classroom_logs
import classroom_page
import classroom_students
import psutil
import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from test_classroom_bench import ROOT, free_port

from explorer.measure import MeasureError
from explorer.presets import get_preset
from explorer.server import launcher, over_socket, service
from explorer.server.api import Server
from explorer.server.settings import ServerSettings

# CI installs Caddy with requirements.txt: there a missing proxy fails these tests rather than skipping them.
pytestmark = [pytest.mark.waits,
              pytest.mark.skipif(launcher.caddy_path() is None and not os.environ.get("CI"),
                                 reason=f"no Caddy here: {launcher.NO_PROXY}")]
LINK = "dw-blog-final-96"
BACK_S = 30  # generous on a loaded machine: bench/classroom.py times the way back for the docs


def start_class_server(tmp_path, run_log):
    """``serve`` with two app processes of the stand-in GPU app and the stand-in measuring service."""
    shutil.copytree(ROOT / "app", tmp_path / "app")
    shutil.copy(ROOT / "tests" / "stand_in_gpu_app.py", tmp_path / "app")
    port = free_port()
    script, service = tmp_path / "app" / "stand_in_gpu_app.py", ROOT / "tests" / "stand_in_gpu_service.py"
    launch = (f"from explorer.server import launcher; import sys; "
              f"sys.exit(launcher.serve({port}, '127.0.0.1', [], 2, "
              f"{str(script)!r}, [sys.executable, {str(service)!r}]))")
    # The app processes build in their own processes (EXPLORER_BUILD_WORKERS=0, conftest.py's): the proxy, the
    # app processes and the measuring service are what is tested (tests/test_classroom_bench.py: build processes).
    env = {**os.environ, "EXPLORER_RUN_LOG": str(run_log), "EXPLORER_DIAGNOSE": "0", "EXPLORER_COMPILE_WORKERS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))}
    launched = subprocess.Popen([sys.executable, "-c", launch], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    launcher.wait_healthy(url, launched, timeout_s=90)
    return launched, url


@pytest.fixture(scope="module")
def class_server(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("class")
    run_log = tmp_path / "runs.log"
    launched, url = start_class_server(tmp_path, run_log)
    yield launched, url, run_log
    launched.send_signal(signal.SIGTERM)
    try:
        launched.wait(60)
    except subprocess.TimeoutExpired:
        launched.kill()
        launched.wait(10)


def get(url: str, cookie: str | None = None):
    """(status, the app process that answered, the proxy's cookie, body) of a GET through the proxy."""
    request = urllib.request.Request(url, headers={"Cookie": cookie} if cookie else {})
    with urllib.request.urlopen(request, timeout=30) as answer:
        cookies = [c.split(";")[0] for c in answer.headers.get_all("Set-Cookie") or []]
        mine = next((c for c in cookies if c.startswith(launcher.COOKIE + "=")), cookie)
        return answer.status, answer.headers["X-Explorer-App"], mine, answer.read()


def app_pids(launched) -> dict[str, int]:
    """Each app process's pid by the address it listens on (``127.0.0.1:port``)."""
    pids = {}
    for child in psutil.Process(launched.pid).children(recursive=True):
        try:
            if any("app.launch" in part for part in child.cmdline()):
                for connection in child.net_connections("tcp"):
                    if connection.status == psutil.CONN_LISTEN:
                        pids[f"127.0.0.1:{connection.laddr.port}"] = child.pid
        except psutil.Error:  # gone, or killed and not yet reaped
            continue
    return pids


def code_shown(page, until: float) -> bool:
    for msg in page.read(until):
        kind, element = classroom_page.element_of(msg)
        if kind == "html" and "data-view=" in element.html.body:
            return True
    return False


def open_page(url: str, cookie: str = "") -> tuple:
    """A browser on the step ``LINK`` through the proxy: (page, the app process it is on)."""
    page = classroom_page.Page(url, timeout=30, query=f"preset={LINK}", cookie=cookie)
    page.rerun()
    assert code_shown(page, time.time() + 60)
    return page, page.app


def cookie_of_the_eldest(launched, url: str) -> str:
    """The proxy's cookie for the app process that has run longest: one started again (the test above kills
    one) may still be running its first page, which a browser the proxy sends there waits for (seconds, on a
    loaded machine)."""
    pids = app_pids(launched)
    eldest = min(pids, key=lambda app: psutil.Process(pids[app]).create_time())
    for _ in range(40):  # the proxy sends a browser without a cookie to the process with fewer connections
        _, app, cookie, _ = get(url + "/")
        if app == eldest:
            return cookie
    raise AssertionError(f"the proxy never sent a browser to {eldest}")


def test_a_short_class_through_the_proxy_sees_code_and_latency(class_server):
    _, url, run_log = class_server
    since = time.time_ns()
    # A move every 0.75-2.25 s each: 4 students make about 9 moves in 5 s (18 in 10 s, each move's code and
    # latency in under half a second on a quiet machine), twice what the claims below need.
    report = classroom.run(url, students=4, seconds=5, think=1.5, want_latency=True, links=(LINK,))
    assert report["errors"] == [] and report["knob_to_code"]["n"] >= 4
    assert report["knob_to_latency"]["n"] >= 2
    runs, overlaps = classroom_logs.overlapping_runs(str(run_log), since)
    assert runs >= 2 and overlaps == 0


def test_a_browser_stays_on_one_process_and_its_export_downloads_there(class_server):
    _, url, _ = class_server
    _, first, cookie, _ = get(url + "/")
    assert {get(url + "/_stcore/health", cookie)[1] for _ in range(6)} == {first}
    page, app = open_page(url, cookie)
    try:
        assert app == first
        file_id = session = None
        page.rerun()
        for msg in page.read(time.time() + 30):
            kind, element = classroom_page.element_of(msg)
            if msg is not None and msg.WhichOneof("type") == "new_session":
                session = msg.new_session.initialize.session_id
            if kind == "download_button":
                file_id = element.download_button.deferred_file_id
                break
        assert file_id, "the Explorer showed no export button"
        ask = BackMsg()
        ask.backend_operation_request.request_id = "export"
        ask.backend_operation_request.session_id = session
        ask.backend_operation_request.deferred_file.file_id = file_id
        page.ws.send(ask.SerializeToString())
        media = None
        for msg in page.read(time.time() + 30):
            if msg is not None and msg.WhichOneof("type") == "backend_operation_response":
                answer = msg.backend_operation_response
                assert not answer.error_msg, answer.error_msg
                if answer.deferred_file.url:
                    media = answer.deferred_file.url
                    break
        assert media, "the export was not generated"
        status, served_by, _, body = get(url + media, cookie)
        assert status == 200 and served_by == first and b"import tvm" in body
    finally:
        page.close()


def test_killing_an_app_process_moves_its_browsers_to_another_at_the_same_view(class_server):
    launched, url, _ = class_server
    pages = {}
    for _ in range(20):  # the proxy sends a new browser to the process with fewer connections
        page, app = open_page(url)
        if app in pages:
            page.close()
        else:
            pages[app] = page
        if len(pages) == 2:
            break
    assert len(pages) == 2, "the proxy never sent a browser to the second app process"
    (doomed, victim), (_, survivor) = sorted(pages.items())
    try:
        os.kill(app_pids(launched)[doomed], signal.SIGKILL)
        killed = time.time()
        # The browser reconnects with its cookie and reruns its URL, as Streamlit's frontend does.
        deadline = killed + BACK_S
        while True:
            try:
                again, app = open_page(url, victim.cookie)
                break
            except Exception:  # the proxy has not yet taken the dead process out of the rotation
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
        again.close()
        assert app != doomed and time.time() - killed < BACK_S
        # The other process's browser noticed nothing: its connection is the same and a move shows code.
        survivor.rerun()
        assert code_shown(survivor, time.time() + 30)
        # The dead process is started again and the proxy takes it back.
        deadline = time.time() + 90
        while doomed not in app_pids(launched) and time.time() < deadline:
            time.sleep(0.5)
        assert doomed in app_pids(launched)
    finally:
        for page in pages.values():
            page.close()


def test_killing_the_measuring_service_loses_no_request(class_server):
    launched, url, _ = class_server
    service = next(child for child in psutil.Process(launched.pid).children()
                   if "stand_in_gpu_service" in " ".join(child.cmdline()))
    page, _ = open_page(url, cookie_of_the_eldest(launched, url))
    try:
        service.kill()
        move = classroom_students.valid_move(get_preset(LINK).spec, page.sliders, __import__("random").Random(3))
        page.rerun(move[1:3])
        killed = time.time()
        code, latency, refused, errors, _ = classroom_page.watch(page, killed, killed + 90, True)
        assert errors == [] and not refused and code is not None
        assert latency is not None, "the measurement asked for while the service was down never came"
    finally:
        page.close()


def test_without_a_proxy_the_server_says_so_and_serves_one_process(monkeypatch, capsys):
    started = []

    class Server:
        def __init__(self, command, env=None):
            started.append(command)

        def wait(self):
            return 0

    monkeypatch.setattr(launcher, "caddy_path", lambda: None)
    monkeypatch.setattr(launcher, "visible_gpus", lambda: 1)
    monkeypatch.setattr(launcher.signal, "signal", lambda *args: None)
    monkeypatch.setattr(launcher.subprocess, "Popen", Server)
    monkeypatch.setattr(launcher, "wait_healthy", lambda url, server: 0.5)
    monkeypatch.setattr(launcher, "timed_warm", lambda url: (True, "", 0.1))
    assert launcher.serve(8765, "127.0.0.1", [], app_processes=3) == 0
    out = capsys.readouterr().out
    assert f"Serving one app process, not 3: no reverse proxy was found ({launcher.NO_PROXY})" in out
    assert len(started) == 1 and started[0][2] == "app.launch"


def test_the_proxy_keeps_a_browser_by_cookie_and_checks_each_process():
    text = launcher.caddyfile(8501, "0.0.0.0", [9001, 9002])
    assert "reverse_proxy 127.0.0.1:9001 127.0.0.1:9002 {" in text
    assert f"lb_policy cookie {launcher.COOKIE}" in text and "health_uri /_stcore/health" in text
    assert "bind" not in text and "bind 10.0.0.5" in launcher.caddyfile(8501, "10.0.0.5", [9001])
    config = ROOT / "test-output" / "Caddyfile"
    config.parent.mkdir(exist_ok=True)
    config.write_text(text)
    check = subprocess.run([launcher.caddy_path(), "validate", "--config", str(config), "--adapter", "caddyfile"],
                           capture_output=True, text=True, timeout=60)
    assert check.returncode == 0, check.stderr


def test_the_gpus_the_server_sees_get_a_measuring_worker_each(monkeypatch):
    monkeypatch.delenv("EXPLORER_GPUS", raising=False)
    monkeypatch.setenv(launcher.VISIBLE_GPUS, "2,3")
    assert launcher.visible_gpus() == 2 and launcher.gpu_environment(2) == {"EXPLORER_GPUS": "2"}
    monkeypatch.setenv(launcher.VISIBLE_GPUS, "")
    assert launcher.visible_gpus() == 0 and launcher.gpu_environment(0) == {} and launcher.gpu_environment(1) == {}
    monkeypatch.setenv("EXPLORER_GPUS", "1")  # the teacher's choice stands
    assert launcher.gpu_environment(2) == {}


def test_the_cores_are_shared_out_between_the_processes(monkeypatch):
    monkeypatch.delenv("EXPLORER_BUILD_WORKERS", raising=False)
    monkeypatch.delenv("EXPLORER_COMPILE_WORKERS", raising=False)
    assert [launcher.default_app_processes(cores) for cores in (2, 4, 16, 32)] == [1, 1, 4, 8]
    env = launcher.class_environment(4, 16, "/tmp/x")
    assert env["EXPLORER_BUILD_WORKERS"] == "2"  # half the cores build, shared by the four app processes
    assert env["EXPLORER_COMPILE_WORKERS"] == "12"  # three quarters compile, in the measuring service
    assert env["EXPLORER_HIGHLIGHT_AHEAD"] == "0"  # their time goes to the pages' builds
    monkeypatch.setenv("EXPLORER_HIGHLIGHT_AHEAD", "1")  # unless the teacher says otherwise
    assert launcher.class_environment(4, 16, "/tmp/x")["EXPLORER_HIGHLIGHT_AHEAD"] == "1"
    assert env[launcher.MEASURING_ADDRESS] == "/tmp/x/measuring.sock" and len(env[launcher.MEASURING_KEY]) == 32
    assert launcher.warm_file("/tmp/x/measuring.sock") == "/tmp/x/measuring.sock.warm"  # the service writes it


def test_the_measuring_service_answers_app_processes_with_its_own_sentences(tmp_path):
    # The service as serve starts it (python -m explorer.server.service): an app process reads its jobs
    # (no GPU here: the job ends with the service's sentence, not an exception of the transport).
    address, key = str(tmp_path / "measuring.sock"), secrets.token_hex(16)
    env = {**os.environ, launcher.MEASURING_ADDRESS: address, launcher.MEASURING_KEY: key}
    started = subprocess.Popen(launcher.MEASURING, cwd=ROOT, env=env)
    try:
        service.connect(address, bytes.fromhex(key), timeout_s=60)
        server = Server(ServerSettings(build_workers=0), over_socket.MeasuringOverSocket(address, bytes.fromhex(key)))
        job = server.request("a student", get_preset(LINK).spec, "auto")
        assert isinstance(job.view, service.JobView)
        assert job.wait(60) and job.done
        assert job.error.startswith("no CUDA device found") and job.result is None
        assert server.warm_up_state().done and server.warm_up_state().error
        # A leaderboard submission or a lesson's step waits through the same door, with the same sentence.
        with pytest.raises(MeasureError, match="^no CUDA device found"):
            server.measure_now(get_preset(LINK).spec, "auto", timeout=60)
        assert set(server.stats()) >= {"measurements", "queues", "baselines", "builds", "pages"}
        started.kill()
        started.wait(10)
        again = server.request("a student", get_preset(LINK).spec, "sm_90")
        assert again.state == "unreachable" and again.error == over_socket.UNREACHABLE and not again.done
        assert "measurements" not in server.stats()
        server.close()
    finally:
        started.kill()
        started.wait(10)


def test_a_page_asks_again_only_for_a_job_a_restarted_service_never_had():
    class Stub:  # the app process's side of the socket, answering as the service would
        def __init__(self, answer):
            self.answer, self.asked = answer, 0

        def call(self, method, *args, key=None):
            return self.answer

        def ask(self, *args):
            self.asked += 1
            return service.JobView("key", "waiting", service="new")

    waiting = service.JobView("key", "waiting", service="old")
    replaced = Stub(service.JobView("key", "dropped", service="old"))  # the student asked for another setting
    job = over_socket.SharedJob(replaced, ("a student",), waiting)
    assert job.look().state == "dropped" and replaced.asked == 0 and not job.wait(0.1)
    restarted = Stub(service.JobView("key", "dropped", service="new"))  # the service was started again
    job = over_socket.SharedJob(restarted, ("a student",), waiting)
    assert job.look().state == "waiting" and restarted.asked == 1
    down = Stub(service.JobView("key", "unreachable", error=over_socket.UNREACHABLE))
    job = over_socket.SharedJob(down, ("a student",), waiting)
    assert job.look().state == "unreachable" and job.look().state == "waiting" and down.asked == 1


def test_a_process_that_served_a_while_is_started_again_at_once():
    assert launcher.RESTART_PAUSE_S == 1.0
    assert launcher.restart_pause(600.0) == 0.0  # its browsers or measurements wait for it
    assert launcher.restart_pause(0.25) == 0.75  # one that exits as it starts: once a second at most
    assert launcher.restart_pause(0.0) == 1.0
