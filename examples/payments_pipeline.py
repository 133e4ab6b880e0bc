"""The payment pipeline step by step: generate a bulk file, ingest it, settle it, triage the DLQ.

Run: python examples/payments_pipeline.py [ROWS]   (writes into ./out/example)
"""

from __future__ import annotations

import logging
import shutil
import sys
from pathlib import Path

from babelq.envelope import dlq_name
from babelq.pipelines.dlq import triage
from babelq.pipelines.generator import generate_bulk_file
from babelq.pipelines.ingest import ingest
from babelq.pipelines.ledger import open_ledger
from babelq.pipelines.settle import settle
from babelq.spark.session import get_session
from babelq.transports import open_transport


def main(rows: int) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    out = Path("out/example").resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    url = f"sqlite://{out}/queue.db"

    bulk = generate_bulk_file(out / "payments.csv", rows)
    spark = get_session("babelq-example")
    ingested = ingest(spark, bulk.path, url=url, queue="payments", rejects_path=out / "rejects")
    settled = settle(
        spark,
        url=url,
        queue="payments",
        ledger=out / "ledger.db",
        checkpoint=out / "checkpoint",
        retry_delay_ms=200,
    )
    ledger = open_ledger(out / "ledger.db")
    entries, references, _ = ledger.totals()
    ledger.close()
    transport = open_transport(url)
    report = triage(transport, dlq_name("payments"))
    transport.close()

    print(
        f"ingested {ingested.rows_in}: published {ingested.published}, rejected {ingested.rejected_by_reason}"
    )
    print(f"settled in {settled.stats.batches} micro-batches: {dict(settled.stats.outcomes)}")
    print(f"ledger: {entries} entries, {references} distinct references")
    print(report.table())
    spark.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5_000)
