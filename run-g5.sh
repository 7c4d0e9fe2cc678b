#!/bin/bash
ls /tmp/site/tvm >/dev/null || exit 9
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 560 python bench/ncu_limits.py attention-mma attention-mma-pad attention-mma-tall --write ncu-limits-attention 2>&1 | tail -16
cp docs/benchmarks.md $OUT/benchmarks-5.md
