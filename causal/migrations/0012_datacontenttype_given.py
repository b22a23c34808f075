from django.db import migrations, models


def add_column(apps, schema_editor):
    """One ALTER TABLE ADD COLUMN with a constant default: no rewrite of the Events table (an
    AddField rebuilds the whole table on SQLite)."""
    table = schema_editor.quote_name("causal_event")
    column = schema_editor.quote_name("datacontenttype_given")
    kind = "bool" if schema_editor.connection.vendor == "sqlite" else "boolean"
    schema_editor.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind} NOT NULL DEFAULT false")


def drop_column(apps, schema_editor):
    table = schema_editor.quote_name("causal_event")
    schema_editor.execute(f"ALTER TABLE {table} DROP COLUMN {schema_editor.quote_name('datacontenttype_given')}")


class Migration(migrations.Migration):
    dependencies = [
        ("causal", "0011_diagnostic_occurrences"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddField(
                    model_name="event",
                    name="datacontenttype_given",
                    field=models.BooleanField(default=False),
                ),
            ],
            database_operations=[migrations.RunPython(add_column, drop_column)],
        ),
    ]
