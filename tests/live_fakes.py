"""A stand-in GPU for app tests: a server (``explorer.live.Live``) whose measurements come
from a function, warm at once (or when the test says), and a helper to rerun a page once
the server's queue is empty (what the page's polling does in a browser)."""
import dataclasses
import time


def fake_measurements(monkeypatch, latency_of, warm_up=None, quick=False):
    """A server whose GPU answers ``latency_of(spec)`` µs (None: a wrong result); returns
    the specs it measured. ``warm_up`` replaces the GPU's warm-up (default: instant);
    ``quick`` marks each measurement as timed with the short budget."""
    # The app here, not at the top: a class server's stand-in measuring service (tests/stand_in_gpu.py)
    # takes fake_measurement alone, and imported Streamlit and the app's modules for it (0.7 CPU-s each start).
    from app import latency, server
    from explorer.live import Live

    calls = []

    def fake_measure(job):
        calls.append(job.spec)
        return dataclasses.replace(fake_measurement(job.spec, latency_of(job.spec)), quick=quick)

    live = Live(measure_fn=fake_measure, warm_up_fn=warm_up or (lambda first, target, warm: "Fake GPU"))
    live.builds = server.live().builds  # the real server's compile processes, shared by all tests
    live.baseline = lambda workload: None
    live.ready.set()
    live.warm.finish("Fake GPU")
    monkeypatch.setattr(server, "live", lambda: live)
    monkeypatch.setattr(latency, "can_measure", lambda: True)
    return calls


def fake_measurement(spec, us):
    """What the fake GPU measures for ``spec``: ``us`` µs each time (None: a wrong result),
    on ceilings where the compulsory bytes take 2 µs."""
    from explorer.analysis.roofline import compute_types
    from explorer.measure import Check, Measurement, Timing

    check = Check(True, 0.0, 1e-5, 0, None) if us is not None else Check(False, 3.0, 1e-5, 7, (0, 0, 1, 2), 1.0, 4.0)
    timing = Timing((us, us, us), 100) if us is not None else None
    return Measurement(spec.workload.label(), "cuda", "Fake GPU", check, timing, fake_ceilings(spec.workload),
                       spec.workload.flops, spec.workload.compulsory_bytes, 0.0,
                       compute_types=compute_types(spec))


def settle(at, timeout: float = 30):
    """Rerun ``at`` once the server's GPU queue is empty (what the page's polling does)."""
    from app import server

    live = server.live()
    deadline = time.time() + timeout
    while any(live.scheduler.queue_lengths().values()) and time.time() < deadline:
        time.sleep(0.01)
    return at.run()


def fake_ceilings(workload):
    """Ceilings on which the workload's compulsory bytes take exactly 2 µs (compute is free, on the
    tensor cores too: a GPU measures their peak, and a 16-bit kernel's page places it on the roofline)."""
    from explorer.analysis.roofline import Ceilings

    return Ceilings(1e12, workload.compulsory_bytes / 2e3, None, 0, "measured on Fake GPU",
                    (("bfloat16", 1e12), ("float16", 1e12)))
