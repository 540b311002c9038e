"""The file sinks' shared kit (``eosink.stores``): partition groups and folder names, Parquet row groups,
JSON lines. S3, HDFS and Delta all write through these, so each rule is checked once, here."""

from __future__ import annotations

import datetime as dt
import decimal
import io
import threading
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from eosink.errors import BadRecordError, SchemaError
from eosink.stores.encoding import ParquetStream, dictionary_columns, json_lines
from eosink.stores.partitions import DEFAULT_PARTITION, check_column_name, folder, groups, unescape


def test_groups_are_in_order_of_first_appearance_with_null_a_group_of_its_own() -> None:
    batch = pa.record_batch({"day": ["b", "a", None, "b", "a", None], "n": [1, 2, 3, 4, 5, 6]})
    found = [(values, None if rows is None else rows.to_pylist()) for values, rows in groups(batch, ["day"])]
    assert found == [(("b",), [0, 3]), (("a",), [1, 4]), ((None,), [2, 5])]


def test_one_group_takes_no_copy_and_no_columns_is_one_group() -> None:
    batch = pa.record_batch({"day": [dt.date(2026, 1, 2)] * 3, "ok": [True] * 3, "n": [1, 2, 3]})
    assert groups(batch, ["day", "ok"]) == [((dt.date(2026, 1, 2), True), None)]
    assert groups(batch, []) == [((), None)]
    assert groups(batch.slice(0, 0), ["day"]) == []


def test_folder_names_escape_as_spark_does_and_map_null_and_empty_to_the_default() -> None:
    assert folder("day", dt.date(2026, 1, 2), "t") == "day=2026-01-02"
    assert folder("ok", False, "t") == "ok=false"
    assert folder("tag", "a=b%c d#", "t") == "tag=a%3Db%25c d%23"
    assert folder("tag", None, "t") == folder("tag", "", "t") == f"tag={DEFAULT_PARTITION}"
    assert unescape("a%3Db%25c d%23") == "a=b%c d#" and unescape(DEFAULT_PARTITION) is None


@pytest.mark.parametrize("value", ["..", ".", "a/b", "a\\b", "tab\there", "/etc"])
def test_a_value_that_is_a_path_is_a_bad_record_naming_the_column(value: str) -> None:
    with pytest.raises(BadRecordError, match="'tag'"):
        folder("tag", value, "batch 3")


def test_a_folder_name_over_the_stores_limit_is_a_bad_record() -> None:
    assert folder("tag", "x" * 251, "t", max_bytes=255) == "tag=" + "x" * 251
    with pytest.raises(BadRecordError, match="limit of 255 bytes"):
        folder("tag", "x" * 252, "t", max_bytes=255)
    with pytest.raises(SchemaError, match="cannot be a folder name"):
        check_column_name("a/b")


def test_parquet_row_groups_gather_small_batches_up_to_the_row_and_byte_bounds() -> None:
    """25 batches of 100 rows, 1,000 rows a group: 3 groups (1,000, 1,000, 500), each seen once by on_rows; with
    a byte bound below one batch, a group per batch."""
    schema = pa.schema([("n", pa.int64())])
    batches = [pa.record_batch({"n": list(range(i * 100, i * 100 + 100))}, schema=schema) for i in range(25)]
    out, seen = io.BytesIO(), []
    stream = ParquetStream(out, schema, row_group_rows=1000, on_rows=lambda t: seen.append(t.num_rows))
    for batch in batches:
        stream.write(batch)
    stream.close()
    meta = pq.ParquetFile(io.BytesIO(out.getvalue())).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [1000, 1000, 500] == seen
    assert pq.read_table(io.BytesIO(out.getvalue())).column("n").to_pylist() == list(range(2500))

    small = io.BytesIO()
    stream = ParquetStream(small, schema, row_group_bytes=1)
    for batch in batches[:4]:
        stream.write(batch)
    stream.close()
    assert pq.ParquetFile(io.BytesIO(small.getvalue())).metadata.num_row_groups == 4


class _FailingOut(io.BytesIO):
    def write(self, data: Any) -> int:
        raise OSError("the store went away")


def test_a_row_group_encoded_in_the_background_raises_its_error_to_the_writer() -> None:
    """A full row group is encoded on a thread of its own while rows keep coming; the store's error in it is
    raised by the stream's next call (here its close), never lost."""
    schema = pa.schema([("n", pa.int64())])
    stream = ParquetStream(_FailingOut(), schema, row_group_rows=1000)
    stream.write(pa.record_batch({"n": list(range(1000))}, schema=schema))
    with pytest.raises(OSError, match="went away"):
        stream.close()


class _GatedOut(io.BytesIO):
    def __init__(self, gate: threading.Event) -> None:
        super().__init__()
        self.gate = gate

    def write(self, data: Any) -> int:
        self.gate.wait(30)
        return super().write(data)


def test_discarding_waits_for_the_row_group_being_encoded() -> None:
    """Nothing writes into an abandoned file after discard returns: the encoding thread, held in the store's
    write until a timer lets it go, is over by then."""
    schema = pa.schema([("n", pa.int64())])
    gate = threading.Event()
    out = _GatedOut(gate)
    stream = ParquetStream(out, schema, row_group_rows=1000)
    stream.write(pa.record_batch({"n": list(range(1000))}, schema=schema))
    assert stream.pending_bytes == 8000  # the row group being encoded still counts as held in memory
    threading.Timer(0.2, gate.set).start()
    stream.discard()
    assert not [t for t in threading.enumerate() if t.name == "eosink-parquet"]
    written = len(out.getvalue())
    assert written > 0 and stream.pending_bytes == 0


def _encodings(data: bytes) -> dict[str, bool]:
    """Per column of the first row group: whether it is dictionary-encoded."""
    group = pq.ParquetFile(io.BytesIO(data)).metadata.row_group(0)
    return {
        group.column(i).path_in_schema: "RLE_DICTIONARY" in group.column(i).encodings for i in range(group.num_columns)
    }


def test_parquet_dictionaries_only_for_columns_that_repeat_their_values() -> None:
    """Distinct ids and amounts are written plain (a dictionary costs time and bytes there); a column of few
    names, and a constant one, get a dictionary. Every value reads back. A nested column keeps pyarrow's
    default (a dictionary everywhere)."""
    n = 20_000
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "amount": pa.array([decimal.Decimal(i) / 100 for i in range(n)], pa.decimal128(12, 2)),
            "name": pa.array([f"customer-{i % 50}" for i in range(n)]),
            "region": pa.array([7] * n, pa.int32()),
        }
    )
    assert dictionary_columns(table) == ["name", "region"]
    out = io.BytesIO()
    stream = ParquetStream(out, table.schema)
    stream.write(table)
    stream.close()
    assert _encodings(out.getvalue()) == {"id": False, "amount": False, "name": True, "region": True}
    assert pq.read_table(io.BytesIO(out.getvalue())).equals(table)

    nested = table.append_column("tags", pa.array([[i % 3] for i in range(n)], pa.list_(pa.int64())))
    assert dictionary_columns(nested) is True
    empty = io.BytesIO()
    ParquetStream(empty, table.schema).close()
    assert pq.read_table(io.BytesIO(empty.getvalue())).num_rows == 0


def test_json_lines_are_the_documented_bytes_for_every_type() -> None:
    utc = dt.timezone.utc
    batch = pa.record_batch(
        {
            "i": pa.array([1, None], pa.int64()),
            "s": pa.array(['é"', "x"], pa.string()),
            "f": pa.array([1.5, -0.0], pa.float64()),
            "b": pa.array([True, False]),
            "d": pa.array([dt.date(2026, 1, 2), None], pa.date32()),
            "ts": pa.array([dt.datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=utc), None], pa.timestamp("us", "UTC")),
            "dec": pa.array([decimal.Decimal("12.30"), None], pa.decimal128(6, 2)),
            "bin": pa.array([b"\x00\xff", None], pa.binary()),
            "l": pa.array([[1, 2], None], pa.list_(pa.int64())),
        }
    )
    assert (
        json_lines(batch)
        == (
            '{"i":1,"s":"é\\"","f":1.5,"b":true,"d":"2026-01-02","ts":"2026-01-02T03:04:05.000006+00:00",'
            '"dec":"12.30","bin":"AP8=","l":[1,2]}\n'
            '{"i":null,"s":"x","f":-0.0,"b":false,"d":null,"ts":null,"dec":null,"bin":null,"l":null}\n'
        ).encode()
    )


def test_json_lines_refuse_nan_and_rows_over_the_limit() -> None:
    with pytest.raises(BadRecordError, match="NaN"):
        json_lines(pa.record_batch({"f": [1.0, float("nan")]}))
    with pytest.raises(BadRecordError, match="max_record_bytes=10"):
        json_lines(pa.record_batch({"s": ["short", "x" * 20]}), limit=10)
