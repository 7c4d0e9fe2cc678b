"""MetaSchedule tuning: a tiny run on the CPU (llvm), its progress, its trace replayed and
checked against NumPy; argument errors."""
import json

import numpy as np
import pytest
import tvm

from explorer.errors import ExplorerError
from explorer.search.tune import TuneResult, cost_model_name, replay, snippet, trace_json, tune, tuning_target
from explorer.workloads import DepthwiseConv2d, Matmul

TINY = DepthwiseConv2d(channels=4, height=8, width=8)


@pytest.fixture(scope="module")
def tuned():
    """One batch of two candidates, built in one process (each build process imports TVM: a second of CPU)."""
    seen = []
    result = tune(TINY, 2, target="llvm", strategy="replay-trace", workers=1, on_progress=seen.append)
    return result, seen


def test_tuning_reports_progress_and_a_best_latency(tuned):
    result, seen = tuned
    assert seen and seen[-1].trials == 2 and seen[-1].fraction == 1.0
    assert [p.trials for p in seen] == sorted(p.trials for p in seen)
    assert 0 < result.trials <= 2 and result.budget == 2
    assert result.best_us is not None and result.best_us > 0
    assert result.best_us == pytest.approx(min(b for b in result.history if b is not None), rel=1e-6)
    assert result.cost_model == cost_model_name() and result.strategy == "replay-trace"


def test_the_trace_is_the_schedule_as_python_calls(tuned):
    result, _ = tuned
    assert result.trace.startswith("# from tvm import s_tir\ndef apply_trace(sch")
    assert 'sch.get_sblock(name="DepthwiseConv2d", func_name="main")' in result.trace


def test_the_replayed_trace_gives_the_tuned_schedule_and_the_right_numbers(tuned):
    result, _ = tuned
    sch = replay(TINY, json.loads(json.dumps(result.to_json()["trace_json"])))
    assert sch.mod.script() == result.tensorir
    inputs = TINY.random_inputs(seed=3)
    device = tvm.cpu(0)
    out = tvm.runtime.empty(TINY.output_shape(), "float32", device)
    kernel = tvm.compile(sch.mod, target="llvm")
    kernel["main"](*(tvm.runtime.tensor(x, device) for x in inputs), out)
    np.testing.assert_allclose(out.numpy(), TINY.reference(*inputs), rtol=1e-5, atol=1e-5)


def test_a_trace_for_another_workload_is_refused(tuned):
    result, _ = tuned
    with pytest.raises(ExplorerError, match="does not apply"):
        replay(Matmul(m=8, n=8, k=8), result.trace_json)  # no stage named PaddedInput


def test_llvm_target_gets_the_core_count_metaschedule_needs():
    assert int(tuning_target("llvm").attrs["num-cores"]) >= 1


@pytest.mark.parametrize(
    "kwargs, message",
    [({"trials": 0}, "between 1 and"), ({"trials": 4, "strategy": "bayes"}, "Unknown search strategy")],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ExplorerError, match=message):
        tune(TINY, target="llvm", **kwargs)


def test_cuda_tuning_without_a_gpu_says_what_to_do():
    if tvm.cuda(0).exist:
        pytest.skip("this machine has a GPU")
    with pytest.raises(ExplorerError, match="no CUDA GPU"):
        tune(TINY, 4, target="h100")


def test_a_cuda_tuned_trace_exports_as_a_standalone_script(tmp_path):
    """No GPU here to tune on, so the 'tuned' trace is a template's CUDA schedule; the
    export path (trace JSON -> replay -> script) is the same."""
    from explorer.presets import get_preset

    spec = get_preset("dw-blog-channel-21").spec
    sch = spec.template_def.apply(spec.workload, spec.knobs)
    result = TuneResult(
        workload=spec.workload, variant="default", target="sm_90a", budget=1, trials=1, best_us=5.0,
        trace=str(sch.trace), trace_json=json.loads(json.dumps(trace_json(sch))), tensorir=sch.mod.script(),
        cost_model="random", strategy="replay-trace", elapsed_s=1.0, history=(5.0,),
    )
    code = snippet(result)
    assert "# Made with TVM MetaSchedule (1 trials, best 5.00 us on sm_90a);" in code
    path = tmp_path / "tuned.py"
    path.write_text(code)
    import runpy

    namespace = runpy.run_path(str(path), run_name="snippet")  # defines, does not run main()
    exported = namespace["schedule"](namespace["Workload"])
    tvm.ir.assert_structural_equal(exported.mod, sch.mod)


def test_a_cpu_tuned_trace_is_not_exported_as_cuda(tuned):
    result, _ = tuned
    with pytest.raises(ExplorerError, match="CUDA GPU"):
        snippet(result)


def test_cli_tune_prints_the_best_and_both_traces(capsys):
    from explorer.cli import main

    assert main(["tune", "dw-blog-channel-21", "--trials", "2", "--target", "llvm", "--strategy", "replay-trace",
                 "--workers", "1", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["preset"] == "dw-blog-channel-21" and out["budget"] == 2 and out["best_us"] > 0
    assert out["trace"].startswith("# from tvm import s_tir") and "sch.bind(" in out["hand_trace"]
    assert main(["tune", "dw-blog-channel-21", "--trials", "0", "--target", "llvm"]) == 2
