"""A class of students against a *running* app server, through Streamlit's own websocket
protocol (what a browser sends and receives; AppTest would bypass the server).

Each student opens a lesson step from a link, then every ``--think-time`` seconds (±50%)
moves one knob slider of the sidebar to another value that the library can build (a valid
move; the app would refuse the others with its reason), and records the time from the
move until the new code is on the page and until the new latency is (the page polls for
it, as a browser does, by answering the server's fragment auto-reruns). An observer
session reads the Device page every few seconds (the GPU queue). With ``--run-log`` it
also checks, from the measuring worker's log of kernel runs, that no two kernels were
ever timed at the same time.

Each student loads the page over HTTP first and sends its cookies with the websocket, as a
browser does: a reverse proxy that keeps a browser on one app process by a cookie then routes
the websocket to the process the page came from.

The steps come from ``--lesson NAME`` (repeatable) or ``--links ID,...`` (default: the
depthwise tutorial's); ``--same-link`` makes every student open the first of them at the
same moment, reported as a phase of its own. The server is found by the port it listens on
(or ``--server-pid``) and taken whole: the ``explorer serve`` launcher above that process,
where there is one, and everything below it (the proxy, the measuring service, each app
process, their pools). Every 2 s each part's CPU is sampled with the server's memory; the
report says how many kernels were measured per second, the share of samples in which each
part was at 90% of what it can use, and which parts limited the class.

A load test counts only if it made the load it names: the report puts the demand the class
meant to make (``students / (think time + --intended-reply)`` moves per second) beside the
moves per second it delivered, and each process playing students samples its own CPU (its
websockets, and its checks of the students' moves, which schedule them with TVM). A run in
which one of those processes was at 90% of a core in a quarter of its samples is no verdict
on the server: the report says so and the script exits with status 3 (1: a student met an
error; 0: neither).

Every error a student meets is reported with the link of the setting that caused it.

    python bench/classroom.py --url http://localhost:8501 --students 30 --seconds 300 \\
        --think-time 5 [--lesson matmul_modern] [--same-link] [--run-log /tmp/explorer-kernel-runs.log] [--write LABEL]

This file runs the class and makes the report; the jobs are the modules beside it:
``classroom_page.py`` (one browser session over the websocket), ``classroom_students.py`` (the
students and their moves), ``classroom_sampler.py`` (the server's processes, cores and memory, the
Device page, the load generator's own CPU), ``classroom_logs.py`` (the server's logs of kernel runs,
jobs and compiles) and ``classroom_report.py`` (the report in words).
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import random
import shlex
import sys
import threading
import time
from pathlib import Path

from classroom_logs import (
    compile_stages,
    gpu_busy,
    job_stages,
    kernel_runs,
    kernel_runs_by_gpu,
    overlapping_runs,
    percentiles,
    run_phases,
)
from classroom_report import (
    class_name,
    demand,
    describe,
    goal_results,
    limiter,
    memory_over_time,
    memory_result,
    slowest_moves,
)
from classroom_sampler import generator_load, limits, observe, saturation
from classroom_students import Student, play_in_processes
from docs_section import run_file, write_result, write_section

from explorer.errors import ExplorerError
from explorer.lessons import get_lesson
from explorer.presets import get_preset
from explorer.server.launcher import wait_healthy

# The steps students open: the depthwise tutorial's, as a teacher would hand them out.
LINKS = ("dw-blog-blocking-96", "dw-blog-threads-case2", "dw-blog-vthread-case2", "dw-blog-final-96")
CONNECT_S = 5.0  # with --same-link, the time the students get to connect before they all open the link
PROCESS_START_S = 2.0  # ... and, on top, per load process: a spawned one imports TVM and Streamlit's protocol first
INTENDED_REPLY_S = 1.0  # the reply a class is meant to get: a move's code on the page in about a second


def lesson_links(names: list[str]) -> tuple[str, ...]:
    """The preset ids of the steps of the lessons ``names``, in order (raises ExplorerError)."""
    return tuple(dict.fromkeys(step.preset.id for name in names for step in get_lesson(name).steps))


def run(url: str, students: int, seconds: float, think: float, want_latency: bool, server_pid: int | None = None,
        run_log: str | None = None, seed: int = 0, revisit_every: int = 0, links: tuple[str, ...] = LINKS,
        same_link: bool = False, processes: int = 1, intended_reply: float = INTENDED_REPLY_S,
        job_log: str | None = None, compile_log: str | None = None) -> dict:
    """``revisit_every`` K > 0: every K-th move of a student moves the last slider back (a
    setting the server has measured); otherwise every move is a random valid one.
    ``same_link``: every student opens ``links[0]`` at the same moment (once all are connected).
    ``intended_reply``: the seconds a move is meant to wait for its code (the demand the class means
    to make is ``students / (think + intended_reply)`` moves per second)."""
    since_ns = time.time_ns()
    started = time.time()
    end = started + seconds
    rng = random.Random(seed)
    class_ = [Student(i, links[0] if same_link else links[i % len(links)], seed=rng.random()) for i in range(students)]
    open_at = started + CONNECT_S + PROCESS_START_S * processes if same_link else None
    samples: list = []
    gpus_seen: list = []
    said: dict = {}  # what the Device page said of the server's memory
    observer = threading.Thread(target=observe, args=(url, end, samples, server_pid),
                                kwargs={"gpus_seen": gpus_seen, "said": said})
    class_, plays = play_in_processes(processes, url, class_, end, think, want_latency, revisit_every, open_at,
                                      started=observer.start)
    observer.join(60)
    # Play begins when the first process's students start (a spawned process imports first), or, with
    # same_link, when they open the link together; no move is sent after ``end``.
    began = max(min(p["began"] for p in plays), open_at or started)
    moves = sum(s.moves for s in class_)
    report = {
        "url": url, "students": students, "seconds": seconds, "think_time_s": think, "links": list(links),
        "same_link": links[0] if same_link else None, "wall_s": time.time() - started,
        "moves": moves, "refused": sum(s.refused for s in class_),
        **demand(students, think, intended_reply, moves, max(0.0, end - began)),
        **generator_load(plays),
        "errors": [e for s in class_ for e in s.errors],
        "lost_moves": [move for s in class_ for move in s.lost],
        "open_to_code": percentiles([s.open_s for s in class_ if s.open_s is not None]),
        "open_to_latency": percentiles([s.first_latency_s for s in class_ if s.first_latency_s is not None]),
        "knob_to_code": percentiles([x for s in class_ for x in s.code_s]),
        "knob_to_latency": percentiles([x for s in class_ for x in s.latency_s + s.revisit_s]),
        "knob_to_latency_new": percentiles([x for s in class_ for x in s.latency_s]),
        "knob_to_latency_revisit": percentiles([x for s in class_ for x in s.revisit_s]),
        "moves_without_latency": sum(s.no_latency for s in class_),
        "waiting_notices": collections.Counter(n[:120] for s in class_ for n in s.waiting_notices).most_common(3),
        "samples": samples, "started": started,
        "memory": memory_over_time(samples, started, seconds, said.get("memory_bound_mib")),
        "device_page_gpus": gpus_seen[-1] if gpus_seen else None,
        "slowest_to_code": slowest_moves(class_, 2, started),
        "slowest_to_latency": slowest_moves(class_, 3, started),
    }
    runs = None
    if run_log and Path(run_log).exists():
        runs, gpus = kernel_runs(run_log, since_ns), max(1, len(kernel_runs_by_gpu(run_log, since_ns)))
        report["kernel_runs"], report["overlapping_runs"] = overlapping_runs(run_log, since_ns)
        report["gpus"] = gpus
        report["measurements_per_s"] = report["kernel_runs"] / report["wall_s"]
        report["gpu_busy"] = gpu_busy(runs, report["wall_s"], gpus)
        report["run_phases_ms"] = run_phases(run_log, since_ns)
    if job_log and Path(job_log).exists():
        report["job_stages"] = job_stages(job_log, started)
    if compile_log and Path(compile_log).exists():
        report["compile_stages"] = compile_stages(compile_log, started)
    if any(s.get("cores") for s in samples):
        parts = saturation(samples, os.cpu_count() or 1, runs, report.get("gpus", 1))
        report["saturation"] = parts
        report["cores"] = {part: p["mean"] for part, p in parts.items() if part != "gpu"}
        report["limits"] = limits(parts)
        report["limited_by"] = limiter(parts)
    return report


def chosen_links(lessons: list[str], links: str | None) -> tuple[str, ...]:
    """The presets students open: ``links`` (comma-separated ids), else the steps of
    ``lessons``, else the depthwise tutorial's; an unknown id or lesson raises ExplorerError."""
    chosen = tuple(filter(None, (part.strip() for part in (links or "").split(",")))) + lesson_links(lessons)
    for link in chosen:
        get_preset(link)
    return tuple(dict.fromkeys(chosen)) or LINKS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://localhost:8501")
    parser.add_argument("--students", type=int, default=30)
    parser.add_argument("--seconds", type=float, default=300)
    parser.add_argument("--think-time", type=float, default=5.0)
    parser.add_argument("--intended-reply", type=float, default=INTENDED_REPLY_S, metavar="S",
                        help="the seconds a move is meant to wait for its code: the class means to make "
                             "students / (think time + S) moves per second, reported beside those it made")
    parser.add_argument("--no-latency", action="store_true", help="a server without a GPU: time the code only")
    parser.add_argument("--server-pid", type=int,
                        help="the server's process (its launcher, or a Streamlit process): its whole tree is sampled")
    parser.add_argument("--run-log", help="the measuring worker's kernel-run log, to check runs never overlapped")
    parser.add_argument("--job-log", help="the measuring scheduler's job log (EXPLORER_JOB_LOG), to say where the "
                                          "students' measurements waited")
    parser.add_argument("--compile-log", help="the compile processes' log (EXPLORER_COMPILE_LOG), to say where a "
                                              "compile's seconds went")
    parser.add_argument("--json", help="write the whole report (with samples) here")
    parser.add_argument("--goal", action="append", default=[], metavar="NAME=SECONDS",
                        help="a target to check, e.g. knob_to_code.p95=1.0 or knob_to_latency_new.p50=0.5")
    parser.add_argument("--write", metavar="LABEL",
                        help="write the report to bench/results/runs/classroom-LABEL.md and each goal's row of "
                             "docs/results.md")
    parser.add_argument("--class-name", metavar="TEXT",
                        help="the class, as docs/results.md names its goals' rows (default: the students and their "
                             "lessons, or the steps they open); the next run of the same name replaces them")
    parser.add_argument("--machine", default=platform.node(), help="the machine, as the table should name it")
    parser.add_argument("--memory", action="store_true",
                        help="with --write, also the row of the server's memory over this class in docs/results.md "
                             "(summed PSS over time, flat once the caches fill, within the bound the server states)")
    parser.add_argument("--revisit-every", type=int, default=0, metavar="K",
                        help="every K-th move of a student undoes the previous one (a revisit); 0: never on purpose")
    parser.add_argument("--lesson", action="append", default=[], metavar="NAME",
                        help="students open this lesson's steps (repeatable); default: the depthwise tutorial's")
    parser.add_argument("--links", metavar="ID,...", help="students open these presets (comma-separated)")
    parser.add_argument("--wait-for-server", type=float, default=0, metavar="S",
                        help="wait up to S seconds for the server's health check, then connect at once "
                             "(a server just started: the time to the first code counts from its first answer)")
    parser.add_argument("--processes", type=int, default=1,
                        help="share the students among this many processes (a large class: one process's GIL "
                             "would delay its students' readings)")
    parser.add_argument("--same-link", action="store_true",
                        help="every student opens the first link at the same moment (a phase of its own)")
    args = parser.parse_args()
    if args.revisit_every < 0:
        parser.error("--revisit-every takes 0 (never on purpose) or a positive number of moves")
    if args.intended_reply < 0 or args.think_time + args.intended_reply <= 0:
        parser.error("--intended-reply takes 0 or more seconds, and with --think-time more than 0")
    try:
        links = chosen_links(args.lesson, args.links)
    except ExplorerError as error:
        parser.error(str(error))
    if args.wait_for_server:
        try:
            waited = wait_healthy(args.url.rstrip("/"), timeout_s=args.wait_for_server)
        except RuntimeError as error:
            parser.error(str(error))
        print(f"The server answered its health check after {waited:.1f} s; the students connect now.", flush=True)
    report = run(args.url, args.students, args.seconds, args.think_time, not args.no_latency, args.server_pid,
                 args.run_log, revisit_every=args.revisit_every, links=links, same_link=args.same_link,
                 processes=args.processes, intended_reply=args.intended_reply, job_log=args.job_log,
                 compile_log=args.compile_log)
    goals = {name: float(limit) for name, limit in (g.split("=", 1) for g in args.goal)}
    text = describe(report, goals)
    print(text)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    if args.write:
        command = "python bench/classroom.py " + shlex.join(sys.argv[1:])
        section, date = f"classroom-{args.write}", time.strftime("%Y-%m-%d")
        write_section(section, f"### Classroom: {args.write}\n\nMachine: {args.machine}. "
                      f"Date: {date}. Command (server on the same machine, started with "
                      f"`python -m explorer serve`):\n`{command}`\n\n{text}\n")
        lessons = args.lesson or ([] if args.links else ["depthwise_blog"])  # LINKS: that lesson's steps
        name = args.class_name or class_name(args.students, lessons, links, args.same_link, report.get("gpus", 1))
        rows = goal_results(report, goals, name, args.machine, date, command, run_file(section))
        if args.memory and report["memory"]:
            rows.append(memory_result(report, lessons, args.machine, date, command, run_file(section)))
        write_result(*rows)
    # 3: the run measured its own load generator as much as the server; 1: a student met an error.
    sys.exit(3 if report["generator_limited"] else 1 if report["errors"] else 0)


if __name__ == "__main__":
    main()
