"""Property: any knob values, inside or outside their declared domains, either build or
raise a typed ExplorerError with a message — never another exception, never a crash."""
import dataclasses

import pytest

from explorer.build import Spec, build
from explorer.errors import ExplorerError
from explorer.schedules import TEMPLATES

# Shapes stay small so that a build takes a fraction of a second.
SMALL_SHAPE_CAP = 48


def knob_sets():
    """The strategy of a template's (workload, knob values). Hypothesis is imported here, by the
    test process that runs these tests (the others collect this file without its import)."""
    from hypothesis import strategies as st

    invalid_values = st.one_of(
        st.integers(-4, 4096),
        st.text(max_size=6),
        st.booleans(),
        st.tuples(st.integers(-2, 64), st.integers(-2, 64)),
        st.none(),
    )

    def workload_strategy(workload_cls):
        fields = {}
        for spec in workload_cls.specs():
            if spec.kind is int and spec.low is not None:  # a range (an int with choices is sampled below)
                fields[spec.name] = st.integers(spec.low, min(spec.high, SMALL_SHAPE_CAP if spec.low >= 1 else 4))
            else:
                fields[spec.name] = st.sampled_from(spec.values())
        return st.fixed_dictionaries(fields)

    @st.composite
    def specs(draw, template):
        try:
            workload = template.workload(**draw(workload_strategy(template.workload)))
        except ExplorerError:
            workload = template.default_workload()
            # keep the default shape but shrink it where the default is large
            small = {s.name: min(getattr(workload, s.name), SMALL_SHAPE_CAP) for s in workload.specs()
                     if s.kind is int}
            workload = template.workload(**small)
        knob_specs = template.knobs.specs()
        values = {s.name: draw(st.sampled_from(s.values(workload))) for s in knob_specs}
        # A third of the draws put one knob outside its domain; the rest exercise real builds.
        if draw(st.integers(0, 2)) == 0:
            corrupted = draw(st.sampled_from(knob_specs)).name
            values[corrupted] = draw(invalid_values)
        return workload, values

    return specs


@pytest.mark.parametrize("name", sorted(TEMPLATES))
def test_any_knob_values_build_or_raise_a_typed_error(name):
    from hypothesis import HealthCheck, given, settings

    template = TEMPLATES[name]

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True)
    @given(knob_sets()(template))
    def check(drawn):
        workload, values = drawn
        try:
            knobs = template.knobs(**values)
            result = build(Spec(name, workload, knobs), "h100")
        except ExplorerError as error:
            message = str(error)
            assert message and "\n" not in message and "Traceback" not in message
            return
        assert "__global__" in result.cuda

    check()


def test_workload_dataclasses_reject_out_of_range_shapes_with_typed_errors():
    for template in TEMPLATES.values():
        for spec in template.workload.specs():
            bad = {int: -1, str: "nonsense", bool: "yes"}[spec.kind]
            with pytest.raises(ExplorerError):
                dataclasses.replace(template.default_workload(), **{spec.name: bad})
