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

    monkeypatch.setattr(matmul_hopper.schedule, "parsed", parsed_once_per_plan(counted))
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


def test_the_written_templates_share_one_schedule_and_one_shared_memory_check():
    """A template is scheduled (schedule steps on the workload's te.compute) or written (a kernel for a plan of
    its knobs): the written ones schedule through WrittenKernel and refuse tiles past the shared memory a block
    may opt in to with check_shared's one sentence."""
    from explorer.errors import InvalidKnobs
    from explorer.schedules import TEMPLATES
    from explorer.schedules.written import WrittenKernel, check_shared

    written = {name for name, template in TEMPLATES.items() if isinstance(template.apply, WrittenKernel)}
    assert written == {"reduce_tree", "attention_fused", "attention_mma", "attention_hopper", "matmul_hopper"}
    check_shared(232_448, "The tiles", "use smaller tiles", ("block",))  # all that an sm_90 block may have
    with pytest.raises(InvalidKnobs, match=r"^The tiles need 232,449 bytes of shared memory, more than the 232,448 a "
                                           r"block may use on the H100 SXM: use smaller tiles\.$") as refused:
        check_shared(232_449, "The tiles", "use smaller tiles", ("block",))
    assert refused.value.knobs == ("block",)
    with pytest.raises(InvalidKnobs, match="more than the 166,912 a block may use on the A100 SXM 80GB"):
        check_shared(200_000, "The Q, K and V tiles", "use smaller tiles", ("block_q",), "sm_80")
