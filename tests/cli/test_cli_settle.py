"""``babelq settle`` says where it posts payments: simulated core banking unless ``--bank`` names one.

In-process and fast: the help is read from the parser, the summary from the function that writes
it, and the line settle prints when it starts from a run stopped where Spark would start. A bad
``--bank`` is a row of ``test_cli_errors.py`` (one line, exit code 2).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from babelq.cli import main as cli_main
from babelq.cli.help_format import subparsers_of
from babelq.errors import ConfigurationError

SIMULATED = "simulated core banking"


def _settle_help() -> str:
    [settle] = [sub for sub in subparsers_of(cli_main.build_parser()) if sub.prog == "babelq settle"]
    return re.sub(r"\s+", " ", settle.format_help())


def test_settle_help_says_payments_go_to_simulated_core_banking_unless_bank_is_given() -> None:
    text = _settle_help()
    assert f"Without --bank, payments are posted through {SIMULATED}" in text
    assert "not for real payments" in text
    assert "--bank MODULE:ATTR" in text
    assert f"(docs/pipelines.md; default: {SIMULATED}, creditor accounts ending 0000 fail once" in text


def test_the_summary_names_the_core_banking_the_run_posted_through() -> None:
    from babelq.cli.commands.settle import summary
    from babelq.pipelines.settle import SettleRun, SettleStats

    simulated = summary(SettleRun(SettleStats(), 1.0, True), queue="payments", timeout=60)
    assert simulated.splitlines()[1] == (
        f"  posted through {SIMULATED} (creditor accounts ending 0000 fail once, 9999 always fail "
        "(dead-lettered))")
    real = summary(SettleRun(SettleStats(), 1.0, True, bank="core banking mybank:post"), queue="payments",
                   timeout=60)
    assert "  posted through core banking mybank:post\n" in real and SIMULATED not in real


@pytest.mark.parametrize("bank", [None, "{tmp}/mybank.py:post"])
def test_settle_says_where_it_posts_before_spark_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], bank: str | None
) -> None:
    from babelq.cli.commands import settle

    def no_spark(*_args: object, **_kwargs: object) -> None:
        raise ConfigurationError("stopped where Spark would start")

    monkeypatch.setattr(settle, "start_spark", no_spark)
    (tmp_path / "mybank.py").write_text("def post(payment):\n    pass\n")
    args = ["settle", "--broker", f"sqlite:///{tmp_path}/q.db", "--ledger", str(tmp_path / "ledger.db"),
            "--checkpoint", str(tmp_path / "ck"), "--progress", "none"]
    if bank is not None:
        args += ["--bank", bank.replace("{tmp}", str(tmp_path))]
    assert cli_main.main(args) == 2
    out = capsys.readouterr().out
    said = (f"settle: posting payments through {SIMULATED} (" if bank is None
            else f"settle: posting payments through core banking {tmp_path}/mybank.py:post\n")
    assert out.startswith(said), out
