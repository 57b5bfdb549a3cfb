from django.db import migrations

DEFAULT_MAX_TRIES = 2  # ONBOARDING_DEFAULTS when this was written


def fit_pools_to_tries(apps, schema_editor):
    """A task config's onboarding items are a pool now: each try draws ``per_try`` items
    no earlier try of the worker was served, so the pool must hold ``per_try`` x
    ``max_tries``. A config stored before, with fewer items than tries (and no
    ``per_try``), would no longer parse: its tries are lowered to its items (a try of one
    fresh item each), rather than any try asking again what an earlier one answered."""
    Task = apps.get_model("tasks", "Task")
    for task in Task.objects.only("pk", "config").iterator():  # a task catalogue: a few rows
        onboarding = (task.config or {}).get("onboarding")
        if not isinstance(onboarding, dict) or "per_try" in onboarding:
            continue
        items = onboarding.get("items")
        if not isinstance(items, list) or not items:
            continue
        if len(items) < onboarding.get("max_tries", DEFAULT_MAX_TRIES):
            config = {**task.config, "onboarding": {**onboarding, "max_tries": len(items)}}
            Task.objects.filter(pk=task.pk).update(config=config)


class Migration(migrations.Migration):

    dependencies = [
        ("tasks", "0009_jobs_and_registry_apps"),
    ]

    operations = [
        migrations.RunPython(fit_pools_to_tries, migrations.RunPython.noop),
    ]
