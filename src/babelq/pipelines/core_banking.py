"""Core banking, where settle posts each payment: a deterministic simulator, or a bank of yours.

**The simulator** (:class:`CoreBankingSimulator`, what settle and the demo use unless told
otherwise) makes failures reproducible in tests and the demo. It decides from the creditor
account alone: an account ending in :data:`TRANSIENT_SUFFIX` fails its first
``transient_failures`` attempts and then succeeds; one ending in :data:`CLOSED_SUFFIX` always
fails, so it exhausts its retries and is dead-lettered. Everything settle prints about a run it
posted through the simulator says :data:`SIMULATED`.

**Your bank** (``babelq settle --bank MODULE:ATTR``): ``ATTR`` is an object with a
``post(payment)`` method, a class of such objects (made once per Python process, without
arguments), or a function ``post(payment)``. ``payment`` is a
:class:`~babelq.pipelines.ledger.Posting` (``message_id``, ``payment_reference``,
``amount_cents``, ``currency``, the debtor's and creditor's BSB and account, ``correlation_id``,
``trace_id``, ``attempts``, ``posted_at``). What ``post`` does decides the message's fate, as a
worker handler's does (:func:`babelq.runtime.routing.invoke`):

* returns: accepted; the payment goes into the ledger;
* raises :class:`~babelq.runtime.errors.PermanentError`: refused for good; dead-lettered now
  (reason ``failed``, the error's ``cause`` or ``rejected``);
* raises :class:`~babelq.errors.UnavailableError`: core banking itself is down, which is never
  the message's fault: the partition's transaction is run again after a pause, and when the
  outage lasts the micro-batch fails and is delivered again;
* raises anything else (:class:`CoreBankingError`, a timeout...): a failed attempt, retried
  after the backoff and dead-lettered (cause ``max_attempts``) once the attempts ran out.

``post`` runs inside the partition's ledger transaction, before the payment is written (the
payments pipeline's batch handler, :mod:`babelq.pipelines.payments`), so it may see a payment
again (a transaction run again through an outage, a micro-batch delivered again after a crash,
a copy read by two slots, the same payment under another ``meta.id``): it must be idempotent
on ``payment_reference``, as the ledger is.

``MODULE`` is a dotted module name or a path to a ``.py`` file. Spark's Python workers import
it themselves (:func:`bank_post`): only the spec (:class:`BankSpec`) travels with the task, never
a pickled object, which a client holding a connection could not be.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol

from babelq.errors import ConfigurationError, PermanentError
from babelq.errors import CoreBankingError as CoreBankingError
from babelq.pipelines.ledger import Posting

TRANSIENT_SUFFIX = "0000"
CLOSED_SUFFIX = "9999"

#: How a run posted through the simulator is named wherever settle or the demo reports it.
SIMULATED = "simulated core banking"
#: The simulator's rules, for a person reading settle's help, summary or the demo's report.
SIMULATED_RULES = (
    f"creditor accounts ending {TRANSIENT_SUFFIX} fail once, {CLOSED_SUFFIX} always fail (dead-lettered)"
)
#: :func:`describe_bank` of the simulator
SIMULATED_DESCRIPTION = f"{SIMULATED} ({SIMULATED_RULES})"


def refusal_text(exc: BaseException) -> str:
    """The dead letter's ``error`` for what a bank raised: its own words, saying who refused."""
    text = str(exc) if isinstance(exc, (CoreBankingError, PermanentError)) else f"{type(exc).__name__}: {exc}"
    return text if text.startswith("core banking") else f"core banking: {text}"


class Bank(Protocol):
    """What ``--bank`` names: an object that posts one payment (see the module docstring)."""

    def post(self, payment: Posting) -> None: ...


#: A bank's posting function: returns when the payment is accepted, raises otherwise.
Post = Callable[[Posting], object]


@dataclass(frozen=True, slots=True)
class CoreBankingSimulator:
    transient_failures: int = 1

    def failure(self, data: Mapping[str, Any], attempts: int) -> str | None:
        """Why core banking refuses this transfer at this attempt, or ``None`` when it accepts it."""
        return self._refusal(str(data.get("creditor_account", "")), attempts)

    def post(self, payment: Posting) -> None:
        """The :class:`Bank` protocol: raises :class:`CoreBankingError` when :meth:`failure` refuses."""
        refusal = self._refusal(str(payment.creditor_account), payment.attempts)
        if refusal is not None:
            raise CoreBankingError(refusal)

    def _refusal(self, account: str, attempts: int) -> str | None:
        if account.endswith(CLOSED_SUFFIX):
            return "core banking: creditor account closed (simulated)"
        if account.endswith(TRANSIENT_SUFFIX) and attempts < self.transient_failures:
            return "core banking: timeout (simulated transient failure)"
        return None


@dataclass(frozen=True, slots=True)
class BankSpec:
    """``--bank MODULE:ATTR`` parsed (:func:`parse_bank`): what travels to the executors."""

    text: str  #: as the person wrote it
    module: str  #: a dotted module name, or the absolute path of a ``.py`` file when ``path``
    attr: str
    path: bool = False
    #: the driver's working directory: where a module named relative to it is looked for on a
    #: local master, whose Python workers may start elsewhere
    search: str = ""

    def __str__(self) -> str:
        return self.text


#: what settle takes for its bank: None (the simulator), a spec, or an object or function itself
BankChoice = BankSpec | Bank | Post | None


def parse_bank(text: str) -> BankSpec:
    """``MODULE:ATTR`` as a :class:`BankSpec` (a relative ``.py`` path made absolute); the text
    only, nothing is imported (:func:`bank_post` does)."""
    module, sep, attr = text.strip().rpartition(":")
    if not sep or not module or not attr or not attr.replace(".", "").replace("_", "").isalnum():
        raise ConfigurationError(
            f"expected MODULE:ATTR (e.g. mybank.client:post or ./bank.py:post), got {text!r}")
    path = module.endswith(".py") or "/" in module or os.sep in module
    if path:
        module = str(Path(module).expanduser().resolve())
    return BankSpec(text, module, attr, path, os.getcwd())


#: a process's loaded banks, by spec: a Python worker imports a bank once, not once per partition
_LOADED: dict[BankSpec, Post] = {}
_DEFAULT = CoreBankingSimulator()


def bank_post(bank: BankChoice) -> Post:
    """The posting function of ``bank``: the simulator's for None, a spec's imported (once per
    process), an object's ``post``. Raises :class:`~babelq.errors.ConfigurationError` (without
    the option's name) when it names nothing usable."""
    if bank is None:
        return _DEFAULT.post
    if isinstance(bank, BankSpec):
        post = _LOADED.get(bank)
        if post is None:
            post = _LOADED[bank] = _post_of(_attribute(bank), repr(bank.attr))
        return post
    return _post_of(bank, type(bank).__name__)


def is_simulated(post: Post) -> bool:
    """Whether ``post`` is the simulator's (also when ``--bank`` names the simulator itself)."""
    return isinstance(getattr(post, "__self__", None), CoreBankingSimulator)


def describe_bank(bank: BankChoice) -> str:
    """One line naming where ``bank`` posts, for logs, summaries and the report."""
    if is_simulated(bank_post(bank)):
        return SIMULATED_DESCRIPTION
    if isinstance(bank, BankSpec):
        return f"core banking {bank.text}"
    name = getattr(bank, "__qualname__", None) or type(bank).__qualname__
    return f"core banking {getattr(bank, '__module__', '?')}.{name}"


def _post_of(target: Any, name: str) -> Post:
    """``target``'s posting function: its ``post`` method (a class is made first), or itself."""
    if isinstance(target, type):
        try:
            target = target()
        except Exception as exc:
            raise ConfigurationError(f"making {name}() failed: {type(exc).__name__}: {exc}") from exc
    method = getattr(target, "post", None)
    post: Any = method if callable(method) else target
    if not callable(post):
        raise ConfigurationError(
            f"{name} is of type {type(target).__name__}: expected an object with a post(payment) method, "
            "a class of them or a function post(payment)")
    try:
        inspect.signature(post).bind(None)
    except TypeError:
        raise ConfigurationError(
            f"{name}: post must take one argument, the payment; its signature is {inspect.signature(post)}"
        ) from None
    except ValueError:  # no signature to read (some built-ins): take it as it is
        pass
    return post  # type: ignore[no-any-return]


def _attribute(spec: BankSpec) -> Any:
    module = _import(spec)
    target: Any = module
    for part in spec.attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigurationError(f"{_where(spec)} has no attribute {spec.attr!r}") from None
    return target


def _where(spec: BankSpec) -> str:
    return spec.module if spec.path else repr(spec.module)


def _import(spec: BankSpec) -> ModuleType:
    """The module of ``spec``; every failure a ConfigurationError naming it."""
    try:
        if spec.path:
            return _import_file(spec.module)
        if spec.search and spec.search not in sys.path:
            sys.path.append(spec.search)
        return importlib.import_module(spec.module)
    except ConfigurationError:
        raise
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not spec.path and (missing == spec.module or spec.module.startswith(missing + ".")):
            raise ConfigurationError(
                f"no module named {missing!r} (run from the directory that holds it, or add that "
                "directory to PYTHONPATH)") from exc
        raise ConfigurationError(f"importing {_where(spec)} failed: {exc}") from exc
    except Exception as exc:
        raise ConfigurationError(f"importing {_where(spec)} failed: {type(exc).__name__}: {exc}") from exc


def _import_file(path: str) -> ModuleType:
    """The ``.py`` file at ``path`` as a module; on an executor that does not have the path (a
    cluster), the copy settle shipped with the job (``SparkContext.addFile``)."""
    file = Path(path)
    if not file.is_file():
        shipped = _shipped(file.name)
        if shipped is None:
            raise ConfigurationError(f"no such file: {path}")
        file = shipped
    # a name of its own per file: two banks named bank.py, or one named like a library, do not collide
    name = "babelq_bank_" + hashlib.sha256(str(file).encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    loader_spec = importlib.util.spec_from_file_location(name, file)
    if loader_spec is None or loader_spec.loader is None:
        raise ConfigurationError(f"cannot import {path}: not a Python file")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[name] = module  # before it runs: dataclasses and pickling look their module up
    try:
        loader_spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _shipped(name: str) -> Path | None:
    """Where Spark put a file the job shipped, on this executor (None outside Spark, or not shipped)."""
    try:
        from pyspark import SparkFiles

        candidate = Path(SparkFiles.get(name))
    except Exception:  # not in a Spark process
        return None
    return candidate if candidate.is_file() else None
