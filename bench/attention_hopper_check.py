"""The Hopper attention template (attention_hopper) on this GPU, in one run: check every setting
below at a small shape, then time the knob grid at the tensor-core attention benchmark's shape.

    python bench/attention_hopper_check.py [--only NAME ...] [--no-timing] [--batch 8 --heads 16 --seq 4096]

1. Each setting of CHECKS (knobs × small shapes, causal and not) is built and run once in the
   measuring worker against the workload's float64 reference; prints its max abs error (a kernel
   whose barriers never complete is stopped at the time limit and reported, and the rest still run).
2. Every knob setting of the grid (block_kv × consumers × stages × warp_specialize × overlap) is timed at
   B × H × seq × 128 (8 × 16 × 4096 by default), non-causal and causal: checked against the reference
   at that shape too, then timed with TVM's time_evaluator (explorer.measure, its default settings);
   prints µs and TFLOP/s (4·B·H·seq²·d, half of it causal), and for each mask the default, the best,
   and PyTorch's scaled_dot_product_attention (the backend it picks) on the same GPU.

Needs a Hopper GPU (sm_90a); PyTorch for the reference at the large shape and the baseline.
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time

from explorer.build import Spec
from explorer.errors import ExplorerError
from explorer.measure import MeasureSettings, baseline, measure, shutdown
from explorer.schedules.attention_hopper import AttentionHopperKnobs
from explorer.workloads import Attention

TEMPLATE = "attention_hopper"
D64 = {"batch": 1, "heads": 2, "seq": 256, "head_dim": 64}
D128 = {"batch": 1, "heads": 2, "seq": 512, "head_dim": 128}
# name -> (workload fields, knobs changed from the defaults): small shapes, every knob, both masks.
CHECKS = {
    "d64": (D64, {}),
    "d64-causal": ({**D64, "causal": True}, {}),
    "d128": (D128, {}),
    "d128-causal": ({**D128, "causal": True}, {}),
    "d128-kv64-3-stages": (D128, {"block_kv": 64, "stages": 3}),
    "d128-one-consumer-causal": ({**D128, "causal": True}, {"consumers": 1}),
    "d128-no-producer": (D128, {"warp_specialize": False}),
    "d128-no-producer-causal-3-stages": ({**D128, "causal": True}, {"warp_specialize": False, "stages": 3}),
    "d64-one-consumer-no-producer-kv64-4-stages": ({**D64, "causal": True},
                                                   {"consumers": 1, "warp_specialize": False, "block_kv": 64,
                                                    "stages": 4}),
    "d128-two-batches-three-heads-causal": ({"batch": 2, "heads": 3, "seq": 256, "head_dim": 128, "causal": True},
                                            {}),
    "d128-overlap": (D128, {"overlap": True}),
    "d128-overlap-causal": ({**D128, "causal": True}, {"overlap": True}),
    "d128-overlap-no-producer-causal-kv64": ({**D128, "causal": True},
                                             {"overlap": True, "warp_specialize": False, "block_kv": 64}),
    "d64-overlap-one-consumer-causal": ({**D64, "causal": True}, {"overlap": True, "consumers": 1}),
}
CHECK_ONLY = MeasureSettings(time_limit_s=20, repeats=1, roofline=False, cuda_graph=False)
TIMED = MeasureSettings(time_limit_s=30, roofline=False)
GRID = {"block_kv": (64, 128), "consumers": (1, 2), "stages": (2, 3), "warp_specialize": (True, False),
        "overlap": (False, True)}


def check_spec(name: str) -> Spec:
    fields, knobs = CHECKS[name]
    return Spec(TEMPLATE, Attention(**fields), AttentionHopperKnobs(**knobs))


def check(name: str) -> bool:
    spec = check_spec(name)
    try:
        result = measure(spec, settings=CHECK_ONLY)
    except ExplorerError as error:  # refused, crashed, or stopped at the time limit
        print(f"  {name:46} FAILED: {type(error).__name__}: {error}", flush=True)
        return False
    verdict = "ok   " if result.correct else "WRONG"
    print(f"  {name:46} {verdict} max abs error {result.check.max_error:.3g} (tolerance {result.check.tolerance:.3g})"
          + ("" if result.correct else f": {result.check.describe()}"), flush=True)
    return result.correct


def grid() -> list[AttentionHopperKnobs]:
    return [AttentionHopperKnobs(**dict(zip(GRID, values, strict=True)))
            for values in itertools.product(*GRID.values())]


def time_grid(workload: Attention) -> None:
    print(f"\n{workload.label()}: {workload.flops / 1e12:.2f} TFLOP per call", flush=True)
    rates = {}
    for knobs in grid():
        label = " ".join(f"{k}={v}" for k, v in knobs.to_strings().items())
        try:
            result = measure(Spec(TEMPLATE, workload, knobs), settings=TIMED)
        except ExplorerError as error:
            print(f"  {label:70} FAILED: {type(error).__name__}: {error}", flush=True)
            continue
        if not result.correct:
            print(f"  {label:70} WRONG: {result.check.describe()}", flush=True)
            continue
        rates[knobs] = workload.flops / result.median_us / 1e6
        print(f"  {label:70} {result.median_us:9.1f} µs {rates[knobs]:7.1f} TFLOP/s", flush=True)
    try:
        torch = baseline(workload, settings=TIMED)
        torch_rate = workload.flops / torch.median_us / 1e6 if torch.median_us else None
    except ExplorerError as error:
        print(f"  PyTorch: {error}")
        torch_rate = None
    default = AttentionHopperKnobs()
    summary = [("default", default), ("best", max(rates, key=rates.get))] if rates else []
    for what, knobs in summary:
        rate = rates.get(knobs)
        share = f" = {rate / torch_rate:.0%} of PyTorch's" if rate and torch_rate else ""
        print(f"  {what}: {knobs.to_strings()} " + (f"{rate:.1f} TFLOP/s{share}" if rate else "failed"))
    if torch_rate:
        print(f"  PyTorch scaled_dot_product_attention ({torch.library}): {torch_rate:.1f} TFLOP/s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=sorted(CHECKS), help="check only these settings")
    parser.add_argument("--no-timing", action="store_true", help="only the checks at small shapes")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, default=4096)
    args = parser.parse_args(argv)
    start = time.monotonic()
    print("checks at small shapes:")
    correct = [check(name) for name in args.only or CHECKS]
    try:
        if not args.no_timing:
            for causal in (False, True):
                time_grid(Attention(batch=args.batch, heads=args.heads, seq=args.seq, head_dim=128, causal=causal))
    finally:
        shutdown()
    print(f"\n{sum(correct)} of {len(correct)} checks correct; {time.monotonic() - start:.0f} s")
    return 0 if all(correct) else 1


if __name__ == "__main__":
    sys.exit(main())
