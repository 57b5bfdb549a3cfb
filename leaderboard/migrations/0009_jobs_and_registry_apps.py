"""Evaluations, promotions and releases point at Job and ModelVersion in their own apps
(jobs/, registry/): the same tables, so the changes are to the migration state only.
The Submission proxy is made again on the registry's ModelVersion (a proxy has no
table: nothing happens in the database)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('leaderboard', '0008_release'),
        ('jobs', '0001_initial'),
        ('registry', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='evaluation',
                    name='job',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='jobs.job'),
                ),
                migrations.AlterField(
                    model_name='evaluation',
                    name='model_version',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='evaluations', to='registry.modelversion'),
                ),
                migrations.AlterField(
                    model_name='promotion',
                    name='model_version',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='promotions', to='registry.modelversion'),
                ),
                migrations.AlterField(
                    model_name='release',
                    name='job',
                    field=models.ForeignKey(blank=True, help_text='The job that made it.', null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='jobs.job'),
                ),
                migrations.DeleteModel(
                    name='Submission',
                ),
                migrations.CreateModel(
                    name='Submission',
                    fields=[
                    ],
                    options={
                        'verbose_name': 'model submission',
                        'proxy': True,
                        'indexes': [],
                        'constraints': [],
                    },
                    bases=('registry.modelversion',),
                ),
            ],
            database_operations=[],
        ),
    ]
