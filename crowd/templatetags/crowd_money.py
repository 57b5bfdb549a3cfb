"""``{{ amount|usd }}``: an amount of money as the crowd's pages show it ("$0.50")."""

from django import template

from crowd.money import usd as usd_text

register = template.Library()


@register.filter
def usd(value) -> str:
    """Dollars and cents, always two decimals; "—" for no amount."""
    return usd_text(value)
