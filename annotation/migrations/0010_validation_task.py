import django.db.models.deletion
from django.db import migrations, models
from django.db.models import OuterRef, Subquery

HELP = "The example's task (set on save): a task's validations without a join."


def fill(apps, schema_editor):
    Example = apps.get_model("annotation", "Example")
    Validation = apps.get_model("annotation", "Validation")
    Validation.objects.update(task_id=Subquery(Example.objects.filter(pk=OuterRef("example_id")).values("task_id")))


class Migration(migrations.Migration):

    dependencies = [
        ('annotation', '0009_admin_list_indexes'),
        ('tasks', '0005_admin_list_indexes'),
    ]

    operations = [
        migrations.AddField(
            model_name='validation',
            name='task',
            field=models.ForeignKey(null=True, editable=False, help_text=HELP,
                                    on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tasks.task'),
        ),
        migrations.RunPython(fill, migrations.RunPython.noop),
        migrations.AlterField(
            model_name='validation',
            name='task',
            field=models.ForeignKey(editable=False, help_text=HELP,
                                    on_delete=django.db.models.deletion.CASCADE, related_name='+', to='tasks.task'),
        ),
        migrations.AddIndex(
            model_name='validation',
            index=models.Index(fields=['task', 'created_at', 'id'], name='validation_task_created'),
        ),
    ]
