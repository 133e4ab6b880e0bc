"""The Django app of babelq: its migration creates the outbox table; its commands run relay and worker."""

from __future__ import annotations

from django.apps import AppConfig


class BabelqConfig(AppConfig):  # type: ignore[misc]  # Django ships no type hints
    name = "babelq.integrations.django"
    label = "babelq"
    verbose_name = "babelq"
