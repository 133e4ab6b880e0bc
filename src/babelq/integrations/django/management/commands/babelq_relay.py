"""``manage.py babelq_relay [babelq relay options]``: publish the outbox's committed rows."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    help = "Publish committed outbox rows to the broker in settings.BABELQ['BROKER'] (babelq relay)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--using", default="default", help="the Django database of the outbox")
        parser.add_argument(
            "rest", nargs="*", help="further babelq relay options (--once, --publish-batch N...)"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        from babelq.cli.main import main
        from babelq.integrations.django import outbox_table, outbox_url, settings

        broker = settings().get("BROKER")
        argv = ["relay", "--outbox", outbox_url(options["using"]), "--table", outbox_table()]
        if broker:
            argv += ["--broker", str(broker)]
        code = main([*argv, *options["rest"]])
        if code:
            raise CommandError(f"babelq relay exited with {code}", returncode=code)
