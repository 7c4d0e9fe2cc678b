"""A class's report in words: the timings table, the goals met or missed, the demand meant beside
the demand made, what the server's parts and the load generator used, and every error a student met
with the link of the setting that caused it."""
from __future__ import annotations

import collections
import statistics

from classroom_logs import COMPILE_STAGE_WORDS
from classroom_sampler import LIMIT_SHARE, SAMPLE_EVERY_S, SATURATED, limits
from docs_section import MET, Result

SLOWEST_SHARE = 0.05  # the moves above the 95th percentile: what a p95 goal is about
FIRST_MINUTE_S = 60


def slowest_moves(class_: list, column: int, started: float) -> dict:
    """The slowest 5% of the class's moves by ``column`` of their timeline (2: to code, 3: to
    latency): how many, the templates they moved, and how many came in the run's first minute
    (when the server still builds and measures the lesson steps ahead)."""
    moves = sorted((m for s in class_ for m in s.timeline if m[column] is not None), key=lambda m: -m[column])
    slowest = moves[:max(1, round(len(moves) * SLOWEST_SHARE))] if moves else []
    return {"count": len(slowest), "templates": collections.Counter(m[1] for m in slowest).most_common(),
            "in_first_minute": sum(m[0] - started < FIRST_MINUTE_S for m in slowest),
            "templates_of_all": collections.Counter(m[1] for m in moves).most_common()}


def goal_outcome(report: dict, name: str, limit: float) -> tuple[float | None, str]:
    """A goal such as "knob_to_code.p95" ≤ ``limit`` seconds: the run's figure and "met", "missed by … s"
    or "not measured"."""
    section, stat = name.rsplit(".", 1)
    value = report[section][stat]
    if value is None:
        return None, "not measured"
    return value, "met" if value <= limit else f"missed by {value - limit:.3f} s"


def goal_rows(report: dict, goals: dict[str, float]) -> list[str]:
    """Rows "| goal | measured | verdict |" for goals such as {"knob_to_code.p95": 1.0}."""
    rows = ["| goal | measured | |", "| --- | ---: | --- |"]
    for name, limit in goals.items():
        section, stat = name.rsplit(".", 1)
        value, verdict = goal_outcome(report, name, limit)
        shown = "—" if value is None else f"{value:.3f} s"
        verdict = verdict if verdict in ("met", "not measured") else f"**{verdict}**"
        rows.append(f"| {section.replace('_', ' ')} {stat} ≤ {limit:g} s | {shown} | {verdict} |")
    return rows


def class_name(students: int, lessons: list[str], links: tuple[str, ...], same_link: bool, gpus: int = 1) -> str:
    """The class a run stands for, as docs/results.md names its rows: the students and what they open."""
    if same_link:
        what = f"opening `{links[0]}` at once"
    elif lessons:
        what = " + ".join(lessons)
    else:
        what = "the steps " + ", ".join(links)
    return f"{students} student{'s' if students != 1 else ''}, {what}" + (f", {gpus} GPUs" if gpus > 1 else "")


def goal_results(report: dict, goals: dict[str, float], name: str, machine: str, date: str, command: str,
                 run: str = "") -> list[Result]:
    """One docs/results.md row per goal: the figure with the demand the class made beside it, and what limited
    the server where the goal was missed. A run whose load generator was saturated gives no verdict."""
    demand = (f"; {report['delivered_moves_per_s']:.1f} of {report['intended_moves_per_s']:.1f} moves/s delivered"
              if report.get("intended_moves_per_s") else "")
    class_ = (f"{report['seconds']:.0f} s{demand}; {len(report['errors'])} errors, "
              f"{len(report.get('lost_moves', []))} moves without code"
              + (f", {report['overlapping_runs']} kernel runs overlapping" if "overlapping_runs" in report else ""))
    out = []
    for goal, limit in goals.items():
        value, verdict = goal_outcome(report, goal, limit)
        if report.get("generator_limited"):
            verdict = "no verdict: the load generator was saturated"
        section, stat = goal.rsplit(".", 1)
        words = section.replace("open_to_", "link_to_").replace("_to_", " → ").replace("_", " ")
        out.append(Result("class", f"{name}: {words} {stat}", f"≤ {limit:g} s",
                          f"{'—' if value is None else f'{value:.3f} s'} ({class_})", verdict, machine, date,
                          command, run, limit=report["limited_by"] if verdict != MET and report.get("limits") else ""))
    return out


def demand(students: int, think: float, intended_reply: float, moves: int, playing_s: float) -> dict:
    """The moves per second the class meant to make (each student a move every ``think`` s plus the
    ``intended_reply`` it waits for) and those it made in ``playing_s`` seconds of play."""
    cycle = think + intended_reply
    return {"intended_reply_s": intended_reply, "playing_s": playing_s,
            "intended_moves_per_s": students / cycle if cycle > 0 else None,
            "delivered_moves_per_s": moves / playing_s if playing_s > 0 else 0.0}


def demand_text(report: dict) -> str:
    """"Demand: 16.7 moves/s intended (...), 12.1 delivered (72%) over 290 s of play."""
    intended, delivered = report["intended_moves_per_s"], report["delivered_moves_per_s"]
    share = f" ({delivered / intended:.0%})" if intended else ""
    intended_text = f"{intended:.1f}" if intended is not None else "—"
    return (f"Demand: {intended_text} moves/s intended ({report['students']} students, a move every "
            f"~{report['think_time_s']:g} s + {report['intended_reply_s']:g} s for its code), {delivered:.1f} "
            f"delivered{share} over {report['playing_s']:.0f} s of play.")


def generator_text(report: dict) -> list[str]:
    """What the load generator's own processes used, and, when one was saturated, that the run is no verdict."""
    generator = report.get("generator") or []
    if not generator:
        return []
    each = "; ".join(
        f"{'the main process' if len(generator) == 1 else f'process {i}'} "
        + (f"{g['mean_cores']:.2f} cores mean, at ≥ {SATURATED:.0%} of a core in {g['busy_share']:.0%} of "
           f"{g['samples']} samples" if g["samples"] else "no sample (a run shorter than one)")
        for i, g in enumerate(generator, 1))
    lines = [f"Load generator (its own CPU, every {SAMPLE_EVERY_S:g} s): {each}."]
    if report.get("generator_limited"):
        busy = ", ".join(f"{'the main process' if len(generator) == 1 else f'process {i}'} in {g['busy_share']:.0%}"
                         for i, g in enumerate(generator, 1) if g["busy_share"] >= LIMIT_SHARE)
        lines.insert(0, f"Not a verdict: the load generator was at ≥ {SATURATED:.0%} of a core in "
                        f"{LIMIT_SHARE:.0%} of its samples or more ({busy}), so its students' moves and readings "
                        "waited for it as well as for the server; share the class among more --processes.")
    return lines


def worker_kinds_text(samples: list[dict]) -> list[str]:
    """The workers by kind (build, compile, diagnose, measure): mean cores and resident memory
    start → end, from the samples that have them."""
    kinds = [s["rss_kinds_mib"] for s in samples if s.get("rss_kinds_mib")]
    cores = [s["cores"]["kinds"] for s in samples if s.get("cores") and "kinds" in s["cores"]]
    if not kinds:
        return []
    names = sorted(set().union(*kinds, *cores))
    mean = {kind: statistics.mean(c.get(kind, 0.0) for c in cores) if cores else 0.0 for kind in names}
    queued = [s["cores"]["queued"] for s in samples if s.get("cores") and s["cores"].get("queued")]
    waited = {kind: statistics.mean(q.get(kind, 0.0) for q in queued) for kind in names} if queued else {}
    return ["Workers by kind, mean cores; resident memory start → end (MiB): " + "; ".join(
        f"{kind} {mean[kind]:.2f} cores, {kinds[0].get(kind, 0):.0f} → {kinds[-1].get(kind, 0):.0f}"
        for kind in names) + "."] + ([
        "Workers by kind, waiting for a core while ready to run (process-seconds per second, mean): " + "; ".join(
            f"{kind} {waited[kind]:.2f}" for kind in names) + "."] if waited else [])


def part_text(part: str, p: dict) -> str:
    """"app processes at ≥ 90% of a core in 48% of samples (...)": one part of ``saturation``'s answer."""
    share = f"in {p['share']:.0%} of samples"
    if part == "gpu":
        return f"the GPU busy ≥ {SATURATED:.0%} of the time {share} (mean {p['mean']:.0%})"
    if part == "app":
        return (f"app processes at ≥ {SATURATED:.0%} of a core {share} ({p['processes']} of them, "
                f"mean {p['mean']:.2f} cores each)")
    what = {"measuring": "the measuring service", "proxy": "the proxy", "workers": "the workers"}[part]
    of = "a core" if p["capacity"] == 1 else f"{p['capacity']:.0f} cores"
    return f"{what} at ≥ {SATURATED:.0%} of {of} {share} (mean {p['mean']:.2f} cores)"


LIMIT_WHY = {
    "app": "one Python process runs every page of its sessions, so its GIL caps it near one core",
    "measuring": "one Python process hands out every build and measurement",
    "proxy": "every request and websocket message goes through it",
    "workers": "the build, compile and measuring processes used the cores the others leave",
    "gpu": "one kernel is timed at a time",
}


def limiter(parts: dict) -> str:
    """Which parts of the server limited the class, from ``saturation``'s answer: those saturated
    in LIMIT_SHARE of their samples or more (a run's mean hides a part at one core half of the time)."""
    named = limits(parts)
    if named:
        return "; ".join(f"{part_text(part, parts[part])}: {LIMIT_WHY[part]}" for part in named)
    return (f"none saturated (no part at ≥ {SATURATED:.0%} of what it can use in {LIMIT_SHARE:.0%} of its "
            f"samples): the class asked for no more")


def timings_rows(report: dict) -> list[str]:
    """The table of how long a student waited: link → code and latency, knob → code and latency."""
    def row(name, p):
        if not p["n"]:
            return f"| {name} | 0 | — | — | — |"
        return f"| {name} | {p['n']} | {p['p50']:.3f} | {p['p95']:.3f} | {p['max']:.3f} |"

    return ["| from | n | p50 (s) | p95 (s) | max (s) |", "| --- | ---: | ---: | ---: | ---: |",
            row("link → code", report["open_to_code"]), row("link → latency", report["open_to_latency"]),
            row("knob → code", report["knob_to_code"]), row("knob → latency", report["knob_to_latency"]),
            row("… a setting new to the server", report["knob_to_latency_new"]),
            row("… a setting seen before (revisit)", report["knob_to_latency_revisit"])]


def slowest_lines(report: dict) -> list[str]:
    """Which moves were the slowest, and what the page said when a latency had not come."""
    lines = []
    for what, key in (("code", "slowest_to_code"), ("latency", "slowest_to_latency")):
        slow = report.get(key)
        if slow and slow["count"]:
            moved = ", ".join(f"{template} {n}" for template, n in slow["templates"])
            every = ", ".join(f"{template} {n}" for template, n in slow["templates_of_all"])
            lines.append(f"The slowest 5% of moves to {what} ({slow['count']}): {moved}; {slow['in_first_minute']} of "
                         f"them in the first minute (all moves: {every}).")
    if report.get("moves_without_latency"):
        lines.append(f"Moves whose latency had not come before the student's next move: "
                     f"{report['moves_without_latency']}.")
    for notice, times in report.get("waiting_notices", ()):
        lines.append(f"When a latency had not come, the page said ({times}×): {notice or '(nothing)'}")
    return lines


def memory_lines(samples: list[dict]) -> list[str]:
    """The server's resident memory at the start, mid-run and at the end, whole and by part."""
    rss = [x for x in (s.get("rss_server_mib", s["rss_mib"]) for s in samples) if x is not None]
    lines = []
    if rss:
        third = max(1, len(rss) // 3)
        lines.append(f"Server RSS (all its processes): {rss[0]:.0f} MiB at the start, "
                     f"{statistics.mean(rss[third:2 * third] or rss):.0f} MiB mid-run, {rss[-1]:.0f} MiB at the end "
                     f"(max {max(rss):.0f}).")
    parts = [s["rss_parts_mib"] for s in samples if s.get("rss_parts_mib")]
    if parts:
        lines.append("By part, start → end (MiB): " + "; ".join(
            f"{role} {parts[0].get(role, 0):.0f} → {parts[-1].get(role, 0):.0f}" for role in sorted(parts[-1])) + ".")
    pss = [s for s in samples if s.get("pss_parts_mib")]
    if pss:
        first, last = pss[0], pss[-1]
        kinds = sorted(set(first["pss_kinds_mib"]) | set(last["pss_kinds_mib"]))
        lines.append("PSS by part, start → end (MiB): " + "; ".join(
            f"{role} {first['pss_parts_mib'].get(role, 0):.0f} → {last['pss_parts_mib'].get(role, 0):.0f}"
            for role in sorted(last["pss_parts_mib"])) + "; the workers by kind: " + "; ".join(
            f"{kind} {first['pss_kinds_mib'].get(kind, 0):.0f} → {last['pss_kinds_mib'].get(kind, 0):.0f}"
            for kind in kinds) + ".")
    return lines + worker_kinds_text(samples)


# A 20-minute class's memory is read at these minutes (a run of another length: at the same fractions of it);
# its caches have filled by FILLED_AT_MIN (the H100's 20-minute class: its summed RSS rose 1.5 GiB in the first
# 5 minutes, 1.6 GiB in the 15 after); after that the server is flat while it grows by at most FLAT_SHARE.
MEMORY_MARKS_MIN = (1, 5, 10, 20)
FILLED_AT_MIN = 5
FLAT_SHARE = 0.05


def memory_over_time(samples: list[dict], started: float, seconds: float, bound_mib: float | None = None) -> dict:
    """The summed PSS of all the server's processes (``pss_server_mib``) over a class that began at ``started``
    and played ``seconds``: at minute 1, 5, 10 and 20 of a 20-minute class, or at those fractions of a run of
    another length, with its summed RSS; its growth from FILLED_AT_MIN (the same fraction) to the end, per minute
    too; its most; and, against ``bound_mib`` (what the server said it stays under), whether it was kept. The
    figure at a mark is the median of the samples within half a minute of it (the same fraction: a cache's
    entries are replaced by larger or smaller ones, and a diagnosis's builds come and go), at the end of the last
    minute's. "flat": grown by at most FLAT_SHARE after the caches filled. None where no sample has the PSS."""
    have = [s for s in samples if s.get("pss_server_mib") is not None]
    if not have or seconds <= 0:
        return None
    scale = seconds / (MEMORY_MARKS_MIN[-1] * 60)
    half = 30 * scale

    def around(at_s: float, last: bool = False) -> dict:
        near = [s for s in have if (at_s - 2 * half if last else at_s - half) <= s["t"] - started <= at_s + half]
        near = near or [min(have, key=lambda s: abs(s["t"] - started - at_s))]
        middle = sorted(near, key=lambda s: s["pss_server_mib"])[(len(near) - 1) // 2]
        return {"pss_mib": round(statistics.median(s["pss_server_mib"] for s in near), 1),
                "rss_mib": round(statistics.median(s["rss_server_mib"] for s in near), 1),
                "pss_parts_mib": middle.get("pss_parts_mib"), "pss_kinds_mib": middle.get("pss_kinds_mib"),
                "t": statistics.median(s["t"] for s in near)}

    end_s = have[-1]["t"] - started
    at = {m: around(m * 60 * scale) for m in MEMORY_MARKS_MIN[:-1]}
    at[MEMORY_MARKS_MIN[-1]] = around(end_s, last=True)
    marks = [{"minute": round(m * scale, 2), **{k: v for k, v in mark.items() if k != "t"}} for m, mark in at.items()]
    filled = around(FILLED_AT_MIN * 60 * scale)
    growth = at[MEMORY_MARKS_MIN[-1]]["pss_mib"] - filled["pss_mib"]
    minutes = (at[MEMORY_MARKS_MIN[-1]]["t"] - filled["t"]) / 60
    most = max(s["pss_server_mib"] for s in have)
    return {"marks": marks, "filled_at_minute": round(FILLED_AT_MIN * scale, 2),
            "growth_after_fill_mib": round(growth, 1),
            "growth_mib_per_minute": round(growth / minutes, 1) if minutes > 0 else None,
            "flat": growth <= FLAT_SHARE * filled["pss_mib"], "max_pss_mib": round(most, 1),
            "bound_mib": bound_mib, "kept": None if bound_mib is None else most <= bound_mib}


def memory_verdict(summary: dict) -> str:
    """"met" (flat once the caches filled and within the bound the server stated), or what was missed."""
    missed = []
    if summary["bound_mib"] is None:
        missed.append("no bound stated by the server")
    elif not summary["kept"]:
        missed.append(f"{summary['max_pss_mib'] - summary['bound_mib']:.0f} MiB above its bound")
    if not summary["flat"]:
        missed.append(f"grew {summary['growth_after_fill_mib']:.0f} MiB after the caches filled (more than "
                      f"{FLAT_SHARE:.0%})")
    return "met" if not missed else "missed: " + "; ".join(missed)


def memory_summary_text(summary: dict) -> str:
    """"Server PSS (all its processes): 900 MiB at minute 0.5, ...": the summary in a sentence."""
    marks = ", ".join(f"{m['pss_mib']:.0f} MiB at minute {m['minute']:g}" for m in summary["marks"])
    rss = ", ".join(f"{m['rss_mib']:.0f}" for m in summary["marks"])
    rate = summary["growth_mib_per_minute"]
    bound = ("no bound stated by the server" if summary["bound_mib"] is None else
             f"the server's stated bound {summary['bound_mib']:.0f} MiB, "
             + ("kept" if summary["kept"] else "**not kept**"))
    return (f"Server PSS (all its processes summed, shared pages counted once): {marks} (RSS summed: {rss} MiB); "
            f"{summary['growth_after_fill_mib']:+.0f} MiB from minute {summary['filled_at_minute']:g} to the end"
            + (f" ({rate:+.1f} MiB a minute)" if rate is not None else "")
            + f"; at most {summary['max_pss_mib']:.0f} MiB; {bound}. Verdict: {memory_verdict(summary)}.")


def memory_result(report: dict, lessons: list[str], machine: str, date: str, command: str, run: str = "") -> Result:
    """docs/results.md's row of the server's memory over this class: "the server's memory over a 20-minute class
    of 100 (matmul_modern + conv2d_modern + matmul_hopper)", the next run of the same class replacing it."""
    summary = report["memory"]
    what = " + ".join(lessons) if lessons else "the steps " + ", ".join(report["links"])
    target = f"the server's memory over a {report['seconds'] / 60:g}-minute class of {report['students']} ({what})"
    demand = (f"; {report['delivered_moves_per_s']:.1f} of {report['intended_moves_per_s']:.1f} moves/s delivered"
              if report.get("intended_moves_per_s") else "")
    marks = ", ".join(f"{m['pss_mib'] / 1024:.2f} GiB at minute {m['minute']:g}" for m in summary["marks"])
    bound = "no bound stated" if summary["bound_mib"] is None else f"bound {summary['bound_mib'] / 1024:.1f} GiB"
    now = (f"summed PSS {marks} ({summary['growth_after_fill_mib']:+.0f} MiB from minute "
           f"{summary['filled_at_minute']:g}, at most {summary['max_pss_mib'] / 1024:.2f} GiB); {bound}; summed RSS "
           f"{summary['marks'][0]['rss_mib'] / 1024:.2f} → {summary['marks'][-1]['rss_mib'] / 1024:.2f} GiB{demand}")
    verdict = memory_verdict(summary)
    return Result("class", target, "flat once the caches fill, within the bound the server states", now,
                  verdict, machine, date, command, run)


def measuring_lines(report: dict) -> list[str]:
    """The GPU's queue as the Device page said it, the kernels the measuring workers logged and their phases."""
    lines = []
    queue = [s["queue"] for s in report["samples"] if s["queue"]]
    if queue:
        waiting = [int(q.split(", ")[1].split()[0]) for q in queue]
        lines.append(f"GPU queue (Device page, every 2 s, {len(queue)} samples): at most {max(waiting)} waiting, "
                     f"mean {statistics.mean(waiting):.1f}; each student has at most one measurement waiting.")
    if "kernel_runs" in report:
        lines.append(f"Kernel runs in the measuring worker's log: {report['kernel_runs']}, overlapping in time: "
                     f"{report['overlapping_runs']}; {report['measurements_per_s']:.2f} measurements per second, "
                     f"the GPU busy {report['gpu_busy']:.0%} of the time.")
    if report.get("run_phases_ms"):
        lines.append("The measuring worker's phases, mean ms per run: " + ", ".join(
            f"{name.replace('_', ' ')} {ms:.1f}" for name, ms in report["run_phases_ms"].items()) + ".")
    return lines


def stage_lines(report: dict) -> list[str]:
    """Where the students' measurements and the compiles spent their seconds (the scheduler's and the
    compile processes' logs)."""
    lines = []
    if report.get("job_stages"):
        stages = report["job_stages"]
        said = [f"{name.replace('_', ' ')} p50 {stages[name]['p50']:.2f} s, p95 {stages[name]['p95']:.2f} s"
                for name in ("compile", "wait_for_gpu", "on_gpu") if stages[name]["n"]]
        lines.append(f"Students' measurements ({stages['compile']['n']}, the scheduler's job log): " + "; ".join(said)
                     + f". Background jobs and full re-measurements: {stages['others']['n']}, "
                     f"{stages['others']['gpu_s']:.1f} s on the GPU.")
    if report.get("compile_stages", {}).get("cpu_s", {}).get("n"):
        compiles = report["compile_stages"]
        said = [f"{COMPILE_STAGE_WORDS[name]} p50 {stage['p50']:.2f} s, p95 {stage['p95']:.2f} s"
                for name, stage in compiles["stages"].items() if stage["n"]]
        cubins, builds = compiles["cubins"], compiles["builds"]
        lines.append(
            f"Compiles ({compiles['cpu_s']['n']}, the compile processes' log): " + "; ".join(said)
            + f". CPU per compile p50 {compiles['cpu_s']['p50']:.2f} s, p95 {compiles['cpu_s']['p95']:.2f} s, "
            f"{compiles['cpu_s_total']:.0f} s in all. Binaries: {cubins.get('compiled', 0)} compiled, "
            f"{cubins.get('read', 0)} read from the disk, {cubins.get('waited', 0)} waited for while another "
            f"process compiled them. Builds: {builds.get('kept', 0)} the page's, {builds.get('here', 0)} made "
            "in the compile process.")
    return lines


def server_lines(report: dict) -> list[str]:
    """What the Device page said last, a page run's CPU, and which parts of the server limited the class."""
    lines = []
    if report.get("device_page_gpus"):
        lines.append(f"The Device page's last reading: {report['device_page_gpus']}")
    page_cpu = [s["page_cpu"] for s in report["samples"] if s.get("page_cpu") not in (None, "—")]
    if page_cpu:
        lines.append(f"Server CPU per page run (Device page, 95th percentile of the latest runs): {page_cpu[-1]} "
                     "at the end.")
    return lines


def limit_lines(report: dict) -> list[str]:
    lines = []
    if report.get("saturation"):
        lines.append(f"Server parts (a sample every {SAMPLE_EVERY_S:g} s): "
                     + "; ".join(part_text(part, p) for part, p in report["saturation"].items()) + ".")
    if "limited_by" in report:
        lines.append(f"Limited by: {report['limited_by']}.")
    return lines


def error_lines(report: dict) -> list[str]:
    """Every error a student met, with the link of the setting that caused it (the same error of the same
    setting once, with how many times it came), then the moves that showed no code in time."""
    lines = []
    if report["errors"]:
        counted = collections.Counter((e["error"], e["link"]) for e in report["errors"])
        lines.append(f"Errors ({len(report['errors'])}; {len(counted)} of a setting each), with the link of the "
                     "setting that caused each:")
        lines += [f"- {error}{f' ({times}×)' if times > 1 else ''}: {link}" for (error, link), times in
                  sorted(counted.items(), key=lambda item: (-item[1], item[0]))]
    if report.get("lost_moves"):
        lines.append(f"Moves that showed no code in time: {len(report['lost_moves'])} (their settings: the JSON "
                     "report's lost_moves).")
        for move in report["lost_moves"][:3]:  # what the page sent after the move: a run of the page, or not
            runs = [m for m in move["messages"] if "new_session" in m or "script_finished" in m or "alert" in m]
            lines.append(f"- {move['template']} {move['knobs']}: " + ", ".join(runs[:16]) + ".")
    return lines


def describe(report: dict, goals: dict[str, float] | None = None) -> str:
    """The report in words, for the terminal and the docs."""
    opening = (f"All {report['students']} students opened `{report['same_link']}` at the same moment, then moved "
               "knobs. " if report.get("same_link") else "")
    generator = generator_text(report)
    limited = report.get("generator_limited")
    lines = [
        opening +
        f"{report['students']} students, {report['seconds']:.0f} s, a move every ~{report['think_time_s']:g} s each: "
        f"{report['moves']} moves ({report['refused']} refused by the app with a reason), "
        f"{len(report['errors'])} errors.",
        *(["", generator[0]] if limited else []),
        "",
        *([demand_text(report), ""] if "intended_moves_per_s" in report else []),
        *timings_rows(report),
        "",
        *([*goal_rows(report, goals), ""] if goals else []),
        *slowest_lines(report), *([memory_summary_text(report["memory"])] if report.get("memory") else []),
        *memory_lines(report["samples"]), *measuring_lines(report), *stage_lines(report),
        *server_lines(report), *(generator[1:] if limited else generator), *limit_lines(report), *error_lines(report),
    ]
    return "\n".join(lines)
