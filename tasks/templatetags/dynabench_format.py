"""Template filters for numbers people read: durations in hours and minutes
(``core.durations``, which the job engine uses too)."""

from django import template

from core.durations import hours_minutes

register = template.Library()
register.filter("hours_minutes", hours_minutes)
