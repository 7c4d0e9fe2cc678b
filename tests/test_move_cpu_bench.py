"""bench/move_cpu.py: the settings new to a server that it times, and its tables, without its processes."""
import move_cpu  # bench/move_cpu.py (pytest's pythonpath)

from explorer.lessons import get_lesson


def row(template, knobs, cpu, build="ok"):
    return {"template": template, "knobs": knobs, "said": {"build": build}, "cpu": dict(zip(move_cpu.KINDS, cpu,
                                                                                             strict=True))}


def test_the_settings_are_new_neighbours_of_the_steps_taken_template_by_template():
    warm, chosen = move_cpu.new_settings(["matmul_modern"], 6)
    steps = {step.preset.spec for step in get_lesson("matmul_modern").steps}
    assert {spec.template for spec in warm} == {spec.template for spec in steps} and len(warm) == len(
        {spec.template for spec in warm})
    assert len(chosen) == len(set(chosen)) == 6 and not set(chosen) & steps
    templates = [spec.template for spec in chosen]
    assert len(set(templates[:len(set(templates))])) == len(set(templates))  # each template before any twice


def test_the_tables_leave_refusals_out_and_compare_the_settings_of_both_runs():
    before = [row("matmul", "a", (0.2, 0.1, 3.0, 0.0)), row("matmul", "b", (0.2, 0.1, 1.0, 0.0)),
              row("matmul", "c", (0.0, 0.0, 0.0, 0.0), build="refused: too many threads")]
    after = [row("matmul", "a", (0.1, 0.1, 2.0, 0.0)), row("matmul", "c", (0.0, 0.0, 0.0, 0.0), build="refused")]
    lines = move_cpu.table(before)
    assert lines[2] == "| matmul | 2 | 0.200 (0.200) | 0.100 (0.100) | 2.000 (2.000) | 0.000 (0.000) | 2.300 (2.300) |"
    assert lines[-1].startswith("| refused (not in the rows above) | 1 |")
    compared = move_cpu.compare(before, after)  # only "a" built in both
    assert compared[0].startswith("| process (1 settings)") and "| diagnose | 3.000 | 2.000 | -33% |" in compared
    assert "| all | 3.300 | 2.200 | -33% |" in compared and "| app | 0.000 | 0.000 | — |" in compared
