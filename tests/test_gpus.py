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
    """A made-up sm_95 (an architecture: 96 KB per SM) and its one GPU: 100 SMs of 64 FP32 lanes at
    1.5 GHz (19,200 GFLOP/s), 1000 GB/s."""
    limits = gpus.SMLimits("sm_95", 1024, 8, 65536, 256, 255, 96 * 1024, 128, 1024)
    monkeypatch.setitem(gpus.ARCHITECTURES, "sm_95", gpus.Architecture("sm_95", limits, 64 * 1024))
    published = gpus.Published(19_200, "HBM", 1_000, 32 * gpus.MB, "made up for a test")
    entry = gpus.GPU("Test GPU", "sm_95", sms=100, fp32_lanes=64, published=published)
    monkeypatch.setitem(gpus.GPUS, "Test GPU", entry)
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


def test_a_gpu_is_taken_by_its_name_within_its_architecture():
    """H100 SXM, H100 PCIe and H200 are all sm_90: the H200's 4.8 TB/s beside the H100's 3.35 TB/s."""
    assert gpus.gpu_of("sm_90a").name == "H100 SXM"  # the GPU the architecture stands for
    assert gpus.gpu_of("sm_90", "NVIDIA H200").name == "H200"  # as the CUDA driver names it
    assert gpus.gpu_of("sm_90a", "h100 pcie").name == "H100 PCIe"
    assert gpus.gpu_of("sm_90", "NVIDIA H100 80GB HBM3") is gpus.DEFAULT
    assert gpus.gpu_of("sm_90", "a GPU the table lacks") is gpus.DEFAULT and gpus.gpu_of("sm_70") is None
    assert [published_ceilings("sm_90", name).hbm_gbps for name in ("H100 SXM", "H100 PCIe", "H200")] == [
        3_350, 2_000, 4_800]
    assert "H200, HBM3e" in published_ceilings("sm_90", "NVIDIA H200").source
    # The same limits for all three: they are the architecture's.
    assert gpus.GPUS["H200"].limits is gpus.GPUS["H100 PCIe"].limits is gpus.ARCHITECTURES["sm_90"].limits
    # Without a GPU, the SMs of the named one: the H100 PCIe has 114.
    pcie = published_ceilings("sm_90", "H100 PCIe")
    assert device_for("sm_90", pcie, 1 << 30, gpu_name="H100 PCIe").sms == 114


def test_a_target_names_its_gpu_and_the_published_figures_follow_it():
    from explorer.analysis.roofline import published_for
    from explorer.targets import gpu_name, resolve_target

    assert gpu_name(resolve_target("h200")) == "H200" and resolve_target("h200").arch == "sm_90a"
    assert gpu_name(resolve_target("h100")) is None  # TVM's tag: the H100 SXM the architecture stands for
    assert published_for(resolve_target("h200")).hbm_gbps == 4_800
    assert published_for(resolve_target("h100")).hbm_gbps == 3_350
    assert published_for(resolve_target("h100-pcie")).hbm_gbps == 2_000
    local = tvm.target.Target({"kind": "cuda", "arch": "sm_90a", "model": "NVIDIA H200"})  # as the GPU names itself
    assert published_for(local).hbm_gbps == 4_800


def test_measured_figures_come_before_the_published_ones():
    """Where a GPU measured its ceilings, the roofline and the diagnosis use them, whatever the table says."""
    from explorer.analysis.roofline import Ceilings

    measured = Ceilings(60_000.0, 4_500.0, 10_000.0, 50 * gpus.MB, "measured on NVIDIA H200")
    device = device_for("sm_90", measured, 1 << 30, gpu_name="NVIDIA H200")
    assert device.name == "measured on NVIDIA H200" and device.bandwidth_gbps == 4_500.0


def test_an_unknown_architecture_uses_the_nearest_older_limits_and_says_so():
    limits, note = sm_limits("sm_91")
    assert limits is gpus.ARCHITECTURES["sm_90"].limits and "sm_90's limits are used" in note


def test_no_module_holds_a_gpu_fact_of_its_own():
    """The H100's and H200's SM counts, opt-in shared memory (227 KB) and peaks are numbers in
    explorer/gpus.py only (prose may name them)."""
    facts = {114, 132, 227, 232448, 3350, 4800, 67000}
    found = []
    for path in sorted((ROOT / "explorer").rglob("*.py")):
        if path.name == "gpus.py":
            continue
        with path.open() as source:
            for token in tokenize.generate_tokens(source.readline):
                if token.type == tokenize.NUMBER and ast.literal_eval(token.string) in facts:
                    found.append(f"{path.relative_to(ROOT)}:{token.start[0]}: {token.line.strip()}")
    assert found == []
