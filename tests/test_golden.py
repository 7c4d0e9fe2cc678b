"""Golden TensorIR: each template's scheduled module, checked against a reviewed copy.

tests/golden/<template>.tvmscript holds the scheduled TensorIR of the template's default
preset (the app opens a template with it: its first preset, else the template's defaults),
as TVM prints it. The test parses it back and compares it structurally, as TVM's dlight
tests do, so a template change shows up as a reviewable diff of readable TIR. Where TVM
0.27 cannot parse its own printout (the tensor-core intrinsics), the printed text is
compared instead.

After an intended change, rewrite them (from the repository root) and review the diff:

    python -m tests.test_golden --write
"""
import sys
from pathlib import Path

import pytest
import tvm

from explorer.build import Spec
from explorer.presets import all_presets
from explorer.schedules import TEMPLATES

GOLDEN = Path(__file__).resolve().parent / "golden"
REWRITE = "python -m tests.test_golden --write"


def default_spec(name: str) -> Spec:
    """The setting the app opens the template with: its first preset, else its defaults."""
    first = next((p.spec for p in all_presets().values() if p.spec.template == name), None)
    template = TEMPLATES[name]
    return first or Spec(name, template.default_workload(), template.knobs())


def scheduled(name: str) -> tvm.IRModule:
    spec = default_spec(name)
    return spec.template_def.apply(spec.workload, spec.knobs).mod


def golden_text(name: str) -> str:
    spec = default_spec(name)
    return (f"# The scheduled TensorIR of template '{name}' on {spec.workload.label()} with knobs "
            f"{spec.knobs.to_strings()}.\n# Checked by tests/test_golden.py; rewrite with: {REWRITE}\n"
            + scheduled(name).script())


def golden_path(name: str) -> Path:
    return GOLDEN / f"{name}.tvmscript"


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_scheduled_tensorir_is_the_golden(name):
    path = golden_path(name)
    assert path.exists(), f"{path.name} is missing: {REWRITE}"
    golden = path.read_text()
    try:
        expected = tvm.script.from_source(golden)
    except tvm.error.DiagnosticError:  # TVM 0.27 prints some tensor intrinsics in a form it cannot parse
        assert golden_text(name) == golden, f"{path.name} differs: review the change, then {REWRITE}"
        return
    tvm.ir.assert_structural_equal(scheduled(name), expected)


def test_no_golden_without_a_template():
    assert {p.stem for p in GOLDEN.glob("*.tvmscript")} <= set(TEMPLATES)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(f"usage: {REWRITE}")
    GOLDEN.mkdir(exist_ok=True)
    for stale in set(GOLDEN.glob("*.tvmscript")) - {golden_path(name) for name in TEMPLATES}:
        stale.unlink()
    for name in TEMPLATES:
        golden_path(name).write_text(golden_text(name))
        print(f"wrote {golden_path(name)}")
