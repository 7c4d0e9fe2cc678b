"""The class server on a real GPU: the app's processes generate source only, the measuring
worker compiles and times, warm-up first."""
import time

import pytest
import tvm

from explorer.build import build
from explorer.cuda_env import SOURCE_ONLY
from explorer.presets import get_preset
from explorer.server.api import Server
from explorer.server.settings import ServerSettings

pytestmark = pytest.mark.gpu
SPEC = get_preset("dw-blog-final-96").spec


def test_source_only_codegen_never_compiles(monkeypatch):
    compiled = []
    real = tvm.get_global_func("tvm_callback_cuda_compile")

    def spy(code, *rest):
        compiled.append(code)
        return real(code, *rest)

    tvm.register_global_func("tvm_callback_cuda_compile", spy, override=True)
    try:
        monkeypatch.setenv(SOURCE_ONLY, "1")
        built = build(SPEC.with_knobs(num_thread_x=4), "auto")
        assert "__global__" in built.cuda and compiled == []
        monkeypatch.delenv(SOURCE_ONLY)
        build(SPEC.with_knobs(num_thread_x=2), "auto")  # the measuring worker's way: compiled
        assert len(compiled) == 1
    finally:
        tvm.register_global_func("tvm_callback_cuda_compile", real, override=True)


def test_a_server_warms_up_then_measures_a_correct_kernel():
    server = Server(ServerSettings(build_workers=2))
    try:
        server.start(SPEC)
        deadline = time.monotonic() + 180
        while not server.warm_up_state().done and time.monotonic() < deadline:
            time.sleep(0.1)
        warm = server.warm_up_state()
        assert warm.gpu, warm.error
        start = time.perf_counter()
        job = server.request("student", SPEC.with_knobs(num_thread_x=8), "auto")
        assert job.wait(120)
        assert job.error is None and job.result.correct and job.result.median_us > 0
        print(f"warm knob change measured in {time.perf_counter() - start:.3f} s; warm-up {warm.steps}")
    finally:
        server.close()

