"""The ``babelq`` data source's options and how its readers open a transport (no SparkSession needed).

The data source end to end, on every broker: ``test_datasource_brokers.py``.
"""

from __future__ import annotations

import pytest

pytest.importorskip("pyspark")

from babelq.errors import ConfigurationError
from babelq.spark.datasource import SourceOptions
from babelq.spark.datasource.connect import reserving_options
from babelq.spark.datasource.options import DEFAULT_VISIBILITY_TIMEOUT
from babelq.spark.datasource.slots import Plan, shares, slot_tag


def test_missing_or_bad_options_fail_clearly() -> None:
    with pytest.raises(ConfigurationError, match="url"):
        SourceOptions.parse({"queue": "q"})
    with pytest.raises(ConfigurationError, match="queue"):
        SourceOptions.parse({"url": "sqlite:///x.db"})
    with pytest.raises(ConfigurationError, match="maxMessagesPerBatch"):
        SourceOptions.parse({"url": "sqlite:///x.db", "queue": "q", "maxMessagesPerBatch": "0"})
    with pytest.raises(ConfigurationError, match="visibilityTimeout"):
        SourceOptions.parse({"url": "sqlite:///x.db", "queue": "q", "visibilityTimeout": "0"})
    with pytest.raises(ConfigurationError, match="consume"):
        SourceOptions.parse({"url": "sqlite:///x.db", "queue": "q", "consume": "maybe"})


def test_option_names_are_case_insensitive() -> None:
    opts = SourceOptions.parse({"URL": "redis://h/0", "Queue": "q", "maxmessagesperbatch": "7"})
    assert (opts.url, opts.queue, opts.max_messages_per_batch) == ("redis://h/0", "q", 7)
    assert opts.visibility_timeout == DEFAULT_VISIBILITY_TIMEOUT


@pytest.mark.parametrize("url", ["sqlite:///x.db", "redis://127.0.0.1:6379/15", "sqs://?region=eu-west-1"])
def test_leased_transports_get_the_visibility_timeout(url: str) -> None:
    opts = SourceOptions.parse({"url": url, "queue": "q", "visibilityTimeout": "12.5"})
    # a reader never creates an SQLite queue database (issue 11)
    expected = {"visibility_timeout": 12.5, **({"create": False} if url.startswith("sqlite") else {})}
    for snapshot in (False, True):
        assert reserving_options(opts, max_held=100, snapshot=snapshot) == expected


def test_slots_share_a_batch_evenly_and_split_big_ones() -> None:
    assert shares(0, 2, 100) == ()
    assert shares(1, 2, 100) == (1,)  # never an empty slot
    assert shares(7, 2, 100) == (4, 3)
    assert shares(20_000, 1, 50_000) == (20_000,)
    assert shares(120_000, 2, 50_000) == (40_000, 40_000, 40_000)  # at most 50k per partition
    opts = SourceOptions.parse({"url": "sqlite:///x.db", "queue": "q", "maxMessagesPerPartition": "10"})
    assert opts.max_messages_per_partition == 10


def test_slot_tags_are_fixed_by_queue_run_batch_and_slot() -> None:
    run = "a" * 32
    tag = slot_tag("q", run, 3, 1)
    assert len(tag) == 32 and int(tag, 16) >= 0
    assert slot_tag("q", run, 3, 1) == tag  # any process derives the same tag from the offset
    others = {
        slot_tag("q", run, 3, 0), slot_tag("q", run, 4, 1), slot_tag("r", run, 3, 1),
        slot_tag("q", "b" * 32, 3, 1),
    }  # fmt: skip
    assert tag not in others and len(others) == 4
    plan = Plan(3, run, (5, 4))
    assert Plan.from_offset(plan.offset()) == plan
    assert Plan.from_offset({"batch": 3}) is None  # an offset of the driver-side design
    assert plan.tags("q") == [slot_tag("q", run, 3, 0), tag]


def test_amqp_gets_a_prefetch_window_for_everything_held_and_basic_get_for_snapshots() -> None:
    opts = SourceOptions.parse({"url": "amqp://guest:guest@127.0.0.1:5672/%2F", "queue": "q"})
    # AMQP reservations are connection-bound: no visibility timeout is passed
    assert reserving_options(opts, max_held=2000, snapshot=False) == {
        "prefetch": 2000,
        "reserve_mode": "consume",
    }
    assert reserving_options(opts, max_held=10**6, snapshot=True) == {
        "prefetch": 65535,
        "reserve_mode": "get",
    }


def test_an_option_written_in_the_url_wins() -> None:
    amqp = SourceOptions.parse({"url": "amqp://h/%2F?prefetch=10&heartbeat=30", "queue": "q"})
    assert reserving_options(amqp, max_held=500, snapshot=False) == {"reserve_mode": "consume"}
    redis = SourceOptions.parse({"url": "redis://h/0?visibility_timeout=9", "queue": "q"})
    assert reserving_options(redis, max_held=500, snapshot=False) == {}
