"""Job moves from tasks/ to its own app with its table (tasks_job): the model is
created in the migration state only (no table is made: it exists), tasks' 0009
deletes it there in the state only, and the admin's content type (so its permissions
and log entries) follows it by a rename. No data moves."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


def _move_content_type(apps, schema_editor, old_label, new_label):
    """The content type row of ``job`` changes app label, keeping its id: the
    permissions and admin log entries that point at it follow the model. A fresh
    database has no row yet (post_migrate makes it after the whole migrate)."""
    ContentType = apps.get_model("contenttypes", "ContentType")
    rows = ContentType.objects.using(schema_editor.connection.alias)
    if not rows.filter(app_label=new_label, model="job").exists():
        rows.filter(app_label=old_label, model="job").update(app_label=new_label)
    ContentType.objects.clear_cache()


def content_type_to_jobs(apps, schema_editor):
    _move_content_type(apps, schema_editor, "tasks", "jobs")


def content_type_to_tasks(apps, schema_editor):
    _move_content_type(apps, schema_editor, "jobs", "tasks")


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
                    name='Job',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('kind', models.CharField(choices=[('train_model', 'Train a model'), ('evaluate_model', 'Evaluate a model'), ('health_check', 'Health check'), ('check_submission', 'Check a submitted model'), ('export_examples', 'Export examples'), ('release_dataset', 'Release a data set')], max_length=30)),
                        ('status', models.CharField(choices=[('queued', 'Queued'), ('running', 'Running'), ('succeeded', 'Succeeded'), ('failed', 'Failed'), ('cancelled', 'Cancelled')], default='queued', max_length=10)),
                        ('progress', models.PositiveSmallIntegerField(default=0, help_text='0-100')),
                        ('params', models.JSONField(blank=True, default=dict)),
                        ('result', models.JSONField(blank=True, default=dict)),
                        ('log', models.TextField(blank=True)),
                        ('error', models.TextField(blank=True)),
                        ('celery_task_id', models.CharField(blank=True, max_length=100)),
                        ('celery_task_name', models.CharField(blank=True, help_text='What runs it (for re-runs).', max_length=100)),
                        ('queue', models.CharField(blank=True, max_length=30)),
                        ('attempts', models.PositiveSmallIntegerField(default=0, help_text='Times a worker has started it.')),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('started_at', models.DateTimeField(blank=True, null=True)),
                        ('heartbeat_at', models.DateTimeField(blank=True, null=True)),
                        ('finished_at', models.DateTimeField(blank=True, null=True)),
                        ('created_by', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('rerun_of', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='reruns', to='jobs.job')),
                        ('task', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='jobs', to='tasks.task')),
                    ],
                    options={
                        'db_table': 'tasks_job',
                        'ordering': ['-created_at'],
                        'indexes': [models.Index(fields=['status', 'queue', 'created_at'], name='tasks_job_status_3e4ba0_idx')],
                        'constraints': [models.CheckConstraint(condition=models.Q(('progress__lte', 100)), name='job_progress_at_most_100'), models.UniqueConstraint(condition=models.Q(('kind', 'train_model'), ('status__in', ['queued', 'running'])), fields=('task',), name='one_active_training_per_task')],
                    },
                ),
            ],
            database_operations=[],
        ),
        migrations.RunPython(content_type_to_jobs, content_type_to_tasks),
    ]
