"""``manage.py babelq_worker [babelq worker options]``: consume with settings.BABELQ['APP']."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no type hints
    help = "Consume with the handlers of the App in settings.BABELQ['APP'] (babelq worker)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("rest", nargs="*", help="further babelq worker options (--until-empty...)")

    def handle(self, *args: Any, **options: Any) -> None:
        from babelq.cli.main import main
        from babelq.integrations.django import settings

        config = settings()
        if not config.get("APP"):
            raise CommandError("settings.BABELQ['APP']: name the App to run, e.g. 'shop.worker:app'")
        argv = ["worker", "--app", str(config["APP"])]
        if config.get("BROKER"):
            argv += ["--broker", str(config["BROKER"])]
        code = main([*argv, *options["rest"]])
        if code:
            raise CommandError(f"babelq worker exited with {code}", returncode=code)
