"""Django: a real project whose views publish through the outbox in transaction.atomic().

A committed view's message is relayed by ``manage.py babelq_relay`` and handled by ``manage.py
babelq_worker``; a view that raises after publishing rolls back its order and its message."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from babelq.envelope import decode
from babelq.transports import open_transport

PG = "postgresql://postgres@127.0.0.1:5432"

FILES = {
    "manage.py": """
        import sys
        from django.core.management import execute_from_command_line
        execute_from_command_line(sys.argv)
    """,
    "settings.py": """
        import json, os
        SECRET_KEY = "test"
        DEBUG = False
        ALLOWED_HOSTS = ["*"]
        USE_TZ = True
        ROOT_URLCONF = "urls"
        INSTALLED_APPS = ["django.contrib.contenttypes", "babelq.integrations.django", "shop"]
        DATABASES = {"default": json.loads(os.environ["SHOP_DATABASE"])}
        BABELQ = {"BROKER": os.environ["SHOP_BROKER"], "QUEUE": "orders", "APP": "shop.worker:app"}
        DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
    """,
    "urls.py": """
        from django.urls import path
        from shop import views
        urlpatterns = [path("orders/<int:n>", views.place)]
    """,
    "shop/__init__.py": "",
    "shop/models.py": """
        from django.db import models

        class Order(models.Model):
            order_id = models.IntegerField(unique=True)
    """,
    "shop/views.py": """
        from django.db import transaction
        from django.http import HttpResponse
        from babelq.integrations.django import publish
        from shop.models import Order

        def place(request, n):
            with transaction.atomic():
                Order.objects.create(order_id=n)
                publish("urn:babel:orders:created", {"order_id": n})
                if n == 13:
                    raise ValueError("unlucky order: the view fails after publishing")
            return HttpResponse("ok")
    """,
    "shop/worker.py": """
        import os
        from babelq.runtime import App, Message

        app = App(queue="orders")

        @app.handler("urn:babel:orders:created")
        def created(message: Message) -> None:
            with open(os.environ["SHOP_HANDLED"], "a") as out:
                out.write(f"{message.data['order_id']}\\n")
    """,
    "drive.py": """
        import json, django
        django.setup()
        from django.test import Client
        from shop.models import Order
        client = Client(raise_request_exception=False)
        codes = [client.get(f"/orders/{n}").status_code for n in (1, 13, 2)]
        orders = sorted(Order.objects.values_list("order_id", flat=True))
        print(json.dumps({"codes": codes, "orders": orders}))
    """,
}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.live)])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, str]]:
    if request.param == "sqlite":
        yield {"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "shop.sqlite3")}
        return
    from conftest import require_service

    require_service("postgres")
    import psycopg

    name = f"babelq_django_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield {"ENGINE": "django.db.backends.postgresql", "NAME": name, "USER": "postgres", "HOST": "127.0.0.1",
           "PORT": "5432"}  # fmt: skip
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.slow
def test_a_rolled_back_view_publishes_nothing(database: dict[str, str], tmp_path: Path) -> None:
    pytest.importorskip("django")
    project = tmp_path / "project"
    for name, text in FILES.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    broker = f"sqlite:///{tmp_path}/broker.db"
    handled = tmp_path / "handled.txt"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "settings",
        "PYTHONPATH": os.pathsep.join([str(project), *sys.path]),
        "SHOP_DATABASE": json.dumps(database),
        "SHOP_BROKER": broker,
        "SHOP_HANDLED": str(handled),
    }

    def run(*argv: str) -> str:
        done = subprocess.run(
            [sys.executable, *argv], cwd=project, env=env, capture_output=True, text=True, timeout=120,
            check=False,
        )  # fmt: skip
        assert done.returncode == 0, f"{argv}: {done.stderr[-2000:]}"
        return done.stdout

    run("manage.py", "makemigrations", "shop")
    run("manage.py", "migrate")
    result = json.loads(run("drive.py").strip().splitlines()[-1])
    assert result == {"codes": [200, 500, 200], "orders": [1, 2]}  # order 13 rolled back

    run("manage.py", "babelq_relay", "--", "--once")
    transport = open_transport(broker)
    try:
        deliveries = transport.reserve("orders", max_messages=10, timeout=0)
        waiting = [d.body for d in deliveries]
        transport.release_many(deliveries)  # for the worker below
    finally:
        transport.close()
    assert sorted(decode(b).data["order_id"] for b in waiting) == [1, 2]  # nothing of order 13

    run("manage.py", "babelq_worker", "--", "--until-empty")
    assert sorted(handled.read_text().split()) == ["1", "2"]
