#!/bin/bash
ls /tmp/site/tvm >/dev/null || exit 9
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python bench/lessons_h100.py --only attention-cuda-cores-d128 attention-mma attention-mma-pad attention-mma-cp-async attention-mma-tall attention-mma-causal --out $OUT/lessons2.md 2>&1 | tail -25
python bench/kernels.py --only d128 --ncu 2>&1 | grep -v "^| [dcms]" | tail -12
cp docs/benchmarks.md $OUT/benchmarks-4.md; cp bench/results/kernels-*.json bench/results/lessons-sm_90.json $OUT/
