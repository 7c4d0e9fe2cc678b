#!/bin/bash
ls /tmp/site/tvm >/dev/null || exit 9
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site2 .whl/*.whl 2>&1 | tail -2
export PYTHONPATH=/tmp/site:/tmp/site2:$PWD PATH=/tmp/site2/bin:$PATH PYTHONUNBUFFERED=1
python -m pytest -q -o addopts="" -p no:cacheprovider -m gpu tests/test_schedule_attention_mma.py tests/test_schedule_attention.py 2>&1 | tail -3
python bench/lessons_h100.py --only attention-cuda-cores-d128 attention-mma attention-mma-pad attention-mma-cp-async attention-mma-tall attention-mma-causal --out $OUT/lessons2b.md 2>&1 | tail -10
cp bench/results/lessons-sm_90.json $OUT/
STUDENTS=100 LONG_S=120 TAG=warm-start MACHINE='NVIDIA H100 80GB HBM3, 16 cores' timeout 300 bash bench/classroom_h100.sh class /tmp/r8 2>&1 | grep -v "^|" | head -12
grep -h "warm-up" /tmp/r8/server-class.log | head -20
