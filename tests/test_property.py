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
        for knob in workload_cls.fields():
            if knob.kind is int and knob.low is not None:  # a range (an int with choices is sampled below)
                fields[knob.name] = st.integers(knob.low, min(knob.high, SMALL_SHAPE_CAP if knob.low >= 1 else 4))
            else:
                fields[knob.name] = st.sampled_from(knob.values())
        return st.fixed_dictionaries(fields)

    @st.composite
    def specs(draw, template):
        try:
            workload = template.workload(**draw(workload_strategy(template.workload)))
        except ExplorerError:
            workload = template.default_workload()
            # keep the default shape but shrink it where the default is large
            small = {knob.name: min(getattr(workload, knob.name), SMALL_SHAPE_CAP) for knob in workload.fields()
                     if knob.kind is int}
            workload = template.workload(**small)
        knobs = template.knobs.fields()
        values = {knob.name: draw(st.sampled_from(knob.values(workload))) for knob in knobs}
        # A third of the draws put one knob outside its domain; the rest exercise real builds.
        if draw(st.integers(0, 2)) == 0:
            corrupted = draw(st.sampled_from(knobs)).name
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
        for knob in template.workload.fields():
            bad = {int: -1, str: "nonsense", bool: "yes"}[knob.kind]
            with pytest.raises(ExplorerError):
                dataclasses.replace(template.default_workload(), **{knob.name: bad})
