"""A memory probe for a running app server: put this folder on the server's PYTHONPATH with
``EXPLORER_MEMORY_PROBE=DIR`` set, and every app process (``python -m app.launch``; not its build,
compile or diagnosing processes) appends a line of JSON to ``DIR/probe-PID.jsonl`` every
``EXPLORER_MEMORY_PROBE_EVERY`` seconds (10): its resident memory, glibc's heap (``mallinfo2``:
the bytes in use and the free bytes the heap keeps, which tells objects kept from fragmentation),
its threads, its Streamlit sessions (all, and those with a browser connected) and its build
cache; every third line also the Python objects by type, the growth since the first such line
(``Build``, ``Try``, ``IRModule``: builds kept alive, and by whom), after a ``gc.collect()``.

    PYTHONPATH=$PWD:$PWD/bench/memory_probe EXPLORER_MEMORY_PROBE=/tmp/probe \\
        python -m explorer serve --port 8600 --address 127.0.0.1
"""
import os


def _start() -> None:
    directory = os.environ.get("EXPLORER_MEMORY_PROBE")
    try:
        with open("/proc/self/cmdline", "rb") as file:
            command = file.read().split(b"\0")
    except OSError:
        return
    if not directory or b"app.launch" not in command:
        return
    import collections
    import ctypes
    import gc
    import json
    import threading
    import time

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                          "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL("libc.so.6")
    libc.mallinfo2.restype = MallInfo2
    path = os.path.join(directory, f"probe-{os.getpid()}.jsonl")
    every = float(os.environ.get("EXPLORER_MEMORY_PROBE_EVERY", "10"))
    first_counts: list[collections.Counter] = []

    def rss_mib() -> int:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) // 1024 for line in status if line.startswith("VmRSS"))

    def sessions():
        from streamlit.runtime import Runtime

        if not Runtime.exists():
            return None
        manager = Runtime.instance()._session_mgr
        return {"all": len(manager.list_sessions()), "active": len(manager.list_active_sessions())}

    def build_cache():
        from app import handle

        return handle.server().stats()["builds"]

    def sample(objects: bool) -> dict:
        heap = libc.mallinfo2()
        line = {"t": time.time(), "rss_mib": rss_mib(), "threads": threading.active_count(),
                "heap_mib": heap.arena / 2**20, "mmapped_mib": heap.hblkhd / 2**20,
                "in_use_mib": heap.uordblks / 2**20, "heap_free_mib": heap.fordblks / 2**20}
        for name, read in (("sessions", sessions), ("build_cache", build_cache)):
            try:
                line[name] = read()
            except Exception as error:  # a probe never stops the server: what it could not read, said
                line[name] = repr(error)[:200]
        if objects:
            gc.collect()
            line["in_use_after_gc_mib"] = libc.mallinfo2().uordblks / 2**20
            counts = collections.Counter(type(o).__qualname__ for o in gc.get_objects())
            first_counts[:] = first_counts or [counts]
            line["objects_growth"] = (counts - first_counts[0]).most_common(25)
            line["threads_by_name"] = collections.Counter(
                t.name.rstrip("0123456789_") for t in threading.enumerate()).most_common(15)
        return line

    def loop() -> None:
        for n in __import__("itertools").count():
            time.sleep(every)
            try:
                line = sample(objects=n % 3 == 0)
            except Exception as error:
                line = {"t": time.time(), "error": repr(error)}
            with open(path, "a") as file:
                file.write(json.dumps(line) + "\n")

    threading.Thread(target=loop, name="memory-probe", daemon=True).start()


_start()
