"""The outbox table, as babelq's own DDL for the connection's database (SQLite or PostgreSQL)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations


def create(apps: Any, schema_editor: Any) -> None:
    from babelq.integrations.django import outbox_table
    from babelq.outbox.schema import ddl

    vendor = schema_editor.connection.vendor
    for statement in ddl(outbox_table(), "sqlite" if vendor == "sqlite" else "postgres"):
        schema_editor.execute(statement)


def drop(apps: Any, schema_editor: Any) -> None:
    from babelq.integrations.django import outbox_table

    schema_editor.execute(f"DROP TABLE IF EXISTS {outbox_table()}")


class Migration(migrations.Migration):  # type: ignore[misc]  # Django ships no type hints
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [migrations.RunPython(create, drop)]
