#!/bin/bash
ls /tmp/site/tvm >/dev/null || exit 9
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
timeout 330 python bench/search_best.py attention-fused-4096 --rounds 1 --max-minutes 4.5 2>&1 | grep -v "^\s*$" | tail -12
tar czf $OUT/search-fused.tgz bench/results/search/attention-fused-*
timeout 200 python bench/ncu_limits.py attention-fused-4096 attention-unfused-4096 --write ncu-limits-attention-cuda-cores 2>&1 | tail -12
cp docs/benchmarks.md $OUT/benchmarks-6.md
