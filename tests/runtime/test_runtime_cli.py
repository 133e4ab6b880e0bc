"""``babelq worker``: loads an App from module:attr, binds it to --url, consumes."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from babelq.cli.main import main
from babelq.envelope import make
from babelq.transports import open_transport

APP_MODULE = textwrap.dedent(
    """
    from pathlib import Path
    from babelq.runtime import App

    app = App(queue="cli-orders")
    seen = Path(__file__).with_name("seen.txt")

    @app.handler("urn:babel:orders:created")
    def created(message):
        with seen.open("a") as f:
            f.write(message.id + "\\n")

    def factory():
        return app
    """
)


@pytest.fixture
def app_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "cli_worker_app.py").write_text(APP_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "cli_worker_app", raising=False)
    yield tmp_path
    sys.modules.pop("cli_worker_app", None)


@pytest.mark.parametrize("attr", ["app", "factory"])
def test_worker_command_drains_queue_and_prints_stats(
    attr: str, app_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{app_dir}/q.db"
    transport = open_transport(url)
    ids = []
    for n in range(5):
        env = make("urn:babel:orders:created", {"n": n}, queue="cli-orders")
        transport.publish("cli-orders", env.encode())
        ids.append(env.id)
    transport.publish("cli-orders", b"garbage")
    transport.close()

    code = main(
        ["worker", "--url", url, "--app", f"cli_worker_app:{attr}", "--until-empty", "--concurrency", "2"]
    )

    assert code == 0
    stats = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert stats["handled"] == 5 and stats["dead_lettered.poison"] == 1
    assert sorted((app_dir / "seen.txt").read_text().split()) == sorted(ids)
    transport = open_transport(url)
    assert transport.size("cli-orders") == 0 and transport.size("cli-orders.dlq") == 1
    transport.close()


def test_worker_command_reports_a_bad_app_spec(app_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["worker", "--url", "memory://", "--app", "cli_worker_app"]) == 2
    assert "MODULE:ATTR" in capsys.readouterr().err
    assert main(["worker", "--url", "memory://", "--app", "cli_worker_app:nope"]) == 2
    assert "no attribute" in capsys.readouterr().err
    assert main(["worker", "--url", "memory://", "--app", "cli_worker_app:seen"]) == 2
    assert "not a babelq.runtime.App" in capsys.readouterr().err
