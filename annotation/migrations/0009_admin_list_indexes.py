"""Indexes for the admin's lists (the orders and filters they use, the exact searches),
and on PostgreSQL only, a GIN index on the words of an example's inputs for the admin's
text search (``annotation.admin.inputs_text_search`` uses the same expression)."""

from django.db import migrations, models

INPUTS_WORDS_INDEX = "example_inputs_words"


def _inputs_words_index():
    from django.contrib.postgres.indexes import GinIndex
    from django.contrib.postgres.search import SearchVector

    return GinIndex(SearchVector("inputs", config="english"), name=INPUTS_WORDS_INDEX)


def add_inputs_words_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.add_index(apps.get_model("annotation", "Example"), _inputs_words_index())


def remove_inputs_words_index(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.remove_index(apps.get_model("annotation", "Example"), _inputs_words_index())


class Migration(migrations.Migration):

    dependencies = [
        ("annotation", "0008_examples_list_indexes"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="annotationsession",
            index=models.Index(fields=["created_at", "id"], name="session_created"),
        ),
        migrations.AddIndex(
            model_name="example",
            index=models.Index(fields=["task", "created_at"], name="example_task_created"),
        ),
        migrations.AddIndex(
            model_name="example",
            index=models.Index(fields=["validation_status", "created_at"], name="example_status_created"),
        ),
        migrations.AddIndex(
            model_name="example",
            index=models.Index(condition=models.Q(("flagged", True)), fields=["created_at"],
                               name="example_flagged_created"),
        ),
        migrations.AddIndex(
            model_name="example",
            index=models.Index(condition=models.Q(("retracted", True)), fields=["created_at"],
                               name="example_retracted_created"),
        ),
        migrations.AddIndex(
            model_name="example",
            index=models.Index(fields=["external_uid"], name="example_external_uid"),
        ),
        migrations.AddIndex(
            model_name="validation",
            index=models.Index(fields=["created_at", "id"], name="validation_created"),
        ),
        migrations.AddIndex(
            model_name="validatorreliability",
            index=models.Index(fields=["task", "-votes", "-id"], name="reliability_task_votes"),
        ),
        migrations.RunPython(add_inputs_words_index, remove_inputs_words_index, elidable=False),
    ]
