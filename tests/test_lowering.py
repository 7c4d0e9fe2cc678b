"""Lowering skips TVM's pass for Hexagon's DMA copies on CUDA: the device code is the one TVM's
whole default pipeline makes (the presets that turn cp.async on, where the pass runs)."""
import pytest
import tvm
from tvm import tirx

from explorer.build import arch_target, lower, lowering_config, scheduled, skipped_passes
from explorer.presets import get_preset
from explorer.targets import resolve_target


@pytest.mark.parametrize("preset", ["conv2d-modern-async", "modern-async-1024", "modern-tensorcore-fp16-4096"])
def test_the_skipped_pass_changes_nothing_on_cuda(preset):
    spec = get_preset(preset).spec
    target = arch_target(spec.template_def, resolve_target("h100"))
    host_target = tvm.target.Target(target, host="llvm")
    mod = scheduled(spec, target).mod
    assert lowering_config(mod).get("tirx.use_async_copy")  # the pass is in TVM's pipeline here
    with tvm.transform.PassContext(config=lowering_config(mod)):  # TVM's whole pipeline
        pipeline, _, _ = tirx.get_tir_pipeline("default")
        whole = pipeline(tirx.transform.BindTarget(host_target)(mod))
    with tvm.transform.PassContext(config=lowering_config(mod), disabled_pass=skipped_passes(host_target)):
        pipeline, _, _ = tirx.get_tir_pipeline("default")
        ours = pipeline(tirx.transform.BindTarget(host_target)(mod))
    tvm.ir.assert_structural_equal(ours, whole)
    host, devices = lower(mod, host_target)  # the build's lowering skips it
    assert skipped_passes(host_target) == ["s_tir.LowerAsyncDMA"] and skipped_passes(tvm.target.Target("llvm")) == []
    assert next(iter(devices.values())).functions
