"""The stand-ins that TVMScript parses with (explorer/schedules/parsing.py): the same frames as
``inspect``'s own, inspect's own back after the block, and the same parsed kernels."""
import inspect

import pytest
import tvm

from explorer.export import snippet
from explorer.presets import get_preset
from explorer.schedules import matmul_hopper
from explorer.schedules.parsing import (
    _frames_and_lines,
    _outer_frames_and_lines,
    parsed_once_per_plan,
    tvmscript_frames,
)
from explorer.schedules.tensor_intrinsics import import_tensor_intrinsics


def described(frames) -> list[tuple]:
    return [(f.frame, f.filename, f.lineno, f.function, f.code_context) for f in frames]


def test_the_stand_ins_give_inspects_frames_and_lines():
    real, stand_in = inspect.stack(), _frames_and_lines()  # one line: the same caller
    assert described(stand_in) == described(real)
    frame = inspect.currentframe()
    assert described(_outer_frames_and_lines(frame)) == described(inspect.getouterframes(frame))


def test_inspects_own_functions_are_back_after_the_block_and_after_an_error_in_it():
    import_tensor_intrinsics()
    assert (inspect.stack.__module__, inspect.getouterframes.__module__) == ("inspect", "inspect")
    with pytest.raises(ZeroDivisionError), tvmscript_frames():
        assert inspect.stack is _frames_and_lines and inspect.getouterframes is _outer_frames_and_lines
        with tvmscript_frames():  # nested: a template's parse that imports the intrinsics
            pass
        assert inspect.stack is _frames_and_lines
        1 / 0  # noqa: B018
    assert (inspect.stack.__module__, inspect.getouterframes.__module__) == ("inspect", "inspect")


def test_the_hopper_kernel_parsed_with_the_stand_ins_is_the_one_parsed_without():
    spec = get_preset("hopper-ws-bf16-4096").spec
    plan = matmul_hopper.check_knobs(spec.workload, spec.knobs)
    tvm.ir.assert_structural_equal(matmul_hopper.schedule(spec.workload, spec.knobs).mod["main"],
                                   matmul_hopper.kernel(plan))


def test_a_setting_scheduled_again_is_not_parsed_again(monkeypatch):
    spec = get_preset("hopper-ws-bf16-4096").spec
    parses = []

    def counted(plan):
        parses.append(plan)
        return matmul_hopper.kernel(plan)

    monkeypatch.setattr(matmul_hopper, "parsed_kernel", parsed_once_per_plan(counted))
    first = matmul_hopper.schedule(spec.workload, spec.knobs)
    again = matmul_hopper.schedule(spec.workload, spec.knobs)
    assert len(parses) == 1 and first.mod is not again.mod  # a module of its own, around the one PrimFunc
    tvm.ir.assert_structural_equal(again.mod["main"], matmul_hopper.kernel(parses[0]))
    other = get_preset("hopper-ws-bf16-4096").spec.knobs.__class__(cluster=2)  # another plan: parsed
    matmul_hopper.schedule(spec.workload, other)
    assert len(parses) == 2


def test_an_exported_tensor_core_script_tells_inspect_about_the_import_frames_before_the_intrinsics():
    script = snippet(get_preset("best-matmul-tc-bf16-4096").spec)
    told = script.index('inspect.modulesbyfile.setdefault(_frame_file, "")')
    assert told < script.index("import tvm.s_tir.tensor_intrin.cuda") < script.index("_bfloat16('mma_f16f16f32')")
    assert "inspect.modulesbyfile" not in snippet(get_preset("best-matmul-1024").spec)  # only where it imports them
