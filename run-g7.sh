#!/bin/bash
ls /tmp/site/tvm >/dev/null || exit 9
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:/tmp/site2:$PWD PATH=/tmp/site2/bin:$PATH PYTHONUNBUFFERED=1
STUDENTS=100 LONG_S=400 TAG=1-gpu timeout 560 bash bench/classroom_h100.sh class /tmp/r 2>&1 | tail -40
grep -h "warm-up" /tmp/r/server-class.log | head -12
cp docs/benchmarks.md $OUT/benchmarks-7.md
tar czf $OUT/class.tgz -C /tmp r
