"""What a server's worker processes keep between calls: their caches' bounds and the free heap
they give back (bench/worker_memory.py measures the memory itself)."""
import ctypes
from concurrent.futures import ThreadPoolExecutor

import psutil
import pytest

from explorer import highlight as highlight_module
from explorer.server import pool as pool_module
from explorer.server.pool import ProcessPool, release_free_heap
from explorer.server.settings import ServerSettings

MIB = 2**20


def _rss_mib() -> float:
    return psutil.Process().memory_info().rss / MIB


def test_the_heap_freed_between_objects_that_stay_goes_back_to_the_system():
    if not hasattr(ctypes.CDLL(None), "malloc_trim"):
        pytest.skip("not glibc: nothing to release")
    chunks = [b"x" * (64 * 1024) for _ in range(3200)]  # 200 MiB written, each from the heap (< 128 KiB)
    kept = chunks[::64]  # one chunk in 64 stays: the heap cannot shrink from its top
    del chunks
    before = _rss_mib()
    release_free_heap()
    assert before - _rss_mib() > 100  # of the ~197 MiB freed between the kept chunks
    assert len(kept) == 50


class _Recorded:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1


@pytest.mark.parametrize("release", [True, False])
def test_a_pool_that_releases_its_heap_does_so_after_each_call(monkeypatch, release):
    released = _Recorded()
    monkeypatch.setattr(pool_module, "release_free_heap", released)
    pool = ProcessPool(ServerSettings(), 1, None, release_heap=release)
    pool._pool = ThreadPoolExecutor(1)  # the call runs here instead of in a process
    try:
        assert pool.run(divmod, 7, 2) == (3, 1)
        assert pool.run(divmod, 9, 4) == (2, 1)
    finally:
        pool._pool.shutdown()
    assert released.calls == (2 if release else 0)


def test_a_build_process_keeps_no_highlighted_views():
    before = highlight_module.highlight
    try:
        highlight_module.keep_highlights(0)
        html = highlight_module.texts_html({"trace": ("x = 1\n", 1, "python")})
        assert "tvmhl" in html["trace"]
        assert highlight_module.highlight.cache_info().maxsize == 0
        assert highlight_module.highlight.cache_info().currsize == 0
    finally:
        highlight_module.highlight = before
