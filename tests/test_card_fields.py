"""Writes to plain fields skip pydantic's call, never its result (issue 30)."""

from __future__ import annotations

import pytest
from pydantic import Field, field_validator

from skillstate import AgentState
from skillstate.errors import StateError
from skillstate.state.card_fields import plain_fields


class Card(AgentState):
    n: int = 0
    ratio: float = 0.0
    name: str = ""
    flag: bool = False
    small: int = Field(default=0, le=10)
    checked: str = ""

    @field_validator("checked")
    @classmethod
    def _upper(cls, value: str) -> str:
        return value.upper()


def card() -> Card:
    return Card(task_id="t")


def test_only_bare_unconstrained_unvalidated_fields_are_plain() -> None:
    plain = plain_fields(Card)
    assert {"n", "ratio", "name", "flag"} <= set(plain)
    assert "small" not in plain
    assert "checked" not in plain


def test_writes_of_the_exact_type_land_as_pydantic_would() -> None:
    after = card().with_writes({"n": 3, "ratio": 0.5, "name": "x", "flag": True})
    assert (after.n, after.ratio, after.name, after.flag) == (3, 0.5, "x", True)
    assert {"n", "ratio", "name", "flag"} <= after.model_fields_set
    assert after == Card.model_validate(
        {**card().model_dump(), "n": 3, "ratio": 0.5, "name": "x", "flag": True}
    )


def test_other_values_still_go_through_validation() -> None:
    assert card().with_writes({"ratio": 2}).ratio == 2.0  # coerced, as before
    assert card().with_writes({"checked": "abc"}).checked == "ABC"  # its validator ran
    with pytest.raises(StateError):
        card().with_writes({"small": 11})  # its constraint holds
    with pytest.raises(StateError):
        card().with_writes({"ratio": float("nan")})  # a card is JSON: no NaN
    with pytest.raises(StateError):
        card().with_writes({"n": "not a number"})
