"""A template's refusal of knobs it cannot take: an InvalidKnobs of one sentence."""
import pytest

from explorer.errors import InvalidKnobs
from explorer.schedules import get_template


def refusal(template: str, workload, knobs) -> InvalidKnobs:
    """The error ``template`` raises for ``knobs`` on ``workload``, checked to be one sentence."""
    with pytest.raises(InvalidKnobs) as error:
        get_template(template).apply(workload, knobs)
    message = str(error.value)
    assert message.count(". ") == 0 and message.endswith("."), message
    return error.value
