"""``{{ amount|usd }}``: an amount of money as the crowd's pages show it ("$0.50")."""

from django import template

from crowd.money import money as money_text
from crowd.money import usd as usd_text

register = template.Library()


@register.filter
def usd(value) -> str:
    """Dollars and cents, always two decimals; "—" for no amount."""
    return usd_text(value)


@register.filter
def money(value, currency="USD") -> str:
    """``{{ amount|money:batch.currency }}``: "£0.50" or "$0.50"; "—" for no amount."""
    return money_text(value, currency or "USD")
