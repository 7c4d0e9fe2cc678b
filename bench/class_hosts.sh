#!/usr/bin/env bash
# A class's builds and compiles on worker hosts through Dask (serve --workers; docs/class-server-hosts.md), on
# one GPU machine, each class against a fresh server (bench/classroom_gpu.sh's class phase), the worker hosts
# being sets of this machine's cores (taskset), each set one `python -m explorer worker`. From the repository
# root, with the project importable:
#
#   bash bench/class_hosts.sh same RESULTS    # the one-GPU H200 (16 cores): STUDENTS (100) on the modern lessons
#                                             # for LONG_S (180) with the server's own build and compile processes,
#                                             # then the same class through Dask, one worker process per core, and
#                                             # the engine's overhead per call (bench/engine_overhead.py)
#   bash bench/class_hosts.sh scale RESULTS   # a machine of 64 cores or more: the server on SERVER_CORES (0-23) with
#                                             # APP_PROCESSES (6), the students' load on LOAD_CORES (56-63), STUDENTS
#                                             # (200) moving every THINK_S (2) s, its builds and compiles on one set of
#                                             # worker cores (24-39), then on two (SETS: 24-39 40-55): the moves per
#                                             # second each sustains (the target: two sets >= 1.8 x one)
#
# RESULTS gets each class's folder (classroom_gpu.sh's files), the workers' logs and hosts.md, the table.
set -u
mode=${1:?same or scale}
results=${2:?a folder for the results}
mkdir -p "$results"
scheduler=tcp://127.0.0.1:${SCHEDULER_PORT:-8786}
long=${LONG_S:-180}
started=()
stop_cluster() {
  for pid in "${started[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${started[@]}"; do wait "$pid" 2>/dev/null; done
  started=()
}
trap stop_cluster EXIT

# A scheduler on this machine and one worker host per core set: "$@" are the sets (taskset -c lists).
start_cluster() {
  local folder=$1; shift
  mkdir -p "$folder"
  ${SERVER_CORES:+taskset -c "$SERVER_CORES"} python -m distributed.cli.dask_scheduler --host 127.0.0.1 \
    --port "${scheduler##*:}" --no-dashboard >"$folder/scheduler.log" 2>&1 &
  started+=($!)
  sleep 3
  local n=0
  for cores in "$@"; do
    n=$((n + 1))
    # The compile log the class phase reads (classroom_gpu.sh's name for it), written by the hosts' processes.
    EXPLORER_COMPILE_LOG=$folder/compiles-class.log taskset -c "$cores" python -m explorer worker "$scheduler" \
      --processes "$(taskset -c "$cores" nproc)" -- --name "host-$n" >"$folder/worker-$n.log" 2>&1 &
    started+=($!)
  done
  python - "$scheduler" "$#" <<'PY'
import sys, distributed
client = distributed.Client(sys.argv[1], timeout=60)
hosts = int(sys.argv[2])
client.wait_for_workers(1, timeout=120)
import time; deadline = time.time() + 120
while len({w["name"].rsplit("-", 1)[0] for w in client.scheduler_info(n_workers=-1)["workers"].values()}) < hosts \
        and time.time() < deadline:
    time.sleep(1)
print(f"{len(client.scheduler_info(n_workers=-1)['workers'])} worker processes joined", flush=True)
client.close()
PY
}

class_run() {  # label, then the environment of classroom_gpu.sh's class phase
  local label=$1; shift
  env "$@" LONG_S=$long TAG="$label" bash bench/classroom_gpu.sh class "$results/$label"
}

if [ "$mode" = same ]; then
  export STUDENTS=${STUDENTS:-100}
  python bench/engine_overhead.py --workers 4 --json "$results/engine-overhead.json" | tee "$results/engine-overhead.md"
  class_run in-process
  start_cluster "$results/through-dask" "0-$(($(nproc) - 1))"
  class_run through-dask WORKERS="$scheduler"
  stop_cluster
  runs="in-process through-dask"
else
  export STUDENTS=${STUDENTS:-200} SERVER_CORES=${SERVER_CORES:-0-23} APP_PROCESSES=${APP_PROCESSES:-6} \
    LOAD_CORES=${LOAD_CORES:-56-63}
  sets=(${SETS:-24-39 40-55})
  start_cluster "$results/one-set" "${sets[0]}"
  class_run one-set WORKERS="$scheduler" THINK_S="${THINK_S:-2}"
  stop_cluster
  start_cluster "$results/two-sets" "${sets[@]}"
  class_run two-sets WORKERS="$scheduler" THINK_S="${THINK_S:-2}"
  stop_cluster
  runs="one-set two-sets"
fi

python - "$results" $runs <<'PY' | tee "$results/hosts.md"
import glob, json, sys
folder, runs = sys.argv[1], sys.argv[2:]
rows = {}
for run in runs:
    [path] = glob.glob(f"{folder}/{run}/class-*.json")
    rows[run] = json.load(open(path))
print("| run | students | moves/s intended | moves/s delivered | knob → code p95 s | knob → latency p95 s |")
print("|---|---|---|---|---|---|")
figure = lambda value, digits: "—" if value is None else f"{value:.{digits}f}"  # noqa: E731
for run, r in rows.items():
    print(f"| {run} | {r.get('students')} | {figure(r['intended_moves_per_s'], 1)} | "
          f"{figure(r['delivered_moves_per_s'], 1)} | {figure(r['knob_to_code']['p95'], 2)} | "
          f"{figure(r['knob_to_latency']['p95'], 2)} |")
first, last = (rows[run]["delivered_moves_per_s"] for run in runs)
print(f"\n{runs[1]} / {runs[0]}: " + (f"{last / first:.2f} x the moves per second" if first else "no moves in the first"))
PY
