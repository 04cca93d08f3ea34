import pytest
from hypothesis import given
from hypothesis import strategies as st

from infra.errors import TrainfleetError
from infra.units import format_count, parse_count, parse_hours


@pytest.mark.parametrize(
    "text,value",
    [("7B", 7_000_000_000), ("6.7B", 6_700_000_000), ("1T", 10**12), ("350M", 350_000_000), ("12k", 12_000),
     (7e9, 7_000_000_000), ("2048", 2048)],
)  # fmt: skip
def test_parse_count(text, value):
    assert parse_count(text) == value


@pytest.mark.parametrize("bad", ["", "7X", "-3B", "0", "B", True, None, float("nan"), "1e400"])
def test_parse_count_rejects(bad):
    with pytest.raises(TrainfleetError):
        parse_count(bad)


@given(st.integers(min_value=1, max_value=10**16))
def test_format_count_round_trips(n):
    assert parse_count(format_count(n)) == n


def test_format_count_is_short_for_round_sizes():
    assert format_count(7_000_000_000) == "7B"
    assert format_count(1_300_000_000) == "1.3B"
    assert format_count(10**12) == "1T"


@pytest.mark.parametrize("text,hours", [("72h", 72), ("3d", 72), ("90min", 1.5), (12, 12), ("1w", 168)])
def test_parse_hours(text, hours):
    assert parse_hours(text) == pytest.approx(hours)


@pytest.mark.parametrize("bad", ["soon", "-2h", "0h", "h"])
def test_parse_hours_rejects(bad):
    with pytest.raises(TrainfleetError):
        parse_hours(bad)
