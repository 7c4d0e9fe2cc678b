#!/bin/bash
ls /tmp/site/tvm >/dev/null || exit 9
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python -m pytest -q -o addopts="" -p no:cacheprovider -m gpu tests/test_schedule_attention_mma.py 2>&1 | tail -5
for plan in attention-mma-d128 attention-mma-d128-causal attention-mma-d64; do
  timeout 200 python bench/search_best.py $plan --rounds 0 --max-minutes 2.5 2>&1 | grep -v "^\s*$" | tail -8
done
ls bench/results/search/ | grep attention
tar czf $OUT/search.tgz bench/results/search/attention-mma-*
