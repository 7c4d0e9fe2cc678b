"""What Dask distributed adds to a class server's build and compile calls (docs/architecture.md,
"Past one machine"): its import, and a call's round trip through this machine's process pool (TVM's
PopenPoolExecutor, the default) and through a Dask scheduler and worker processes started here, both
for a call that returns nothing and one that returns a page's build (180 KB, what a build call sends
back), one call at a time and as many at once as there are worker processes.

    python bench/engine_overhead.py [--calls 300] [--workers 2] [--json FILE]

Prints a Markdown table (machine, date, command above it). It imports neither TVM nor the explorer's
library: the calls are the pools' own overhead, not a build's.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import wait

BUILD_BYTES = 180_000  # a dw-blog page's pickled build with its highlighted views


def echo(size: int) -> bytes:
    return b"x" * size


def import_seconds(module: str, repeats: int = 5) -> float:
    """The median wall seconds ``import module`` adds to a fresh interpreter."""
    def run(code: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - start

    return statistics.median(run(f"import {module}") - run("pass") for _ in range(repeats))


def round_trips(submit, calls: int, size: int) -> float:
    """Median milliseconds of one call at a time."""
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        submit(echo, size).result()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[5:])  # the first calls start the processes


def throughput(submit, calls: int, size: int) -> float:
    """Calls per second with every call asked at once."""
    start = time.perf_counter()
    wait([submit(echo, size) for _ in range(calls)])
    return calls / (time.perf_counter() - start)


def measure_pool(workers: int, calls: int) -> dict:
    from tvm.support.popen_pool import PopenPoolExecutor

    pool = PopenPoolExecutor(max_workers=workers)
    try:
        pool.submit(echo, 1).result()
        return {"empty ms": round_trips(pool.submit, calls, 0),
                "build ms": round_trips(pool.submit, calls, BUILD_BYTES),
                "calls/s": throughput(pool.submit, calls, BUILD_BYTES)}
    finally:
        pool.shutdown()


def measure_dask(workers: int, calls: int, address: str | None) -> dict:
    import distributed

    started = []
    folder = tempfile.mkdtemp(prefix="engine-overhead-")
    if address is None:
        file = os.path.join(folder, "scheduler.json")
        started.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host",
                                         "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", file],
                                        stderr=subprocess.DEVNULL))
        while not os.path.exists(file):
            time.sleep(0.1)
        time.sleep(0.2)
        address = json.load(open(file))["address"]
        started.append(subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", "--nworkers",
                                         str(workers), "--nthreads", "1", "--no-dashboard", address],
                                        stderr=subprocess.DEVNULL))
    client = distributed.Client(address, set_as_default=False)
    try:
        client.wait_for_workers(workers, timeout=60)
        submit = lambda function, size: client.submit(function, size, pure=False)  # noqa: E731
        connect_start = time.perf_counter()
        distributed.Client(address, set_as_default=False).close()
        connect_ms = (time.perf_counter() - connect_start) * 1e3
        return {"empty ms": round_trips(submit, calls, 0), "build ms": round_trips(submit, calls, BUILD_BYTES),
                "calls/s": throughput(lambda f, s: _as_concurrent(client.submit(f, s, pure=False)), calls, BUILD_BYTES),
                "connect ms": connect_ms}
    finally:
        client.close()
        for process in reversed(started):
            process.terminate()
            process.wait(30)


def _as_concurrent(future):
    """A Dask future as ``concurrent.futures.wait`` takes it."""
    import concurrent.futures

    done = concurrent.futures.Future()
    future.add_done_callback(lambda f: done.set_result(None))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--scheduler", help="an existing Dask scheduler's address (its workers are used)")
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)
    figures = {"machine": f"{platform.node()}, {os.cpu_count()} cores", "date": time.strftime("%Y-%m-%d"),
               "command": "python bench/engine_overhead.py " + " ".join(argv if argv is not None else sys.argv[1:]),
               "import distributed s": import_seconds("distributed"),
               "pool": measure_pool(args.workers, args.calls),
               "dask": measure_dask(args.workers, args.calls, args.scheduler)}
    print(f"{figures['machine']}, {figures['date']}: `{figures['command']}`\n")
    print(f"Importing distributed: {figures['import distributed s']:.2f} s (only with --workers).\n")
    print("| calls through | empty call, ms | a build's 180 KB back, ms | calls/s, all at once |")
    print("|---|---|---|---|")
    for name, label in (("pool", "this machine's processes (PopenPoolExecutor)"),
                        ("dask", "Dask (scheduler + workers)")):
        row = figures[name]
        print(f"| {label} | {row['empty ms']:.2f} | {row['build ms']:.2f} | {row['calls/s']:.0f} |")
    print(f"\nA new client's connection to the scheduler: {figures['dask']['connect ms']:.0f} ms.")
    if args.json:
        with open(args.json, "w") as file:
            json.dump(figures, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
