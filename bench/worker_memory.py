"""A server worker's memory per new setting, in one process set up as that worker is.

The server's workers (explorer.server.builds, explorer.server.compiles, the diagnosing
process, explorer.server.diagnosing) each get a stream of settings they have not seen before. This
process starts as the server starts one of them (its pool's initializer), runs that stream
through it, and samples its resident memory (and glibc's heap: the bytes in use and the
free bytes it keeps) every ``--every`` settings:

- ``build``: :func:`explorer.server.builds.build_source_only` (source only, the first code
  views highlighted, the build written to a folder of builds), then the other views
  highlighted, as the app process asks the build pool to;
- ``compile``: :func:`explorer.server.compiles.compile_library`. Without a GPU, TVM's code
  generation makes a source-only module and never calls NVRTC, so here each setting's CUDA
  is also compiled by NVRTC through the registered (disk-cached) ``tvm_callback_cuda_compile``,
  as code generation does on the GPU machine;
- ``diagnose``: :func:`explorer.server.diagnosing.diagnose_in_process` (every neighbour built), as the
  diagnosing pool runs it; ``--keep`` changes its 128 builds kept.

The settings are a walk over ``--lessons``' presets: one knob moved at a time from the last
setting that built, as a student moves them, never a setting seen before. The caches on disk
(CUDA binaries, builds, libraries) start empty in a temporary folder. ``--caches`` ends with
the heap each of explorer's caches holds. Not measured here: the measuring worker (a GPU).

    python bench/worker_memory.py --kind diagnose --settings 60 --every 5 [--caches]
"""
from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
import random
import sys
import tempfile
import time

_SCRATCH = tempfile.mkdtemp(prefix="worker-memory-")
os.environ.setdefault("EXPLORER_CUDA_CACHE", os.path.join(_SCRATCH, "cuda"))  # read when explorer is imported

import psutil  # noqa: E402

from explorer.cuda_env import kernel_environment  # noqa: E402

KINDS = ("build", "compile", "diagnose")
RESTART = 0.05  # the share of moves that start again from a preset


class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                      "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


_libc = ctypes.CDLL("libc.so.6")
_libc.mallinfo2.restype = MallInfo2


def sample(done: int, tried: int, started: float) -> dict:
    heap = _libc.mallinfo2()
    from explorer import build as build_module

    return {"settings": done, "tried": tried, "s": round(time.perf_counter() - started, 1),
            "rss_mib": round(psutil.Process().memory_info().rss / 2**20, 1), **proportional_mib(),
            "heap_used_mib": round((heap.uordblks + heap.hblkhd) / 2**20, 1),
            "heap_free_mib": round(heap.fordblks / 2**20, 1),
            "objects": len(gc.get_objects()), "builds_kept": build_module._build_cached.cache_info().currsize,
            "build_hits": build_module._build_cached.cache_info().hits,
            "build_misses": build_module._build_cached.cache_info().misses}


def proportional_mib() -> dict:
    """This process's proportional set size, and its anonymous (heap, arenas) and file-backed (libraries,
    mapped files) parts (Linux's smaps_rollup, MiB); {} where there is none."""
    try:
        with open("/proc/self/smaps_rollup") as file:
            fields = dict(line.split(":", 1) for line in file.read().splitlines()[1:])
    except OSError:
        return {}
    mib = {name: int(fields[name].split()[0]) / 1024 for name in ("Pss", "Pss_Anon", "Pss_File") if name in fields}
    return {f"{name.lower()}_mib": round(value, 1) for name, value in mib.items()}


def walk(lessons: list[str], seed: int, built: set):
    """Settings never seen before, each one knob away from the last one that built (in
    ``built``, which the caller fills), as a student moves back from a setting that is
    refused; now and then a preset of the lessons to start from again."""
    from explorer.analysis.diagnosis.search import neighbours
    from explorer.presets import all_lessons

    starts = [p.spec for lesson in all_lessons() if lesson.id in lessons for p in lesson.presets]
    rng = random.Random(seed)
    seen: set = set()
    base = None
    while True:
        if base is None or rng.random() < RESTART:
            base = rng.choice(starts)
        moves = [m for path in neighbours(base) for m in path if m[0] not in seen]
        fresh = [s for s in starts if s not in seen]
        if not moves and not fresh:
            return
        spec = rng.choice(moves)[0] if moves else fresh[0]
        seen.add(spec)
        yield spec
        if spec in built:
            base = spec


def setup(kind: str, keep: int | None) -> None:
    """This process as the server starts its worker of ``kind`` (the pool's initializer)."""
    from explorer.build import keep_builds
    from explorer.server.builds import _build_pool_init
    from explorer.server.compiles import _compile_pool_init
    from explorer.server.diagnosing import _diagnosing_process_init
    from explorer.server.pool import ROOT

    {"build": _build_pool_init, "compile": _compile_pool_init, "diagnose": _diagnosing_process_init}[kind](ROOT)
    if keep is not None:
        keep_builds(keep)


def worker(kind: str, target: str):
    """The function the server's worker of ``kind`` runs on each setting: True where it built."""
    from explorer.errors import ExplorerError

    if kind == "build":
        from explorer.highlight import FIRST_VIEWS, VIEW_LANGUAGES, texts_html, views_texts
        from explorer.server.builds import build_source_only

        folder = os.path.join(_SCRATCH, "builds")
        os.makedirs(folder, exist_ok=True)
        counter = iter(range(10**9))

        def built(spec) -> bool:
            outcome = build_source_only(spec, target, FIRST_VIEWS, os.path.join(folder, f"{next(counter)}.pickle"),
                                        4096)
            if isinstance(outcome, ExplorerError):
                return False
            # The other views, highlighted in a build process too (BuildService._highlight_the_rest).
            texts_html(views_texts(outcome, [view for view in VIEW_LANGUAGES if view not in outcome.views_html]))
            return True

        return built
    if kind == "compile":
        import tvm

        from explorer.build import build
        from explorer.server.compiles import compile_library

        compile_cuda = tvm.get_global_func("tvm_callback_cuda_compile")
        folder = os.path.join(_SCRATCH, "libraries")

        def compiled(spec) -> bool:
            outcome = compile_library(spec, target, folder)
            if isinstance(outcome, ExplorerError):
                return False
            built = build(spec, target)  # kept in the build cache: not built again
            if not tvm.cuda(0).exist:  # what code generation does on a GPU machine (the compile sets NVRTC's
                with built.target:      # environment itself: explorer.cuda_compile.compile_cubin)
                    compile_cuda(built.cuda)
            return True

        return compiled
    from explorer.server.diagnosing import diagnose_in_process
    from explorer.server.pool import _released

    def diagnosed(spec) -> bool:  # as the server's diagnosing pool runs it (release_heap)
        outcome = _released(diagnose_in_process, spec, target)  # a setting that does not build: a refusal
        return not isinstance(outcome, ExplorerError) and outcome.refused is None

    return diagnosed


def slope(samples: list[dict], key: str = "rss_mib") -> float | None:
    """MiB per new setting from the middle sample on (the first settings import what
    templates need on first use)."""
    tail = samples[len(samples) // 2:]
    if len(tail) < 2 or tail[-1]["settings"] == tail[0]["settings"]:
        return None
    return (tail[-1][key] - tail[0][key]) / (tail[-1]["settings"] - tail[0]["settings"])


def heap_used_mib() -> float:
    gc.collect()
    heap = _libc.mallinfo2()
    return (heap.uordblks + heap.hblkhd) / 2**20


def cache_holdings() -> dict[str, float]:
    """The heap each of explorer's ``functools`` caches holds: the bytes in use that clearing it
    frees (explorer.build's cache last: the other caches' values may hold its builds)."""
    caches = {f"{name}.{attribute}": value for name, module in list(sys.modules.items())
              if name.startswith("explorer") for attribute, value in vars(module).items()
              if callable(getattr(value, "cache_clear", None)) and hasattr(value, "cache_info")}
    caches = dict(sorted(caches.items(), key=lambda item: item[0] == "explorer.build._build_cached"))
    held, done = {}, set()
    for name, cache in caches.items():
        if id(cache) in done or not cache.cache_info().currsize:
            continue
        done.add(id(cache))
        before = heap_used_mib()
        cache.cache_clear()
        held[name] = round(before - heap_used_mib(), 1)
    return held


def run(args) -> dict:
    setup(args.kind, args.keep)
    step = worker(args.kind, args.target)
    if args.release_heap:  # as a pool started with release_heap runs each call (explorer.server.pool._released)
        from explorer.server.pool import _released

        unreleased = step

        def step(spec):
            return _released(unreleased, spec)
    if args.tracemalloc:
        import tracemalloc

        tracemalloc.start(8)
    started = time.perf_counter()
    samples, done, tried, first, built = [], 0, 0, None, set()
    for spec in walk(args.lessons, args.seed, built):
        tried += 1
        if step(spec):
            built.add(spec)
            done += 1
            if done == args.warm and args.tracemalloc:
                first = tracemalloc.take_snapshot()
            if done % args.every == 0:
                samples.append(sample(done, tried, started))
                print(json.dumps(samples[-1]), flush=True)
        if done >= args.settings:
            break
    if first is not None:
        gc.collect()
        top = tracemalloc.take_snapshot().compare_to(first, "traceback")[:args.tracemalloc]
        for stat in top:
            print(f"{stat.size_diff / 2**20:+.1f} MiB in {stat.count_diff:+d} blocks", flush=True)
            for line in stat.traceback.format()[-8:]:
                print("   ", line)
    if args.objects:
        counts: dict = {}
        for obj in gc.get_objects():
            counts[type(obj).__name__] = counts.get(type(obj).__name__, 0) + 1
        print(json.dumps(sorted(counts.items(), key=lambda item: -item[1])[:25]))
    held = cache_holdings() if args.caches else {}
    if held:
        print(json.dumps({"heap MiB each cache held": held}))
    return {"kind": args.kind, "target": args.target, "cache_holdings_mib": held, "lessons": args.lessons,
            "keep": args.keep, "release_heap": args.release_heap,
            "samples": samples, "rss_mib_per_setting": slope(samples),
            "heap_used_mib_per_setting": slope(samples, "heap_used_mib")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=KINDS, required=True)
    parser.add_argument("--settings", type=int, default=300, help="new settings that build")
    parser.add_argument("--every", type=int, default=25, help="sample every this many settings")
    parser.add_argument("--lessons", nargs="+", default=["matmul_modern", "conv2d_modern"])
    parser.add_argument("--target", default="h100")
    parser.add_argument("--keep", type=int, help="builds kept in explorer.build's cache (default: the worker's)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--warm", type=int, default=25, help="settings before tracemalloc's first snapshot")
    parser.add_argument("--tracemalloc", type=int, default=0, help="print the top this many growths")
    parser.add_argument("--objects", action="store_true", help="print Python objects by type at the end")
    parser.add_argument("--caches", action="store_true", help="at the end, the heap each explorer cache holds")
    parser.add_argument("--release-heap", action="store_true",
                        help="give the heap's free pages back after each setting, as a pool with release_heap does")
    parser.add_argument("--json", help="write the result here")
    args = parser.parse_args()
    if args.kind == "compile":  # what CompileService sets for its processes, before they start
        changes = kernel_environment()
        if changes:
            os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **changes})
    result = run(args)
    print(json.dumps({k: v for k, v in result.items() if k != "samples"}))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(result, file, indent=1)


if __name__ == "__main__":
    main()
