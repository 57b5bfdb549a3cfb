"""Money in USD: rounding to the cent, and the one way the crowd shows an amount."""

from decimal import ROUND_HALF_UP, Decimal

CENT = Decimal("0.01")


def cents(value) -> Decimal:
    return Decimal(value).quantize(CENT, rounding=ROUND_HALF_UP)


def usd(value) -> str:
    """An amount as every crowd page and message shows it: dollars and cents, two
    decimals always ("$0.50", never "$0.5"); "—" for no amount."""
    if value is None or value == "":
        return "—"
    amount = cents(Decimal(str(value)))
    return f"-${-amount}" if amount < 0 else f"${amount}"


SYMBOLS = {"USD": "$", "GBP": "£"}


def money(value, currency: str = "USD") -> str:
    """An amount in ``currency`` as ``usd`` shows dollars: "£0.50", "$0.50"; "—" for none."""
    if value is None or value == "":
        return "—"
    amount = cents(Decimal(str(value)))
    symbol = SYMBOLS.get(currency, f"{currency} ")
    return f"-{symbol}{-amount}" if amount < 0 else f"{symbol}{amount}"
