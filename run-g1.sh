#!/bin/bash
# GPU run 1: attention on CUDA cores, SDPA backends, lessons
ls /tmp/site/tvm >/dev/null || exit 9
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.max.sm --format=csv,noheader
python -m pytest -q -o addopts="" -p no:cacheprovider -m gpu tests/test_schedule_attention.py 2>&1 | tail -5
python bench/sdpa_backends.py 2>&1 | tail -30
python bench/lessons_h100.py --only attention-unfused attention-fused attention-fused-shared attention-unfused-causal attention-fused-causal attention-unfused-4096 attention-fused-4096 rowwise-softmax-on-chip rowwise-softmax-vector --out $OUT/lessons.md 2>&1 | tail -30
cp docs/benchmarks.md $OUT/benchmarks-1.md; cp bench/results/*.json $OUT/ 2>/dev/null
