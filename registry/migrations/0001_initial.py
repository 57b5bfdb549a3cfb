"""ModelVersion moves from tasks/ to its own app with its table (tasks_modelversion): the model is
created in the migration state only (no table is made: it exists), tasks' 0009
deletes it there in the state only, and the admin's content type (so its permissions
and log entries) follows it by a rename. No data moves."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _move_content_type(apps, schema_editor, old_label, new_label):
    """The content type row of ``modelversion`` changes app label, keeping its id: the
    permissions and admin log entries that point at it follow the model. A fresh
    database has no row yet (post_migrate makes it after the whole migrate)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    rows = ContentType.objects.using(schema_editor.connection.alias)
    if not rows.filter(app_label=new_label, model="modelversion").exists():
        rows.filter(app_label=old_label, model="modelversion").update(app_label=new_label)
    ContentType.objects.clear_cache()


def content_type_to_registry(apps, schema_editor):
    _move_content_type(apps, schema_editor, "tasks", "registry")


def content_type_to_tasks(apps, schema_editor):
    _move_content_type(apps, schema_editor, "registry", "tasks")


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('tasks', '0008_job_kind_release_dataset'),
        ('contenttypes', '0002_remove_content_type_name'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='ModelVersion',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100)),
                        ('artifact_path', models.CharField(help_text='Artifact directory; relative paths are under DYNABENCH_MODELS_DIR.', max_length=500)),
                        ('sha256', models.CharField(help_text="Digest over the artifact's files, checked on load.", max_length=64)),
                        ('backbone', models.CharField(blank=True, max_length=200)),
                        ('training_data', models.JSONField(blank=True, default=dict, help_text='Sources and counts per split and label.')),
                        ('metrics', models.JSONField(blank=True, default=dict)),
                        ('status', models.CharField(choices=[('ready', 'Ready'), ('retired', 'Retired')], default='ready', max_length=10)),
                        ('is_public', models.BooleanField(default=True, help_text="Shown on the public leaderboard; a private one only to its owner and the task's researchers.", verbose_name='public')),
                        ('submitted', models.BooleanField(default=False, help_text='Uploaded by a user (not trained on the platform).')),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('parent', models.ForeignKey(blank=True, help_text='The model this one was fine-tuned from, if any.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='children', to='registry.modelversion')),
                        ('task', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='model_versions', to='tasks.task')),
                        ('trained_on_rounds', models.ManyToManyField(blank=True, related_name='trained_models', to='tasks.round')),
                    ],
                    options={
                        'db_table': 'tasks_modelversion',
                        'ordering': ['task', '-created_at'],
                        'constraints': [models.UniqueConstraint(fields=('task', 'name'), name='model_name_unique_per_task')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_to_registry, content_type_to_tasks),
    ]
