"""A bonus run's report adds what it paid per currency, never across currencies; Prolific's amounts in minor units."""

from decimal import Decimal

import pytest

from crowd.bonuses import BonusReport


def test_a_run_in_one_currency_says_its_amount_in_that_currency():
    report = BonusReport()
    assert report.amount == Decimal("0.00") and "0 bonuses paid ($0.00)" in str(report)
    report.add_paid(Decimal("0.25"), "GBP")
    report.add_paid(Decimal("0.50"), "GBP")
    assert report.paid == 2 and report.amount == Decimal("0.75") and "2 bonuses paid (£0.75)" in str(report)


def test_a_run_in_two_currencies_keeps_them_apart():
    report = BonusReport()
    report.add_paid(Decimal("0.25"), "GBP")
    report.add_paid(Decimal("1.00"), "USD")
    assert report.amounts == {"GBP": Decimal("0.25"), "USD": Decimal("1.00")}
    assert "2 bonuses paid (£0.25, $1.00)" in str(report)
    with pytest.raises(ValueError, match="several currencies"):
        report.amount  # noqa: B018  (the property refuses to add pounds to dollars)


@pytest.mark.parametrize("answered, expected", [
    (1250, Decimal("12.50")), (1250.0, Decimal("12.50")), (33.3, Decimal("0.33")), (416.5, Decimal("4.17")),
    ("83.25", Decimal("0.83")), (None, None)])
def test_prolific_s_minor_units_become_pounds_or_dollars_to_the_nearest_cent(answered, expected):
    """The bonus set-up answers its fees and total in pence or cents, as numbers that may
    carry a fraction: never truncated (33.3p is £0.33, 416.5p is £4.17)."""
    from crowd.platforms.prolific import _minor_to_major

    assert _minor_to_major(answered) == expected
