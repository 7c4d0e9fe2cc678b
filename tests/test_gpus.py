"""One table of GPUs (explorer/gpus.py): a GPU added as one entry reaches occupancy, the published
roofline, the diagnosis's device model and the shared-memory verification; nothing else holds a
GPU fact of its own."""
import ast
import tokenize
from pathlib import Path

import pytest
import tvm

from explorer import gpus
from explorer.analysis.diagnosis import device_for
from explorer.analysis.resources import occupancy, sm_limits
from explorer.analysis.roofline import published_ceilings
from explorer.verify import shared_limits

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def new_gpu(monkeypatch):
    """A made-up sm_95: 100 SMs of 64 FP32 lanes at 1.5 GHz (19,200 GFLOP/s), 1000 GB/s, 96 KB per SM."""
    limits = gpus.SMLimits("sm_95", 1024, 8, 65536, 256, 255, 96 * 1024, 128, 1024)
    published = gpus.Published("Test GPU", 19_200, "HBM", 1_000, 32 * gpus.MB, "made up for a test")
    entry = gpus.GPU("sm_95", limits, 64 * 1024, sms=100, fp32_lanes=64, published=published)
    monkeypatch.setitem(gpus.GPUS, "sm_95", entry)
    return entry


def test_one_entry_reaches_every_analysis(new_gpu):
    assert sm_limits("sm_95a") == (new_gpu.limits, "")
    # 1024 threads per SM: four blocks of 256 threads fit, by threads alone (hand count).
    assert occupancy(new_gpu.limits, 256, 0, 32).blocks_per_sm == 4
    ceilings = published_ceilings("sm_95")
    assert (ceilings.fp32_gflops, ceilings.hbm_gbps) == (19_200, 1_000) and "Test GPU" in ceilings.source
    device = device_for("sm_95", ceilings, compulsory_bytes=1 << 30)
    assert (device.sms, device.arch) == (100, 95)
    assert device.clock_ghz == pytest.approx(19_200 / (100 * 64 * 2))  # 1.5 GHz
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_95"})
    assert shared_limits(target)[1] == 64 * 1024


def test_an_unknown_architecture_uses_the_nearest_older_limits_and_says_so():
    limits, note = sm_limits("sm_91")
    assert limits is gpus.GPUS["sm_90"].limits and "sm_90's limits are used" in note


def test_no_module_holds_a_gpu_fact_of_its_own():
    """The H100's SM count, opt-in shared memory (227 KB) and peaks are numbers in explorer/gpus.py
    only (prose may name them)."""
    facts = {132, 227, 232448, 3350, 67000}
    found = []
    for path in sorted((ROOT / "explorer").rglob("*.py")):
        if path.name == "gpus.py":
            continue
        with path.open() as source:
            for token in tokenize.generate_tokens(source.readline):
                if token.type == tokenize.NUMBER and ast.literal_eval(token.string) in facts:
                    found.append(f"{path.relative_to(ROOT)}:{token.start[0]}: {token.line.strip()}")
    assert found == []
