"""``babelq worker``: run an application's handlers against a broker until stopped.

    babelq worker --broker redis://localhost:6379/0 --queue orders --app myservice.worker:app
    babelq worker --queue orders,refunds --app myservice.worker:app    # two queues, read in turn
    BABELQ_BROKER=redis://:pw@localhost:6379/0 babelq worker --app myservice.worker:app

``--app module:attr`` names a :class:`babelq.runtime.App` (or a function returning one); the
module is a dotted name (the current directory is importable, as with other application
servers) or a path to a ``.py`` file (:mod:`babelq.runtime.loading`). ``--broker`` (default
``$BABELQ_BROKER``, so a password need not sit on a command line where ``ps`` shows it) binds
the app to that broker; without either, the app's own transport is used. SIGTERM/SIGINT stop
it gracefully: fetching stops, in-flight handlers finish within the grace period, unstarted
messages are released. On exit the counters are printed as one JSON line. ``--url``, this
command's name for ``--broker`` before every command spelled it one way, is still accepted.

Every way ``--app`` can fail to name an App (no colon, no such module, the module raising
while it is imported, no such attribute, a factory that raises) is a
:class:`~babelq.errors.ConfigurationError` naming the spec, which the CLI prints as one line.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from babelq.cli.commands import broker_argument, broker_url, outage_argument, outage_policy, write

if TYPE_CHECKING:
    from babelq.cli.commands import Subparsers
    from babelq.runtime import App
    from babelq.transports import Transport


def register(subparsers: Subparsers) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="consume a queue with an application's handlers",
        description="Consume a queue with the handlers of a babelq.runtime.App until SIGTERM/SIGINT.",
    )
    parser.add_argument(
        "--app", required=True, metavar="MODULE:ATTR",
        help="the App (or a factory of one): a dotted module or a .py file, and its attribute",
    )  # fmt: skip
    broker_argument(
        parser, "--url", required=False, example="redis://127.0.0.1:6379/0", fallback="the App's transport"
    )
    parser.add_argument(
        "--queue",
        metavar="QUEUE[,QUEUE...]",
        help="queue(s) to consume; several, comma-separated, are read fairly in turn "
        "(default: the app's queue)",
    )
    app_default = "(default: the App's setting, {} unless it sets one)"
    parser.add_argument("--concurrency", type=int, help=f"handler threads {app_default.format(1)}")
    parser.add_argument(
        "--prefetch",
        type=int,
        help=f"most messages reserved at once {app_default.format('32 or twice the concurrency')}",
    )
    parser.add_argument(
        "--grace-period",
        type=float,
        metavar="SECONDS",
        help=f"how long in-flight handlers get on shutdown {app_default.format(30)}",
    )
    parser.add_argument(
        "--expire-every",
        type=float,
        metavar="SECONDS",
        help="when idle, dead-letter the queue's expired messages at most this often; 0: never "
        + app_default.format(60),
    )
    parser.add_argument(
        "--until-empty", action="store_true", help="stop when the queue is empty instead of waiting for more"
    )
    parser.add_argument(
        "--max-messages", type=int, help="stop after processing this many messages (default: no limit)"
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        metavar="PORT",
        help="serve Prometheus metrics on this port at /metrics (needs babelq[metrics]; default: off)",
    )
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="log line format; json carries trace_id and meta.id (default: text)",
    )
    outage_argument(parser)
    parser.set_defaults(func=run)


def queue_names(text: str) -> list[str]:
    """``--queue a,b``: the names, in order; an empty name or one given twice is refused."""
    from babelq.runtime.consumer import queue_list

    names = [name.strip() for name in text.split(",")]
    return list(queue_list(names, "--queue", repr(text), " (separate names with commas: a,b)"))


def load_app(spec: str) -> App:
    """The App named by ``module:attr`` (an App, or a callable returning one); the module may be
    a ``.py`` file."""
    from babelq.errors import ConfigurationError
    from babelq.runtime import App
    from babelq.runtime.loading import load_object

    attr = spec.partition(":")[2]
    target = load_object(spec, option="--app", example="myservice.worker:app or ./worker.py:app")
    if not isinstance(target, App) and callable(target):
        try:
            target = target()
        except Exception as exc:
            raise ConfigurationError(
                f"--app {spec!r}: calling {attr!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(target, App):
        raise ConfigurationError(f"--app {spec!r} is a {type(target).__name__}, not a babelq.runtime.App")
    return target


def run(args: argparse.Namespace) -> int:
    """Bind, then drain (``--until-empty``/``--max-messages``) or run until stopped.

    A long-running worker binds the URL itself, so a broker that is down when it starts is
    waited for (the runtime connects on first use). A one-shot drain has nothing to wait for:
    it opens the transport first, so an unreachable broker is one error line now rather than
    a warning followed by the same failure.
    """
    queues = queue_names(args.queue) if args.queue is not None else None
    app = load_app(args.app)
    url = broker_url(args)
    one_shot = args.until_empty or args.max_messages is not None
    owned: Transport | None = None
    if url and one_shot:
        from babelq.transports import open_transport

        owned = open_transport(url)
        app.bind(owned)
    elif url:
        app.bind(url)
    app.tune(
        concurrency=args.concurrency, prefetch=args.prefetch, grace_period=args.grace_period,
        expire_every=args.expire_every, outage_seconds=outage_policy(args).timeout,
    )  # fmt: skip
    if args.log_format == "json" or args.metrics_port is not None:
        from babelq import metrics

        if args.log_format == "json":
            metrics.use_json_format()
        if args.metrics_port is not None:
            metrics.serve(app, args.metrics_port, queue=queues)
    try:
        if one_shot:
            app.drain(args.max_messages, queue=queues, handle_signals=True)
        else:
            app.run(queue=queues)
    finally:
        stats = app.stats()
        app.close()
        if owned is not None:
            owned.close()
    write(json.dumps(shown_stats(stats), sort_keys=True) + "\n")
    return 0


def shown_stats(stats: dict[str, int]) -> dict[str, int]:
    """The counters a person reads at exit: the histogram's raw buckets are the metrics
    exporter's material (``/metrics`` shows them as a histogram), not a summary's."""
    return {k: v for k, v in stats.items() if not k.startswith("latency.")}
