"""The default validation rule moved from fixed 3-matching to the adaptive rule that
bench/validation_frontier.py picks (tasks/config.py, VALIDATION_DEFAULTS). A task made
before that keeps the rule its examples were decided under: its config is given the
old defaults explicitly wherever it left them out, so a running study does not change
its rule in the middle of a round. A researcher switches it in the task's config."""

from django.db import migrations

# VALIDATION_DEFAULTS before the change, written out: a migration must not follow the code.
OLD_DEFAULTS = {"policy": "fixed", "target_confidence": 0.998, "min_votes": 1}


def pin(apps, schema_editor):
    Task = apps.get_model("tasks", "Task")
    for task in Task.objects.only("pk", "config").iterator(chunk_size=500):
        config = task.config if isinstance(task.config, dict) else None
        if config is None:
            continue
        validation = config.get("validation")
        validation = dict(validation) if isinstance(validation, dict) else {}
        missing = {key: value for key, value in OLD_DEFAULTS.items() if key not in validation}
        if not missing:
            continue
        task.config = {**config, "validation": {**validation, **missing}}
        task.save(update_fields=["config"])


class Migration(migrations.Migration):

    dependencies = [
        ("tasks", "0006_job_kind_export_examples"),
    ]

    operations = [
        # Backwards: the explicit old values decide the same as the old defaults did.
        migrations.RunPython(pin, migrations.RunPython.noop),
    ]
