"""What a class's server does meanwhile: its processes found and taken whole (the ``explorer serve``
launcher above the process that listens, and everything below it: the proxy, the measuring service,
each app process, their pools), each part's cores and the server's memory sampled every 2 s, the
Device page read by an observer session (the GPU queue, a page run's CPU), the load generator's own
cores, and the share of samples in which each part was at 90% of what it can use."""
from __future__ import annotations

import collections
import contextlib
import os
import re
import statistics
import threading
import time
from pathlib import Path
from urllib.parse import urlparse

import psutil
from classroom_logs import busy_between
from classroom_page import Page, element_of

PAGE_CPU = "Page run CPU (p95)"  # the Device page's figure of what a page run costs the server
GPUS_CAPTION = "GPUs: "  # the Device page's line of measurements per GPU, on a server of several
MEMORY_CAPTION = "Memory: "  # the Device page's line of the memory its server stays under
SAMPLE_EVERY_S = 2.0  # the server's parts and each load generator process: a CPU sample this often
SATURATED = 0.9  # of what a part can use (cores, or the GPU's time): a sample at this much is saturated
LIMIT_SHARE = 0.25  # of a part's samples saturated make it a limit (a load generator process: the run's)


def is_launcher(cmdline: list[str]) -> bool:
    """Whether a process with this command line is ``explorer serve``'s launcher (``python -m explorer
    serve``, ``tvm-explorer serve``): the top of the server, above all its processes."""
    return "explorer serve" in " ".join(cmdline)


def role_of(cmdline: list[str]) -> str:
    """The part of the server that a process with this command line is: "app" (a Streamlit process,
    ``python -m app.launch run`` or ``streamlit run``), "proxy" (caddy), "measuring" (the measuring
    service), or "workers" (the others: the launcher, the pools' processes, the measuring worker)."""
    names = [os.path.basename(part) for part in cmdline]
    if "explorer.server.service" in cmdline:  # python -m explorer.server.service
        return "measuring"
    if names and names[0] in ("caddy", "caddy.exe"):
        return "proxy"
    if "app.launch" in cmdline or any(name in ("streamlit", "streamlit.exe") for name in names):
        return "app"
    return "workers"


def worker_kind(process) -> str:
    """What a worker process does, from the name the server gives it (explorer.processes: "build
    worker", "compile worker", "diagnose worker", "measure worker"), or "other" (the launcher, a
    process not named)."""
    try:
        name = process.name()
    except psutil.Error:
        return "other"
    return name.removesuffix(" worker") if name.endswith(" worker") else "other"


def _cmdline(process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:  # gone, or not ours to read
        return []


def server_process(url: str, pid: int | None = None):
    """The server's top process, whose tree is the whole server: the process listening on ``url``'s
    port (or ``pid``'s), or its nearest ancestor that is ``explorer serve``'s launcher (of the proxy,
    the measuring service and the app processes). When ``pid`` is a wrapper (``timeout``, a shell,
    a test), the launcher below it, else the Streamlit process below it."""
    if pid is None:
        port = urlparse(url).port or (443 if urlparse(url).scheme == "https" else 80)
        pid = next((c.pid for c in psutil.net_connections("tcp")
                    if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid), None)
        if pid is None:
            return None
    process = psutil.Process(pid)
    for candidate in [process, *process.parents()]:
        if is_launcher(_cmdline(candidate)):
            return candidate
    if role_of(_cmdline(process)) != "workers":  # the server itself: a Streamlit process, or the proxy
        return process
    below = process.children(recursive=True)
    return (next((c for c in below if is_launcher(_cmdline(c))), None)
            or next((c for c in below if role_of(_cmdline(c)) == "app"), process))


def server_tree(root) -> list[tuple]:
    """(process, role, parent's pid) of ``root`` and every process below it, by ``role_of``."""
    members = [root, *root.children(recursive=True)]
    parents, roles = {}, {}
    for member in members:
        try:
            parents[member.pid] = member.ppid()
        except psutil.Error:
            parents[member.pid] = None
        roles[member.pid] = role_of(_cmdline(member))
    tree = []
    for member in members:
        role = roles[member.pid]
        if role != "workers" and roles.get(parents[member.pid]) == role:
            role = "workers"  # a forked child runs under its parent's command line: one of its workers
        tree.append((member, role, parents[member.pid]))
    return tree


def cpu_sample(tree: list[tuple], previous: dict) -> dict | None:
    """Cores each part of the server used since ``previous`` (its last reading: "t", and "cpu":
    (pid, start time) → CPU seconds; updated): "app", one number per app process (each its own
    part: one Python process's GIL); "workers" (all the other processes, summed); "proxy" and
    "measuring" where the server has them. None on the first reading."""
    now, cpu, queued = time.time(), {}, {}
    since = previous.get("t")
    # kinds: the workers' cores by kind; queued: by kind, the seconds per second its processes were
    # ready to run but waited for a core (the kernel's run-queue time, /proc/PID/schedstat)
    used: dict = {"app": [], "workers": 0.0, "kinds": collections.Counter(), "queued": collections.Counter()}
    for member, role, _ in tree:
        try:
            key = (member.pid, member.create_time())
            times = member.cpu_times()
        except psutil.Error:  # gone meanwhile (a pool restarts its processes)
            continue
        cpu[key] = times.user + times.system
        if role == "workers":
            queued[key] = run_queue_s(member.pid)
        if role in ("proxy", "measuring"):
            used.setdefault(role, 0.0)
        if since is None or now <= since:
            continue
        if key in previous["cpu"]:
            seconds = cpu[key] - previous["cpu"][key]
        elif key[1] >= since:  # started since the last reading: all of its CPU is this interval's
            seconds = cpu[key]
        elif role == "app":  # an app process not seen before: no reading of its own yet
            continue
        else:
            seconds = 0.0
        rate = seconds / (now - since)
        if role == "app":
            used["app"].append(rate)
        else:
            used[role] += rate
        if role == "workers":
            used["kinds"][worker_kind(member)] += rate
            if queued[key] is not None and previous.get("queued", {}).get(key) is not None:
                used["queued"][worker_kind(member)] += (queued[key] - previous["queued"][key]) / (now - since)
    previous["t"], previous["cpu"], previous["queued"] = now, cpu, queued
    used["kinds"], used["queued"] = dict(used["kinds"]), dict(used["queued"])
    return used if since is not None else None


def run_queue_s(pid: int) -> float | None:
    """Seconds the process has waited, ready to run, for a core (Linux's schedstat); None elsewhere."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _memory(process) -> tuple[int, int | None]:
    """A process's resident and proportional set sizes in bytes (PSS: each page it shares counted as its
    share, so that the processes' PSS sum to what they hold together; Linux's smaps_rollup, None where it
    cannot be read); (0, 0) when the process is gone (a pool restarts its processes)."""
    try:
        full = process.memory_full_info()
        return full.rss, full.pss
    except (psutil.Error, AttributeError):  # not ours to read, gone, or a platform without PSS
        try:
            return process.memory_info().rss, None
        except psutil.Error:
            return 0, 0


def memory_sample(tree: list[tuple]) -> dict:
    """The server's memory (MiB): the resident memory of its app processes ("rss_mib"), with the processes
    below them ("rss_with_workers_mib"), and of all its processes ("rss_server_mib"), by part and by worker
    kind; and the proportional set size of all its processes ("pss_server_mib", a page shared by N
    processes counted 1/N in each: the sum is what the server holds, which summed RSS overstates), by part
    and kind. PSS is None where a process's could not be read."""
    if not tree:
        return {"rss_mib": None, "rss_with_workers_mib": None, "rss_server_mib": None, "rss_parts_mib": None,
                "rss_kinds_mib": None, "pss_server_mib": None, "pss_parts_mib": None, "pss_kinds_mib": None}
    memory = {member.pid: _memory(member) for member, _, _ in tree}
    rss = {pid: both[0] for pid, both in memory.items()}
    pss = {pid: both[1] for pid, both in memory.items()}
    parents = {member.pid: parent for member, _, parent in tree}
    apps = {member.pid for member, role, _ in tree if role == "app"}

    def below_an_app(pid):
        while pid in parents:
            if pid in apps:
                return True
            pid = parents[pid]
        return False

    def by_part_and_kind(size: dict) -> tuple[dict, dict]:
        parts = {role: sum(size[m.pid] for m, r, _ in tree if r == role) / 2**20
                 for role in sorted({r for _, r, _ in tree})}
        kinds = dict(sum((collections.Counter({worker_kind(m): size[m.pid] / 2**20}) for m, r, _ in tree
                          if r == "workers"), collections.Counter()))
        return parts, kinds

    rss_parts, rss_kinds = by_part_and_kind(rss)
    sample = {"rss_mib": sum(rss[pid] for pid in apps) / 2**20,
              "rss_with_workers_mib": sum(rss[pid] for pid in rss if below_an_app(pid)) / 2**20,
              "rss_server_mib": sum(rss.values()) / 2**20, "rss_parts_mib": rss_parts, "rss_kinds_mib": rss_kinds,
              "pss_server_mib": None, "pss_parts_mib": None, "pss_kinds_mib": None}
    if all(size is not None for size in pss.values()):
        pss_parts, pss_kinds = by_part_and_kind(pss)
        sample.update(pss_server_mib=sum(pss.values()) / 2**20, pss_parts_mib=pss_parts, pss_kinds_mib=pss_kinds)
    return sample


def sample_server(root, latest: dict, samples: list, stop: threading.Event, every: float = SAMPLE_EVERY_S) -> None:
    """Every ``every`` s until ``stop`` (and once more then): the cores of each part of the server
    (the tree under ``root``, again each time: pools restart their processes) and its memory, with
    the Device page's reading taken since the last sample (``latest["reading"]``, taken out)."""
    previous: dict = {}
    tree: list = []
    if root is not None:
        with contextlib.suppress(psutil.Error):
            cpu_sample(server_tree(root), previous)
    while True:
        stopping = stop.wait(every)
        since, tree, cores = previous.get("t"), [], None
        if root is not None:
            try:
                tree = server_tree(root)
                cores = cpu_sample(tree, previous)
            except psutil.Error:  # the server is gone
                tree = []
        queue, page_cpu = latest.pop("reading", (None, None))
        samples.append({"t": time.time(), "since": since, "queue": queue, "page_cpu": page_cpu,
                        **memory_sample(tree), "cores": cores,
                        "processes": dict(collections.Counter(role for _, role, _ in tree))})
        if stopping:
            return


def observe(url: str, end: float, samples: list, server_pid: int | None, every: float = SAMPLE_EVERY_S,
            gpus_seen: list | None = None, said: dict | None = None) -> None:
    """Until ``end``: the Device page's GPU queue and page-run CPU (and, into ``gpus_seen``, its line
    of measurements per GPU), read again ``every`` s after each answer, and, every ``every`` s on its
    own thread (a slow page does not stretch the samples), the cores and memory of the server's
    processes (``sample_server``)."""
    root = server_process(url, server_pid)
    gpus_seen = [] if gpus_seen is None else gpus_seen
    latest: dict = {} if said is None else said  # the Device page's memory bound ("memory_bound_mib") too
    stop = threading.Event()
    sampler = threading.Thread(target=sample_server, args=(root, latest, samples, stop, every))
    sampler.start()
    try:
        page = Page(url, timeout=30)
    except BaseException:
        stop.set()
        sampler.join()
        raise
    try:
        page.rerun()
        for msg in page.read(time.time() + 30):
            if msg is not None and msg.WhichOneof("type") == "script_finished":
                break
        device = next((h for name, h in page.pages.items() if "device" in name.lower()), "")
        while time.time() < end:
            queue = page_cpu = None
            page.rerun(page_hash=device)
            for msg in page.read(time.time() + 5):
                kind, element = element_of(msg)
                if kind == "metric" and element.metric.label == "GPU queue":
                    queue = element.metric.body
                elif kind == "metric" and element.metric.label == PAGE_CPU:
                    page_cpu = element.metric.body
                elif kind == "markdown" and element.markdown.body.startswith(GPUS_CAPTION):
                    gpus_seen.append(element.markdown.body)  # the page's count per GPU (a server of several)
                elif kind == "markdown" and element.markdown.body.startswith(MEMORY_CAPTION):
                    latest["memory_bound_mib"] = memory_bound_mib(element.markdown.body)
                if queue is not None and page_cpu is not None:
                    break
            latest["reading"] = (queue, page_cpu)  # one assignment: the sampler takes both or neither
            time.sleep(max(0.0, min(every, end - time.time())))
    finally:
        stop.set()
        sampler.join()
        page.close()


def memory_bound_mib(sentence: str) -> float | None:
    """The MiB the Device page's memory line says the server stays under ("... under 31.4 GiB ..."), or None."""
    found = re.search(r"under ([0-9.]+) (GiB|MiB)", sentence)
    if found is None:
        return None
    return float(found.group(1)) * (1024 if found.group(2) == "GiB" else 1)


PARTS = ("app", "measuring", "proxy", "workers", "gpu")  # in the order the report names them


def saturation(samples: list[dict], machine_cores: int, runs: list[tuple[int, int]] | None = None,
               gpus: int = 1) -> dict:
    """For each part of the server, from its samples: what it can use ("capacity", cores; the GPU: its
    time), its mean use, and the "share" of its samples at SATURATED of that or more. What a part can use:
    an app process, one core (one Python process's GIL; each app process's sample counts on its own,
    "samples" counts those pairs); the measuring service, one core (its own GIL); the proxy, the machine's
    cores (Go's threads); the workers, the machine's cores less the app processes' and the measuring
    service's; the GPU (from ``runs``, the kernel runs in ns), all of each sample's time."""
    readings = collections.defaultdict(list)  # part → [(used, capacity)]
    processes: dict = collections.defaultdict(int)  # part → the most processes of it in one sample
    for sample in samples:
        cores = sample.get("cores")
        if not cores:
            continue
        apps = cores.get("app", [])
        readings["app"] += [(used, 1.0) for used in apps]
        processes["app"] = max(processes["app"], len(apps))
        for part, capacity in (("measuring", 1.0), ("proxy", float(machine_cores))):
            if part in cores:
                readings[part].append((cores[part], capacity))
                processes[part] = 1
        others = len(apps) + ("measuring" in cores)
        readings["workers"].append((cores.get("workers", 0.0), max(1.0, float(machine_cores - others))))
        if runs is not None and sample.get("since") is not None:
            readings["gpu"].append((busy_between(runs, sample["since"], sample["t"], gpus), 1.0))
    parts = {}
    for part in PARTS:
        pairs = readings.get(part)
        if not pairs:
            continue
        parts[part] = {
            "samples": len(pairs), "processes": processes.get(part), "mean": statistics.mean(u for u, _ in pairs),
            "capacity": collections.Counter(c for _, c in pairs).most_common(1)[0][0],
            "share": sum(used >= SATURATED * capacity for used, capacity in pairs) / len(pairs)}
    return parts


def limits(parts: dict) -> list[str]:
    """The parts of ``saturation``'s answer saturated in LIMIT_SHARE of their samples or more."""
    return [part for part in PARTS if part in parts and parts[part]["share"] >= LIMIT_SHARE]


@contextlib.contextmanager
def own_cpu(every: float = SAMPLE_EVERY_S):
    """This process's cores (CPU seconds over wall seconds), a sample every ``every`` s until the
    block ends, into the list it yields: what the load generator itself used."""
    cores: list[float] = []
    stop = threading.Event()

    def sample():
        me = psutil.Process()
        before = (time.monotonic(), sum(me.cpu_times()[:2]))
        while not stop.wait(every):
            now = (time.monotonic(), sum(me.cpu_times()[:2]))
            if now[0] > before[0]:
                cores.append((now[1] - before[1]) / (now[0] - before[0]))
            before = now

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield cores
    finally:
        stop.set()
        thread.join()


def generator_load(plays: list[dict]) -> dict:
    """Per load generator process (``plays``: what each ``play`` said of itself), its mean cores and the
    share of its samples at SATURATED of a core; the run is generator-limited when any process was there
    in LIMIT_SHARE of its samples or more (its students' moves and readings waited for its GIL)."""
    generator = [{"pid": p["pid"], "samples": len(p["cores"]),
                  "mean_cores": statistics.mean(p["cores"]) if p["cores"] else None,
                  "busy_share": sum(c >= SATURATED for c in p["cores"]) / len(p["cores"]) if p["cores"] else 0.0,
                  "cores": p["cores"]} for p in plays]
    return {"generator": generator, "generator_limited": any(g["busy_share"] >= LIMIT_SHARE for g in generator)}
