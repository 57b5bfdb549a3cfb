"""Durations in words people read: 3600 -> "1 hour". No Django here."""


def hours_minutes(seconds) -> str:
    """3600 -> "1 hour", 5400 -> "1 hour 30 minutes", 90 -> "2 minutes" (rounded), "" for nothing."""
    try:
        total = int(round(float(seconds) / 60))
    except (TypeError, ValueError):
        return ""
    hours, minutes = divmod(max(total, 0), 60)
    parts = []
    if hours:
        parts.append(f"{hours} hour{'s' if hours != 1 else ''}")
    if minutes or not hours:
        parts.append(f"{minutes} minute{'s' if minutes != 1 else ''}")
    return " ".join(parts)
