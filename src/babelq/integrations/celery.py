"""Celery: one worker process runs Celery tasks and babelq handlers, on the Celery app's broker.

::

    from celery import Celery
    from babelq.integrations.celery import install

    celery_app = Celery("shop", broker="redis://127.0.0.1:6379/0")
    envelopes = install(celery_app, queue="orders")      # a babelq App, handlers as usual

    @envelopes.handler("urn:babel:orders:created")
    def created(message): ...

``celery -A shop worker`` then consumes both: Celery's tasks as always, and BabelQueue envelopes
from ``queue`` through a worker bootstep that starts the App's consume loop on a thread of its
own when the worker starts and stops it gracefully (in-flight handlers finish within the App's
grace period) when the worker shuts down. The App talks to the Celery app's broker URL (Redis,
RabbitMQ: ``amqp://``, ...) unless ``broker=`` names another; envelopes keep their own queues
and format, so other SDKs' workers read them, and Celery's messages never reach the handlers.
"""

from __future__ import annotations

import threading
from typing import Any

from babelq.errors import ConfigurationError
from babelq.runtime import App

#: seconds a worker's shutdown waits for the consumer beyond the App's grace period
_STOP_MARGIN_S = 5.0


def install(celery_app: Any, *, queue: str, broker: str | None = None, **options: Any) -> App:
    """A babelq App on ``celery_app``'s broker, run by every worker of ``celery_app``.

    ``options`` are :class:`~babelq.runtime.App`'s (``concurrency``, ``max_attempts``...)."""
    from celery import bootsteps

    url = broker or celery_app.conf.broker_url
    if not url:
        raise ConfigurationError("broker: the Celery app has no broker_url; pass broker=URL")
    app = App(queue=queue, **options)
    app.bind(str(url).replace("pyamqp://", "amqp://", 1))

    class BabelqConsumer(bootsteps.StartStopStep):  # type: ignore[misc]  # Celery ships no type hints
        """Starts the App's consumer with the worker and stops it with the worker."""

        requires = ("celery.worker.components:Pool",)

        def __init__(self, worker: Any, **kwargs: Any) -> None:
            super().__init__(worker, **kwargs)
            self.thread: threading.Thread | None = None

        def start(self, worker: Any) -> None:
            self.thread = threading.Thread(
                target=app.run, kwargs={"handle_signals": False}, name="babelq-consumer", daemon=True
            )
            self.thread.start()

        def stop(self, worker: Any) -> None:
            app.stop()
            if self.thread is not None:
                self.thread.join(app.tuning.grace_period + _STOP_MARGIN_S)
            app.close()

    celery_app.steps["worker"].add(BabelqConsumer)
    return app
