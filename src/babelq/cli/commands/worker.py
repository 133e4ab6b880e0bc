"""``babelq worker``: run an application's handlers against a broker until stopped.

    babelq worker --url redis://localhost:6379/0 --queue orders --app myservice.worker:app

``--app module:attr`` names a :class:`babelq.runtime.App` (or a function returning one);
the current directory is importable, as with other application servers. ``--url`` binds the
app to that broker (an app created without a transport needs it). SIGTERM/SIGINT stop it
gracefully: fetching stops, in-flight handlers finish within the grace period, unstarted
messages are released. On exit the counters are printed as one JSON line.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers
    from babelq.runtime import App


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="consume a queue with an application's handlers",
        description="Consume a queue with the handlers of a babelq.runtime.App until SIGTERM/SIGINT.",
    )
    parser.add_argument("--app", required=True, metavar="MODULE:ATTR", help="the App (or a factory of one)")
    parser.add_argument("--url", help="broker URL (memory://, sqlite:///q.db, redis://, amqp://, sqs://)")
    parser.add_argument("--queue", help="queue to consume (default: the app's queue)")
    parser.add_argument("--concurrency", type=int, help="handler threads")
    parser.add_argument("--prefetch", type=int, help="most messages reserved at once")
    parser.add_argument("--grace-period", type=float, help="seconds in-flight handlers get on shutdown")
    parser.add_argument(
        "--until-empty", action="store_true", help="stop when the queue is empty instead of waiting for more"
    )
    parser.add_argument("--max-messages", type=int, help="stop after processing this many messages")
    parser.set_defaults(func=run)


def load_app(spec: str) -> App:
    """The App named by ``module:attr`` (an App, or a callable returning one)."""
    from babelq.errors import ConfigurationError
    from babelq.runtime import App

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(f"--app: expected MODULE:ATTR, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module = importlib.import_module(module_name)
    target: Any = module
    for part in attr.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ConfigurationError(f"--app: {module_name!r} has no attribute {attr!r}") from None
    if not isinstance(target, App) and callable(target):
        target = target()
    if not isinstance(target, App):
        raise ConfigurationError(f"--app: {spec!r} is a {type(target).__name__}, not a babelq.runtime.App")
    return target


def run(args: argparse.Namespace) -> int:
    app = load_app(args.app)
    if args.url:
        app.bind(args.url)
    app.tune(concurrency=args.concurrency, prefetch=args.prefetch, grace_period=args.grace_period)
    try:
        if args.until_empty or args.max_messages is not None:
            app.drain(args.max_messages, queue=args.queue, handle_signals=True)
        else:
            app.run(queue=args.queue)
    finally:
        stats = app.stats()
        app.close()
    from babelq.cli.commands import write

    write(json.dumps(stats, sort_keys=True) + "\n")
    return 0
