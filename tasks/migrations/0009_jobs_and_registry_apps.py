"""Job and ModelVersion leave the task catalogue for their own apps (jobs/, registry/),
keeping their tables: they are deleted here from the migration state only, after
every field that pointed at them points at the new apps (annotation 0016,
leaderboard 0009, and Round.target_models here). No table changes."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tasks', '0008_job_kind_release_dataset'),
        ('jobs', '0001_initial'),
        ('registry', '0001_initial'),
        ('annotation', '0016_model_versions_in_registry'),
        ('leaderboard', '0009_jobs_and_registry_apps'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='round',
                    name='target_models',
                    field=models.ManyToManyField(blank=True, related_name='target_of_rounds', to='registry.modelversion'),
                ),
                migrations.DeleteModel(
                    name='Job',
                ),
                migrations.DeleteModel(
                    name='ModelVersion',
                ),
            ],
            database_operations=[],
        ),
    ]
