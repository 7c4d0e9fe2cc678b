"""``python -m explorer measure``: exit statuses and one-line errors."""
import pytest
import tvm

from explorer.cli import EXIT_INVALID, EXIT_NO_DEVICE, main
from explorer.measure import shutdown


@pytest.fixture(scope="module", autouse=True)
def stop_worker():
    yield
    shutdown()


def test_no_gpu_and_no_rpc_exits_3(capsys):
    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    assert main(["measure", "dw-blog-final-96", "--set", "num_thread_x=8"]) == EXIT_NO_DEVICE == 3
    captured = capsys.readouterr()
    assert captured.err.strip() == "error: no CUDA device found; use --rpc HOST:PORT --key KEY"
    assert captured.out == ""


@pytest.mark.parametrize("args, message", [
    (["--rpc", "gpu-box"], "--rpc expects the tracker as HOST:PORT"),
    (["--rpc", "127.0.0.1:9190"], "--rpc needs --key KEY"),
    (["--key", "h100"], "--key goes with --rpc"),
    (["--rpc", "127.0.0.1:9190", "--key", "h100", "--baseline"], "runs on a local GPU only"),
    (["--time-limit", "0"], "time_limit_s"),
])
def test_invalid_options_exit_2_with_one_line(capsys, args, message):
    assert main(["measure", "dw-blog-final-96", *args]) == EXIT_INVALID
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_unknown_knob_exits_2(capsys):
    assert main(["measure", "dw-blog-final-96", "--set", "num_thread_x=3"]) == EXIT_INVALID
    assert "num_thread_x" in capsys.readouterr().err
