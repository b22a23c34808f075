"""Migration operations shared by the apps."""

from __future__ import annotations

from django.db import migrations


def drop_field_index(app_label: str, operation: migrations.AlterField) -> migrations.SeparateDatabaseAndState:
    """``operation`` (a field altered to ``db_index=False``) in the migration state, and in the
    database only the plain index Django made for that field, dropped by its own name (with
    the ``_like`` index PostgreSQL has beside it for a text field).

    Django's ``AlterField`` would drop every b-tree index on the column that ``Meta.indexes``
    does not name, the unique partial index of a conditional ``UniqueConstraint`` included
    (PostgreSQL), and rebuild the whole table on SQLite."""

    def index(apps, schema_editor):
        model = apps.get_model(app_label, operation.model_name)
        field = model._meta.get_field(operation.name)
        return model, field, schema_editor._create_index_name(model._meta.db_table, [field.column], suffix="")

    def like_index(schema_editor, model, field):
        """The CREATE statement of PostgreSQL's ``_like`` index for the indexed field, or None
        (another database, or a field that is not text)."""
        create = getattr(schema_editor, "_create_like_index_sql", None)
        return create(model, field) if create is not None else None

    def forwards(apps, schema_editor):
        model, field, name = index(apps, schema_editor)
        schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name)}")
        if like_index(schema_editor, model, field) is not None:
            schema_editor.execute(f"DROP INDEX IF EXISTS {schema_editor.quote_name(name + '_like')}")

    def backwards(apps, schema_editor):
        model, field, _ = index(apps, schema_editor)
        schema_editor.execute(schema_editor._create_index_sql(model, fields=[field]))
        if (statement := like_index(schema_editor, model, field)) is not None:
            schema_editor.execute(statement)

    return migrations.SeparateDatabaseAndState(
        state_operations=[operation],
        database_operations=[migrations.RunPython(forwards, backwards)],
    )
