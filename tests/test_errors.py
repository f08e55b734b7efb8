"""One conversion of pydantic's errors into the one-line UsageError every command shows (it had seven spellings)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field, ValidationError, field_validator

from gpuval.errors import EXIT_CANNOT_RUN, UsageError, validation_error


class _Model(BaseModel):
    batch_size: int = Field(1, ge=1)
    name: str = "x"

    @field_validator("name")
    @classmethod
    def _no_spaces(cls, value: str) -> str:
        if " " in value:
            raise ValueError("no spaces in a name")
        return value


def _error(**values: object) -> ValidationError:
    with pytest.raises(ValidationError) as caught:
        _Model(**values)
    return caught.value


def test_one_line_with_the_field_and_without_pydantics_prefix():
    found = validation_error(_error(name="a b"))
    assert isinstance(found, UsageError) and found.exit_code == EXIT_CANNOT_RUN
    assert str(found) == "name: no spaces in a name"  # not "Value error, no spaces in a name"
    assert str(validation_error(_error(name="a b"), "train workload arguments", with_field=False)) == \
        "train workload arguments: no spaces in a name"


def test_a_field_spelled_as_its_flag():
    message = str(validation_error(_error(batch_size=0), as_flag=True))
    assert message.startswith("--batch-size: ") and "greater than or equal to 1" in message
    assert "\n" not in message
