"""Example.model_versions points at ModelVersion in its own app (registry/): the
same table, so the change is to the migration state only."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotation', '0015_example_round_created'),
        ('registry', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='example',
                    name='model_versions',
                    field=models.ManyToManyField(blank=True, related_name='examples', to='registry.modelversion'),
                ),
            ],
            database_operations=[],
        ),
    ]
