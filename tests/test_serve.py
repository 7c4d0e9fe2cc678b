"""``python -m explorer serve``: Streamlit started with its script health check (the server
itself, warm before anyone connects and stopped with its launcher: tests/test_classroom_bench.py,
whose class runs on it)."""
import subprocess
import sys

import pytest
from test_classroom_bench import ROOT

from explorer.server import launcher


def test_the_command_runs_the_app_with_the_script_health_check():
    command = launcher.streamlit_command(8502, "0.0.0.0", ["--server.maxUploadSize", "1"])
    assert command[:4] == [sys.executable, "-m", "app.launch", "run"]
    assert command[4] == str(ROOT / "app" / "main.py")
    options = dict(zip(command[5::2], command[6::2], strict=True))
    assert options == {"--server.headless": "true", "--server.port": "8502", "--server.address": "0.0.0.0",
                       "--server.scriptHealthCheckEnabled": "true", "--global.developmentMode": "false",
                       "--server.fileWatcherType": "none",
                       "--server.maxUploadSize": "1"}


def test_the_local_url_of_a_server_on_every_interface_is_loopback():
    assert launcher.local_url(8501, "0.0.0.0") == "http://127.0.0.1:8501"
    assert launcher.local_url(9000, "10.1.2.3") == "http://10.1.2.3:9000"


@pytest.fixture(scope="module")
def app_process():
    """What the app's process holds once its launcher (``app.launch``, which imports ``app.handle``) and
    TVM are imported, in a fresh interpreter: its lines (PyTorch's entry, whether pandas is whole) and
    its errors. One interpreter for both tests below: each start imports TVM and Streamlit again."""
    check = ("import sys, app.launch, tvm; print(sys.modules['torch']); "
             "print(hasattr(sys.modules['pandas'], 'Series'))")
    probe = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    return probe.stdout.splitlines(), probe.stderr


def test_the_launcher_keeps_pytorch_out_of_the_app_process(app_process):
    # TVM's FFI would import PyTorch; the app's process never runs a kernel.
    lines, errors = app_process
    assert lines[:1] == ["None"], errors


def test_the_early_warm_up_leaves_a_machine_without_a_gpu_to_the_server_to_report():
    from explorer.presets import get_preset
    from explorer.server.warm_up import warm_up_gpu_early
    from explorer.targets import local_gpu_target

    if local_gpu_target() is not None:
        pytest.skip("a GPU machine: the early warm-up starts the worker there")
    warm_up_gpu_early(get_preset("dw-blog-final-96").spec)  # NoDevice stays inside: the server reports it


def test_a_server_setting_it_cannot_take_is_refused_before_the_server_starts(monkeypatch, capsys):
    from explorer.cli import main

    monkeypatch.setenv("EXPLORER_DIAGNOSE", "yes")
    monkeypatch.setattr(launcher, "serve", lambda *args: pytest.fail("the server was started"))
    assert main(["serve", "--port", "8502"]) == 2
    assert capsys.readouterr().err == "error: EXPLORER_DIAGNOSE must be 1 (on) or 0 (off), not 'yes'.\n"


def test_pandas_is_imported_whole_before_any_page_runs(app_process):
    # Sessions' first pages run in threads at once: one that found pandas half-imported by another
    # (Plotly looks it up in sys.modules) failed with "partially initialized module 'pandas'".
    lines, errors = app_process
    assert lines[1:] == ["True"], errors


def test_the_console_script_starts_a_server_without_the_cli_library():
    """``tvm-explorer serve`` is ``python -m explorer serve``: its launcher imports neither the CLI's library
    nor TVM (a second of CPU and TVM's memory in a process that never builds)."""
    import tomllib

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"tvm-explorer": "explorer.__main__:main"}
    check = ("import sys; sys.argv = ['tvm-explorer', 'serve', '--help']\n"
             "from explorer.__main__ import main\n"
             "try:\n    main()\nexcept SystemExit as done:\n    assert done.code == 0\n"
             "print(sorted(name for name in ('explorer.cli', 'tvm') if name in sys.modules))")
    probe = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert probe.returncode == 0, probe.stderr
    assert "--app-processes" in probe.stdout and probe.stdout.splitlines()[-1] == "[]"


def test_the_servers_log_goes_to_stderr_as_it_is_when_a_line_is_written(monkeypatch):
    """The server started in a test writes its warm-up's steps after that test's captured stderr closed:
    its lines go to the stderr of the moment, not to a closed stream ("Logging error")."""
    import io
    import logging

    from app import handle

    logger = logging.getLogger("explorer")
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logger.level)
    first, then = io.StringIO(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    handle.log_to_stderr()
    logging.getLogger("explorer.server.warm_up").info("warm-up: ready (at 0.1 s)")
    first.close()  # the test that started the server has ended
    monkeypatch.setattr(sys, "stderr", then)
    logging.getLogger("explorer.server.in_process").info("warm-up: 105 lesson steps measured")
    assert then.getvalue().endswith("warm-up: 105 lesson steps measured\n")
