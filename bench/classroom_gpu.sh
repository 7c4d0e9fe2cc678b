#!/usr/bin/env bash
# The classroom targets on a GPU machine, each against the server as a class meets it, and
# each report written to bench/results/runs/classroom-<label>.md and each goal's row to docs/results.md. From the repository
# root, with the project importable (installed, or on PYTHONPATH):
#
#   bash bench/classroom_gpu.sh modern RESULTS   # fresh server: the teacher's first page, 30 students on the
#                                                 # modern lessons for 5 min (with a py-spy profile), then
#                                                 # 30 students opening one link at once, then one student
#   bash bench/classroom_gpu.sh large RESULTS    # fresh server: STUDENTS (100) on the 2017 depthwise lesson
#   bash bench/classroom_gpu.sh class RESULTS    # fresh server: STUDENTS (100) on the modern lessons and Hopper's
#                                                 # for 5 min, students connecting the moment it answers, with a
#                                                 # py-spy profile of one app process and one build, compile and
#                                                 # diagnose worker each mid-run, and the row of the server's
#                                                 # memory (summed PSS) where LONG_S is 1200 or more
#   bash bench/classroom_gpu.sh first RESULTS    # fresh server: the teacher's first page only, with every
#                                                 # process of the server sampled by py-spy from its start
#   bash bench/classroom_gpu.sh knee RESULTS     # one fresh server: classes of SIZES students (30 50 100 150),
#                                                 # LONG_S each, one after the other, on FAMILY (modern:
#                                                 # matmul_modern + conv2d_modern + matmul_hopper; depthwise:
#                                                 # depthwise_blog; new: reduction + rowwise + attention), then
#                                                 # bench/knee.py's table (section knee-FAMILY); WARM_S=S
#                                                 # plays S seconds of 30 students first, not counted
#   bash bench/classroom_gpu.sh unprepared RESULTS  # empty caches, fresh server: STUDENTS (100) on FAMILY for
#                                                 # LONG_S (section class-STUDENTS-FAMILY-unprepared)
#   bash bench/classroom_gpu.sh prepare RESULTS   # empty caches, then `python -m explorer prepare` of FAMILY's
#                                                 # lessons into them (its log and time: RESULTS/prepare-FAMILY.*)
#   bash bench/classroom_gpu.sh prepared RESULTS  # the prepare's caches (prepared here first where the prepare
#                                                 # phase has not, or goes on where it stopped), then the same
#                                                 # class as unprepared on a fresh server (section ...-prepared);
#                                                 # within EXPLORER_MEASURE_MAX_AGE_S (30 min) of the prepare
#
# FRESH_CACHES=1 (unprepared, prepare: always) gives the run empty caches of its own under RESULTS (the builds,
# binaries, libraries and measurements a server keeps on disk): what a machine just started has.
# RESULTS gets the JSON reports, the servers' logs, the measuring worker's log and the profile.
# APP_PROCESSES=N starts the server with N app processes behind its proxy (--app-processes N);
# EXPLORER_GPUS=N measures on the first N GPUs (serve's default: all it sees); TAG=WORD ends the class
# row's label (e.g. TAG=1-gpu and TAG=2-gpus for the same class on one GPU and on two).
# KILL_GPU=I (class phase): every KILL_EVERY s (60) from a minute in, kill the measuring worker pinned to GPU I
# (the process whose CUDA_VISIBLE_DEVICES is that GPU), as a failing GPU would; RESULTS/kills.txt lists each kill.
# WORKERS=tcp://HOST:PORT: the server's builds and compiles on that Dask cluster's worker hosts (serve --workers;
# bench/class_hosts.sh starts the scheduler and the workers); SERVER_CORES=LIST pins the server to those cores
# (taskset -c), so that the worker hosts' cores are the only others it has; LOAD_CORES=LIST the students' load
# generator.
# THINK_S=S (class phase): the students' think time (5 s).
# INTENDED_REPLY=S: the seconds a move is meant to wait for its code (the class's intended demand;
# bench/classroom.py's default otherwise). A run whose load generator was saturated is no verdict:
# it is named on stderr and in RESULTS/generator-limited.txt (classroom.py exits with status 3).
set -u
phase=${1:?modern, class, large, knee, unprepared, prepare, prepared or first}
results=${2:?a folder for the results}
mkdir -p "$results"
family=${FAMILY:-modern}
case "$family" in  # each lesson family as bench/classroom.py plays it (none: the depthwise tutorial's links)
  modern) lessons=(--lesson matmul_modern --lesson conv2d_modern --lesson matmul_hopper) ;;
  depthwise) lessons=() ;;
  new) lessons=(--lesson reduction --lesson rowwise --lesson attention) ;;
  *) echo "FAMILY is modern, depthwise or new, not '$family'" >&2; exit 2 ;;
esac
if [ "${FRESH_CACHES:-0}" = 1 ] || [ "$phase" = unprepared ] || [ "$phase" = prepare ] || [ "$phase" = prepared ]; then
  caches=$results/caches-$family-$phase
  [ "$phase" = prepare ] || [ "$phase" = prepared ] && caches=$results/caches-$family-prepared
  [ "$phase" = prepared ] || rm -rf "$caches"  # the prepared class reads what the prepare phase made
  mkdir -p "$caches" && chmod 700 "$caches"
  export EXPLORER_BUILD_DIR=$caches/builds EXPLORER_CUDA_CACHE=$caches/cuda \
         EXPLORER_LIBRARY_DIR=$caches/libraries EXPLORER_MEASURE_DIR=$caches/measurements
fi
port=8501
long=${LONG_S:-300}  # the long runs' seconds (shorter only to try the script out)
url=http://127.0.0.1:$port
export EXPLORER_RUN_LOG=$results/kernel-runs-$phase.log  # the measuring worker logs each kernel run here
export EXPLORER_JOB_LOG=$results/jobs-$phase.log  # the scheduler logs each measurement's stages here
export EXPLORER_COMPILE_LOG=$results/compiles-$phase.log  # the compile processes log each compile's stages here
# The machine each table names (a table's label does not): the GPU and the cores, unless MACHINE says otherwise.
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
machine=${MACHINE:-"${gpu_name:-$(hostname)}, $(nproc) cores"}
bench() {
  ${LOAD_CORES:+taskset -c "$LOAD_CORES"} python bench/classroom.py --url "$url" --run-log "$EXPLORER_RUN_LOG" --job-log "$EXPLORER_JOB_LOG" \
    --compile-log "$EXPLORER_COMPILE_LOG" --machine "$machine" \
    ${INTENDED_REPLY:+--intended-reply "$INTENDED_REPLY"} "$@"
  local status=$?
  if [ $status -eq 3 ]; then
    echo "Not a verdict (the load generator was saturated): $*" | tee -a "$results/generator-limited.txt" >&2
  fi
  return $status
}

if [ "$phase" = prepare ] || [ "$phase" = prepared ]; then  # the teacher prepares the lessons before the class
  prepare_lessons=()
  [ ${#lessons[@]} -eq 0 ] && prepare_lessons=(--lesson depthwise_blog) || prepare_lessons=("${lessons[@]}")
  start=$SECONDS
  python -m explorer prepare "${prepare_lessons[@]}" >"$results/$phase-$family.log" 2>&1 || exit 1
  echo "$phase: $((SECONDS - start)) s ($(tail -1 "$results/$phase-$family.log"))" | tee "$results/$phase-$family.txt"
  [ "$phase" = prepare ] && exit 0
fi
${SERVER_CORES:+taskset -c "$SERVER_CORES"} python -m explorer serve --port $port --address 127.0.0.1 \
  ${APP_PROCESSES:+--app-processes "$APP_PROCESSES"} ${WORKERS:+--workers "$WORKERS"} >"$results/server-$phase.log" 2>&1 &
launcher=$!
trap 'kill $launcher 2>/dev/null; wait $launcher 2>/dev/null' EXIT
if [ "$phase" = first ] && command -v py-spy >/dev/null; then  # every thread of every process, waiting or not
  py-spy record --pid $launcher --subprocesses --idle --threads --rate 50 --duration 40 --nonblocking \
    --format raw --output "$results/py-spy-first-page.txt" >"$results/py-spy-first.log" 2>&1 &
fi

if [ "$phase" = first ]; then
  bench --wait-for-server 120 --students 1 --seconds 20 --links dw-blog-final-96 \
        --goal open_to_code.p50=2 --goal open_to_latency.p50=5 --json "$results/first-page.json" --write first-page
  sleep 25  # the rest of the warm-up, into the server's log and the profile
elif [ "$phase" = modern ]; then
  # The teacher's first page, the moment the fresh server answers.
  bench --wait-for-server 120 --students 1 --seconds 20 --links dw-blog-final-96 \
        --goal open_to_code.p50=2 --goal open_to_latency.p50=5 --json "$results/first-page.json" --write first-page
  server=$(pgrep -f "app.launch run|streamlit run" | head -1)
  if command -v py-spy >/dev/null; then  # the (first) app process under 30 students, a minute mid-run
    (sleep $((long / 3)); py-spy record --pid "$server" --duration $((long / 5)) --rate 100 --gil --nonblocking --format raw \
       --output "$results/py-spy-30-modern.txt" >"$results/py-spy.log" 2>&1) &
  fi
  bench --students 30 --seconds $long --think-time 5 --lesson matmul_modern --lesson conv2d_modern --processes 3 \
        --goal knob_to_code.p95=1 --goal knob_to_latency.p95=3 --json "$results/modern-30.json" --write modern-30
  bench --students 30 --seconds 25 --same-link --links modern-tensorcore-fp16-4096 --processes 3 \
        --goal open_to_code.p95=2 --goal open_to_latency.p95=3 --json "$results/same-link-30.json" \
        --write same-link-30
  bench --students 1 --seconds 45 --think-time 3 --revisit-every 3 \
        --goal knob_to_latency_new.p50=0.5 --goal knob_to_latency_revisit.p50=0.05 \
        --json "$results/one-student.json" --write one-student
elif [ "$phase" = class ]; then
  students=${STUDENTS:-100}
  if [ -n "${KILL_GPU:-}" ]; then  # a GPU's measuring worker dies mid-run: its jobs must finish on the other GPU
    (sleep 60; end=$((SECONDS + long - 60))
     while [ $SECONDS -lt $end ]; do
       for pid in $(pgrep -f popen_worker); do
         if tr '\0' '\n' </proc/$pid/environ 2>/dev/null | grep -qx "CUDA_VISIBLE_DEVICES=$KILL_GPU"; then
           kill -9 "$pid" && echo "$(date +%s.%N) killed $pid (GPU $KILL_GPU)" >>"$results/kills.txt"
         fi
       done
       sleep "${KILL_EVERY:-60}"
     done) &
  fi
  if command -v py-spy >/dev/null; then  # one app process, a minute in the middle of the run
    (sleep $((long / 2)); app=$(pgrep -f "app.launch run" | head -1)
     py-spy record --pid "$app" --duration 60 --rate 50 --nonblocking --format raw \
       --output "$results/py-spy-class-app.txt" >"$results/py-spy-class.log" 2>&1) &
    for kind in build compile diagnose; do  # one worker of each kind (named by explorer/processes.py), the same minute
      (sleep $((long / 2)); worker=$(pgrep -x "$kind worker" | head -1)
       [ -n "$worker" ] && py-spy record --pid "$worker" --duration 60 --rate 50 --nonblocking --format raw \
         --output "$results/py-spy-class-$kind.txt" >"$results/py-spy-class-$kind.log" 2>&1) &
    done
  fi
  bench --wait-for-server 180 --students "$students" --seconds $long --think-time "${THINK_S:-5}" --processes $((students / 10)) \
        --lesson matmul_modern --lesson conv2d_modern --lesson matmul_hopper \
        --goal knob_to_code.p95=1 --goal knob_to_latency.p95=3 --json "$results/class-$students.json" $([ "$long" -ge 1200 ] && echo --memory) \
        --write "class-$students-modern${TAG:+-$TAG}"
elif [ "$phase" = unprepared ] || [ "$phase" = prepared ]; then
  students=${STUDENTS:-100}
  bench --wait-for-server 180 --students "$students" --seconds $long --think-time 5 \
        --processes $(((students + 9) / 10)) "${lessons[@]}" \
        --goal knob_to_code.p95=1 --goal knob_to_latency.p95=3 --json "$results/$phase-$family-$students.json" \
        --write "class-$students-$family-$phase${TAG:+-$TAG}"
elif [ "$phase" = knee ]; then
  reports=()
  wait_s=180
  if [ "${WARM_S:-0}" -gt 0 ]; then  # a first class, not counted: the sizes then meet a server past its first minute
    bench --wait-for-server $wait_s --students 30 --seconds "$WARM_S" --think-time 5 --processes 3 "${lessons[@]}" \
          >"$results/knee-$family-warm.txt"
    wait_s=0
  fi
  for students in ${SIZES:-30 50 100 150}; do
    bench --wait-for-server $wait_s --students "$students" --seconds $long --think-time 5 \
          --processes $(((students + 9) / 10)) "${lessons[@]}" --json "$results/knee-$family-$students.json"
    reports+=("$results/knee-$family-$students.json")
    wait_s=0
  done
  python bench/knee.py "${reports[@]}" --family "$family" --machine "$machine" \
    --command "FAMILY=$family SIZES='${SIZES:-30 50 100 150}' LONG_S=$long WARM_S=${WARM_S:-0} FRESH_CACHES=${FRESH_CACHES:-0} bash bench/classroom_gpu.sh knee RESULTS" \
    --write "knee-$family"
else
  students=${STUDENTS:-100}
  bench --wait-for-server 120 --students "$students" --seconds $long --think-time 5 --processes $((students / 20)) \
        --goal knob_to_code.p95=1 --goal knob_to_latency.p95=3 --json "$results/large-$students.json" \
        --write "depthwise-$students"
fi
