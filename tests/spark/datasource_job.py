"""A batch job that writes through ``df.write.format("eosink")``: the whole job is one batch of an app_id.

Usage: datasource_job.py <sink.db> <app_id> <batch_id> <rows> [<offset>]. Writes ``rows`` rows
(ids from ``offset``) to the reference sink; exit 0 when written or skipped, 3 on an eosink
error (its class and message on stderr's last line).
"""

import sys


def main(argv: list[str]) -> int:
    sink_path, app_id, batch_id, rows = argv[:4]
    offset = int(argv[4]) if len(argv) > 4 else 0
    from eosink.demo.session import job_session

    spark = job_session("local[2,4]", "eosink-job")
    import eosink.spark

    eosink.spark.register(spark)
    df = spark.range(offset, offset + int(rows), numPartitions=3).selectExpr("id", "id % 7 AS amount")
    try:
        (
            df.write.format("eosink")
            .mode("append")
            .option("sink", "reference")
            .option("reference.path", sink_path)
            .option("app_id", app_id)
            .option("batch_id", batch_id)
            .save()
        )
    except Exception as exc:
        kinds = [w for w in str(exc).replace(":", " ").split() if w.startswith("eosink.errors.")]
        print(f"eosink-error {kinds[-1] if kinds else type(exc).__name__}", file=sys.stderr, flush=True)
        spark.stop()
        return 3
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
