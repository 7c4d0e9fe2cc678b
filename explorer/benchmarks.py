"""The benchmark workloads and their goals, one list: ``bench/kernels.py`` measures the
fastest shipped preset of each against PyTorch and says whether its goal is met;
``bench/search_best.py`` searches templates' knobs on them.

A new benchmark is one row of BENCHMARKS: an id, the workload (as a preset file states
it: kind and shape), the goal in words and as numbers (TVM's time over PyTorch's at most
``max_ratio``, below it when ``strict``, and at most ``max_us`` when given), and PyTorch's
time on an H100 when known (the searches print it beside their best).
"""
from __future__ import annotations

from dataclasses import dataclass

from .errors import ExplorerError
from .schedules import workload_from_mapping
from .workloads import Workload


@dataclass(frozen=True)
class Benchmark:
    id: str
    workload: Workload
    goal: str  # in words, for the tables
    max_ratio: float = 1.0  # TVM / PyTorch at most this ...
    strict: bool = False  # ... or below it ("faster than")
    max_us: float | None = None  # and at most this many µs, when given
    pytorch_us: float | None = None  # PyTorch (CUDA graphs, TF32 off) on an H100, for reference
    rate_goal: bool = False  # the goal is a share of PyTorch's FLOP rate (1 / max_ratio), said so in the verdict

    def verdict(self, tvm_us: float | None, torch_us: float | None) -> str:
        """"yes", or "no: " and how far from the goal, or "not measured"."""
        if not tvm_us or not torch_us:
            return "not measured"
        ratio, gaps = tvm_us / torch_us, []
        if ratio > self.max_ratio or (self.strict and ratio == self.max_ratio):
            if self.rate_goal:
                gaps.append(f"{1 / ratio:.0%} of PyTorch's TFLOP/s (goal {1 / self.max_ratio:.0%})")
            else:
                goal = "" if self.max_ratio == 1 else f" (goal ≤ {self.max_ratio:g}×)"
                gaps.append(f"{ratio:.2f}× PyTorch's time{goal}")
        if self.max_us is not None and tvm_us > self.max_us:
            gaps.append(f"{tvm_us - self.max_us:.2f} µs over {self.max_us:g} µs")
        return "yes" if not gaps else "no: " + ", ".join(gaps)


FASTER_THAN_PYTORCH = "faster than PyTorch"
AT_MOST_CUBLAS = "at most cuBLAS's time (TF32 off)"
TENSOR_CORE_SHARE = 0.8  # of cuBLAS's FLOP rate = at most 1 / 0.8 of its time (Hopper's wgmma + TMA template)


def _depthwise(id, size, kernel=3, multiplier=1, goal=FASTER_THAN_PYTORCH, max_us=None, pytorch_us=None):
    workload = workload_from_mapping("depthwise_conv2d", {"channels": 256, "height": size, "width": size,
                                                          "kernel": kernel, "multiplier": multiplier})
    return Benchmark(id, workload, goal, strict=True, max_us=max_us, pytorch_us=pytorch_us)


def _matmul(id, size, dtype="float32", pytorch_us=None, n=None):
    """size³, or size × n × size (a language model's layer: M tokens, N its width, K its input's)."""
    workload = workload_from_mapping("matmul", {"m": size, "n": n or size, "k": size, "dtype": dtype})
    if dtype == "float32":
        return Benchmark(id, workload, AT_MOST_CUBLAS, pytorch_us=pytorch_us)
    return Benchmark(id, workload, f"≥ {TENSOR_CORE_SHARE:.0%} of cuBLAS's TFLOP/s", 1 / TENSOR_CORE_SHARE,
                     pytorch_us=pytorch_us, rate_goal=True)


TENSOR_CORE_ATTENTION_SHARE = 0.7  # of the fastest PyTorch attention backend's FLOP rate
TENSOR_CORE_ATTENTION_GOAL = (f"≥ {TENSOR_CORE_ATTENTION_SHARE:.0%} of PyTorch's TFLOP/s "
                              "(the fastest backend: bench/sdpa_backends.py)")


def _attention(id, goal="at most PyTorch's time", max_ratio=1.0, **shape):
    workload = workload_from_mapping("attention", {"heads": 32, "head_dim": 64, **shape})
    return Benchmark(id, workload, goal, max_ratio, rate_goal=max_ratio != 1.0)


def _memory_bound(id, kind, **shape):
    return Benchmark(id, workload_from_mapping(kind, shape), FASTER_THAN_PYTORCH, strict=True)


BENCHMARKS = (
    _depthwise("dw-21", 21, pytorch_us=2.45),
    _depthwise("dw-32", 32, pytorch_us=3.66),
    _depthwise("dw-64", 64, pytorch_us=10.62),
    _depthwise("dw-96", 96, goal="faster than PyTorch and ≤ 5.0 µs", max_us=5.0,
               pytorch_us=22.02),
    _depthwise("dw-96-k5", 96, kernel=5, pytorch_us=37.96),
    _depthwise("dw-96-m2", 96, multiplier=2, pytorch_us=51.82),
    _depthwise("dw-96-m2-k5", 96, kernel=5, multiplier=2, pytorch_us=83.26),
    Benchmark("conv1d-16384", workload_from_mapping("conv1d", {"input_length": 16384, "filter_length": 32}),
              FASTER_THAN_PYTORCH, strict=True, pytorch_us=8.56),
    Benchmark("conv2d-resnet-last",
              workload_from_mapping("conv2d", {"in_channels": 512, "out_channels": 512, "height": 7, "width": 7,
                                               "kernel_h": 3, "kernel_w": 3, "stride": 1, "padding": 1}),
              "at most half of cuDNN's time", 0.5, pytorch_us=107.2),
    _matmul("matmul-1024", 1024, pytorch_us=55.7),
    _matmul("matmul-4096", 4096),
    _matmul("matmul-fp16-4096", 4096, "float16"),
    _matmul("matmul-bf16-4096", 4096, "bfloat16"),
    _matmul("matmul-fp16-8192", 8192, "float16"),
    _matmul("matmul-fp16-llm-4096x11008", 4096, "float16", n=11008),  # LLaMA-7B's MLP up-projection, 4096 tokens
    # The memory-bound half of a transformer layer: their roof is HBM's (or L2's) bandwidth.
    _memory_bound("sum-hbm", "sum", n=1 << 26),  # 256 MB: streams from HBM
    _memory_bound("sum-l2", "sum", n=1 << 22),  # 16 MB: fits in the H100's 50 MB L2
    _memory_bound("softmax-4096", "softmax", rows=4096, cols=4096, dtype="float32"),
    _memory_bound("softmax-vocab-fp16", "softmax", rows=2048, cols=32000, dtype="float16"),  # a 32k vocabulary
    _memory_bound("layer-norm-fp16", "layer_norm", rows=8192, cols=4096, dtype="float16"),
    _memory_bound("rms-norm-fp16", "rms_norm", rows=8192, cols=4096, dtype="float16"),
    # Attention on CUDA cores (the lesson's first part): PyTorch's scaled_dot_product_attention, whichever
    # backend it picks, is the bar; 2 × 32 heads × 4096 keeps the three-kernel step's scores under 2^31.
    _attention("attention-2048", batch=4, seq=2048, causal=False),
    _attention("attention-2048-causal", batch=4, seq=2048, causal=True),
    _attention("attention-4096", batch=2, seq=4096, causal=False),
    # Attention on tensor cores (the lesson's second part): 8 × 16 heads × 4096 × 128, held to the fastest
    # of PyTorch's backends (bench/sdpa_backends.py measures each); the three-kernel step refuses it (2^31 scores).
    _attention("attention-4096-d128", batch=8, heads=16, seq=4096, head_dim=128, causal=False,
               goal=TENSOR_CORE_ATTENTION_GOAL, max_ratio=1 / TENSOR_CORE_ATTENTION_SHARE),
    _attention("attention-4096-d128-causal", batch=8, heads=16, seq=4096, head_dim=128, causal=True,
               goal=TENSOR_CORE_ATTENTION_GOAL, max_ratio=1 / TENSOR_CORE_ATTENTION_SHARE),
)


def get_benchmark(benchmark_id: str) -> Benchmark:
    for benchmark in BENCHMARKS:
        if benchmark.id == benchmark_id:
            return benchmark
    raise ExplorerError(f"No benchmark named '{benchmark_id}'; the benchmarks are: "
                        f"{', '.join(b.id for b in BENCHMARKS)}.")
