"""Example.decision_posterior's help text names the reliability model's module by its new
name (annotation.reliability_model); no change to the table."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('annotation', '0016_model_versions_in_registry'),
    ]

    operations = [
        migrations.AlterField(
            model_name='example',
            name='decision_posterior',
            field=models.FloatField(blank=True, help_text="Adaptive validation: the probability that the writer's answer is right, after the last counted vote (annotation.reliability_model).", null=True),
        ),
    ]
