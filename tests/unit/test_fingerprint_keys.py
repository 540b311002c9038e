"""Batch fingerprints and generated row keys: what a faithful replay must reproduce.

A fingerprint must not depend on row order or on how Spark chunks a batch into record
batches and partitions, yet must change when any value changes. A generated key must be a
function of (app_id, batch_id, batch time, row content, ordinal among identical rows) only.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import subprocess
import sys
import uuid
from collections import Counter
from datetime import date, datetime, timezone
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eosink import _rowhash
from eosink._rowhash import column_hash, row_hashes, splitmix64
from eosink.contract import Fingerprint
from eosink.errors import SchemaError
from eosink.fingerprint import COUNT_ONLY, FINGERPRINT_VERSION, fingerprint_of
from eosink.keys import KEY_COLUMN, KeyGenerator
from eosink.strategies import Idempotent, TwoPhaseCommit, TxidCheck

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("s", pa.string()),
        ("f", pa.float64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("d", pa.decimal128(12, 2)),
        ("l", pa.list_(pa.int32())),
        ("b", pa.bool_()),
        ("bin", pa.binary()),
        ("day", pa.date32()),
    ]
)

_rows = st.fixed_dictionaries(
    {
        "i": st.none() | st.integers(-(2**63), 2**63 - 1),
        "s": st.none() | st.text(max_size=6),
        "f": st.none() | st.floats(allow_nan=True, allow_infinity=True),
        "ts": st.none()
        | st.datetimes(min_value=datetime(1970, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(timezone.utc)),
        "d": st.none()
        | st.decimals(min_value=-(10**9), max_value=10**9, places=2, allow_nan=False, allow_infinity=False),
        "l": st.none() | st.lists(st.none() | st.integers(-(2**31), 2**31 - 1), max_size=3),
        "b": st.none() | st.booleans(),
        "bin": st.none() | st.binary(max_size=4),
        "day": st.none() | st.dates(min_value=date(1900, 1, 1), max_value=date(2200, 1, 1)),
    }
)

SETTINGS = settings(max_examples=60, deadline=None)


def batch(rows: list[dict[str, Any]], schema: pa.Schema = SCHEMA) -> pa.RecordBatch:
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def split(rows: list[Any], cuts: list[int]) -> list[list[Any]]:
    """``rows`` cut at the given positions (taken modulo len + 1, sorted, deduplicated)."""
    points = sorted({c % (len(rows) + 1) for c in cuts} | {0, len(rows)})
    return [rows[a:b] for a, b in itertools.pairwise(points)]


def fingerprint_chunks(parts: list[list[dict[str, Any]]], schema: pa.Schema = SCHEMA) -> Fingerprint:
    return sum((fingerprint_of(batch(p, schema)) for p in parts if p), Fingerprint())


# -- fingerprints ------------------------------------------------------------------------------


@SETTINGS
@given(data=st.data(), rows=st.lists(_rows, min_size=1, max_size=30))
def test_fingerprint_ignores_row_order_and_chunking(data: st.DataObject, rows: list[dict[str, Any]]) -> None:
    """Any permutation of a batch's rows, cut into any record batches, fingerprints the same.

    Pass: the summed fingerprint of the permuted chunks equals the whole batch's, with the
    same row count, for rows of every supported type (nulls included).
    """
    whole = fingerprint_of(batch(rows))
    order = data.draw(st.permutations(range(len(rows))))
    cuts = data.draw(st.lists(st.integers(0, 1000), max_size=6))
    permuted = [rows[k] for k in order]
    assert fingerprint_chunks(split(permuted, cuts)) == whole
    assert whole.rows == len(rows)


@SETTINGS
@given(data=st.data(), rows=st.lists(_rows, min_size=1, max_size=20))
def test_fingerprint_changes_when_one_value_changes(data: st.DataObject, rows: list[dict[str, Any]]) -> None:
    """Changing one value of one row changes the fingerprint.

    Pass: the fingerprints differ (the row count stays the same, so the hash sums must differ).
    """
    k = data.draw(st.integers(0, len(rows) - 1))
    column = data.draw(st.sampled_from(SCHEMA.names))
    changed = [dict(r) for r in rows]
    old = changed[k][column]
    new = data.draw(_rows)[column]
    if column == "f" and old is not None and new is not None and (np.isnan(old) and np.isnan(new)):
        new = 1.0  # every NaN is the same value
    if column == "f" and old is not None and new is not None and old == 0.0 and new == 0.0:
        new = 2.0  # -0.0 == 0.0
    if new == old:
        new = None if old is not None else data.draw(_rows.filter(lambda r: r[column] is not None))[column]
    changed[k][column] = new
    assert fingerprint_of(batch(changed)) != fingerprint_of(batch(rows))


def test_fingerprint_tells_null_from_empty_and_zero() -> None:
    """A null is not the empty string, zero, false, an empty list or the text 'null'.

    Pass: every variant of a one-row batch has a distinct fingerprint.
    """
    variants = [
        {"s": None},
        {"s": ""},
        {"s": "null"},
        {"s": "None"},
    ]
    prints = {fingerprint_of(batch([v], pa.schema([("s", pa.string())]))) for v in variants}
    assert len(prints) == len(variants)
    ints = [{"i": None}, {"i": 0}, {"i": 1}]
    assert len({fingerprint_of(batch([v], pa.schema([("i", pa.int64())]))) for v in ints}) == 3
    lists = [{"l": None}, {"l": []}, {"l": [None]}, {"l": [0]}]
    assert len({fingerprint_of(batch([v], pa.schema([("l", pa.list_(pa.int32()))]))) for v in lists}) == 4
    bools = [{"b": None}, {"b": False}, {"b": True}]
    assert len({fingerprint_of(batch([v], pa.schema([("b", pa.bool_())]))) for v in bools}) == 3


def test_fingerprint_is_not_a_sum_of_column_fingerprints() -> None:
    """Rows are hashed as wholes: re-pairing values across rows, or across columns, changes the fingerprint.

    Pass: {(1,2),(2,1)} vs {(1,1),(2,2)} differ; (1,2) vs (2,1) differ.
    """
    schema = pa.schema([("x", pa.int64()), ("y", pa.int64())])
    a = batch([{"x": 1, "y": 2}, {"x": 2, "y": 1}], schema)
    b = batch([{"x": 1, "y": 1}, {"x": 2, "y": 2}], schema)
    assert fingerprint_of(a) != fingerprint_of(b)
    assert fingerprint_of(batch([{"x": 1, "y": 2}], schema)) != fingerprint_of(batch([{"x": 2, "y": 1}], schema))


def test_duplicate_rows_count() -> None:
    """A batch with a row twice differs from the batch with it once.

    Pass: different fingerprints and row counts 2 and 1.
    """
    schema = pa.schema([("x", pa.int64())])
    twice, once = fingerprint_of(batch([{"x": 7}, {"x": 7}], schema)), fingerprint_of(batch([{"x": 7}], schema))
    assert twice != once and (twice.rows, once.rows) == (2, 1)


def test_int_column_with_and_without_nulls_hashes_equal_rows_equal() -> None:
    """The same int value hashes the same in a chunk with a validity bitmap and in one without.

    Also for sliced chunks (non-zero array offset) and all-null chunks. Pass: the row hashes of
    equal rows are equal, and the chunked fingerprint equals the one of the whole batch.
    """
    schema = pa.schema([("x", pa.int64()), ("s", pa.string()), ("b", pa.bool_())])
    rows = [{"x": 5, "s": "a", "b": True}, {"x": None, "s": None, "b": None}, {"x": 7, "s": "b", "b": False}]
    with_nulls = batch(rows, schema)
    without = batch([rows[0], rows[2]], schema)
    assert without.column(0).null_count == 0 and with_nulls.column(0).null_count == 1
    h_with, h_without = row_hashes(with_nulls), row_hashes(without)
    assert h_with[0] == h_without[0] and h_with[2] == h_without[1]
    sliced = with_nulls.slice(1, 2)  # offset 1: [null, 7]
    assert sliced.column(0).offset == 1
    assert row_hashes(sliced)[1] == h_without[1]
    assert row_hashes(sliced)[0] == h_with[1]
    all_null = batch([rows[1]], schema)
    assert row_hashes(all_null)[0] == h_with[1]
    whole = fingerprint_of(with_nulls)
    assert fingerprint_of(with_nulls.slice(0, 1)) + fingerprint_of(sliced) == whole
    assert fingerprint_of(without) + fingerprint_of(all_null) == whole


def test_explicit_null_bitmap_without_nulls_hashes_like_no_bitmap() -> None:
    """An int array built with an all-valid mask hashes like the same array without one.

    Pass: equal column hashes.
    """
    plain = pa.array([1, 2, 3], type=pa.int64())
    masked = pa.array([1, 2, 3], type=pa.int64(), mask=np.array([False, False, False]))
    assert np.array_equal(column_hash(plain), column_hash(masked))


def test_float_normalisation() -> None:
    """-0.0 hashes as 0.0 and every NaN as the same NaN; float32 and float64 of a value agree.

    Pass: equal column hashes for each pair; 0.0 and 1.0 differ.
    """
    nan_payload = np.frombuffer(np.uint64(0x7FF8000000000123).tobytes(), dtype=np.float64)[0]
    a = column_hash(pa.array([0.0, float("nan"), 1.5]))
    b = column_hash(pa.array([-0.0, nan_payload, 1.5]))
    assert np.array_equal(a, b)
    assert np.array_equal(column_hash(pa.array([1.5], pa.float32())), column_hash(pa.array([1.5], pa.float64())))
    assert column_hash(pa.array([0.0]))[0] != column_hash(pa.array([1.0]))[0]


def test_dictionary_column_hashes_like_its_values() -> None:
    """A dictionary-encoded column hashes like the plain column it decodes to.

    Pass: equal column hashes, nulls included.
    """
    plain = pa.array(["a", None, "b", "a"])
    assert np.array_equal(column_hash(plain.dictionary_encode()), column_hash(plain))


@pytest.mark.parametrize(
    ("arrow_type", "values"),
    [
        (pa.timestamp("ns"), [datetime(2024, 1, 1, 12), None, datetime(1999, 12, 31)]),
        (pa.timestamp("ms", tz="Europe/Paris"), [datetime(2024, 1, 1, tzinfo=timezone.utc), None]),
        (pa.decimal128(20, 4), [Decimal("1.2500"), None, Decimal("-3.0000")]),
        (pa.decimal256(40, 2), [Decimal("12345678901234567890.12"), None]),
        (pa.list_(pa.string()), [["a", None], None, []]),
        (pa.large_string(), ["x", None, ""]),
        (pa.struct([("a", pa.int32()), ("b", pa.string())]), [{"a": 1, "b": "x"}, None, {"a": None, "b": None}]),
        (pa.map_(pa.string(), pa.int32()), [[("k", 1)], None, []]),
        (pa.duration("us"), [1, None, -5]),
        (pa.time64("us"), [0, None, 86_399_999_999]),
        (pa.int8(), [-1, None, 127]),
        (pa.uint64(), [2**64 - 1, None, 0]),
        (pa.float16(), [np.float16(1.5), None]),
        (pa.null(), [None, None]),
    ],
    ids=lambda p: str(p) if isinstance(p, pa.DataType) else None,
)
def test_other_types_hash_per_value(arrow_type: pa.DataType, values: list[Any]) -> None:
    """Every Spark-producible Arrow type hashes row by row, independently of chunking.

    Pass: hashing the column whole equals hashing its two halves; equal values (the column
    appended to itself) hash equal; nulls hash equal to each other.
    """
    arr = pa.array(values, type=arrow_type)
    h = column_hash(arr)
    assert len(h) == len(values)
    half = len(values) // 2
    assert np.array_equal(np.concatenate([column_hash(arr.slice(0, half)), column_hash(arr.slice(half))]), h)
    twice = column_hash(pa.concat_arrays([arr, arr]))
    assert np.array_equal(twice[: len(values)], twice[len(values) :])
    nulls = [h[k] for k, v in enumerate(values) if v is None]
    assert len(set(nulls)) <= 1


def test_fingerprint_arithmetic_and_json() -> None:
    """Fingerprints add commutatively with 64-bit wrap-around and survive JSON.

    Pass: a + b == b + a, Fingerprint() is neutral, sums wrap modulo 2**64, from_json(to_json) is identity.
    """
    a, b = Fingerprint(2, 2**64 - 1, 5), Fingerprint(3, 2, 2**63)
    assert a + b == b + a == Fingerprint(5, 1, 2**63 + 5)
    assert a + Fingerprint() == a
    assert Fingerprint.from_json(json.loads(json.dumps((a + b).to_json()))) == a + b
    assert fingerprint_of(batch([], SCHEMA)) == Fingerprint()


def test_fingerprint_is_the_same_in_another_process() -> None:
    """Executors and drivers are different processes: a row's hash must not depend on Python's hash seed.

    Pass: a subprocess with another PYTHONHASHSEED computes the same fingerprint.
    """
    rows = [{"s": "héllo", "i": 1, "l": ["x"]}, {"s": None, "i": None, "l": None}]
    code = (
        "import json, sys, pyarrow as pa\n"
        "from eosink.fingerprint import fingerprint_of\n"
        "schema = pa.schema([('s', pa.string()), ('i', pa.int64()), ('l', pa.list_(pa.string()))])\n"
        "rows = json.loads(sys.argv[1])\n"
        "print(json.dumps(fingerprint_of(pa.RecordBatch.from_pylist(rows, schema=schema)).to_json()))\n"
    )
    schema = pa.schema([("s", pa.string()), ("i", pa.int64()), ("l", pa.list_(pa.string()))])
    out = subprocess.run(
        [sys.executable, "-c", code, json.dumps(rows)],
        env={**os.environ, "PYTHONHASHSEED": "12345"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    assert Fingerprint.from_json(json.loads(out)) == fingerprint_of(batch(rows, schema))


# -- generated keys ----------------------------------------------------------------------------

KEY_SCHEMA = pa.schema([("x", pa.int64()), ("s", pa.string())])
_key_rows = st.lists(
    st.fixed_dictionaries({"x": st.none() | st.integers(0, 3), "s": st.sampled_from(["a", "b", None])}),
    min_size=1,
    max_size=40,
)  # a small value pool: identical rows are frequent


def keyed(gen: KeyGenerator, parts: list[list[dict[str, Any]]]) -> Counter[tuple[str, str]]:
    """The multiset of (row, key) pairs a participant produces for the given chunks."""
    pairs: Counter[tuple[str, str]] = Counter()
    for part in parts:
        if not part:
            continue
        out = gen.add_keys(batch(part, KEY_SCHEMA))
        for row in out.to_pylist():
            key = row.pop(KEY_COLUMN)
            pairs[(json.dumps(row, sort_keys=True), key)] += 1
    return pairs


@SETTINGS
@given(data=st.data(), rows=_key_rows)
def test_keys_ignore_order_and_chunking_within_a_participant(data: st.DataObject, rows: list[dict[str, Any]]) -> None:
    """A participant's replay may see its rows in another order and other record batches.

    Pass: the multiset of (row, key) pairs is the same; every key is distinct (duplicates of a
    row get distinct keys through their ordinal).
    """
    first = keyed(KeyGenerator("app", 3, 1_700_000_000_000), [rows])
    order = data.draw(st.permutations(range(len(rows))))
    cuts = data.draw(st.lists(st.integers(0, 1000), max_size=6))
    replay = keyed(KeyGenerator("app", 3, 1_700_000_000_000), split([rows[k] for k in order], cuts))
    assert replay == first
    assert sum(first.values()) == len(rows) == len({key for _, key in first})


def test_duplicates_of_a_row_get_distinct_keys_also_across_chunks() -> None:
    """Identical rows get distinct keys, also when they arrive in different record batches.

    Pass: 5 copies of one row -> 5 distinct keys; a fresh generator (a replay) reproduces them.
    """
    row = {"x": 1, "s": "a"}
    keys = [k for _, k in keyed(KeyGenerator("app", 0, 0), [[row, row], [row], [row, row]])]
    assert len(set(keys)) == 5
    again = [k for _, k in keyed(KeyGenerator("app", 0, 0), [[row] * 5])]
    assert set(again) == set(keys)


def test_keys_are_uuid7_strings_with_the_batch_time() -> None:
    """Generated keys are canonical UUID strings, version 7, RFC 4122 variant, time bits = time_ms.

    Pass: uuid.UUID parses each key back to the same string, version 7, RFC variant, and its
    first 48 bits equal time_ms.
    """
    time_ms = 1_700_000_123_456
    out = KeyGenerator("app", 9, time_ms).add_keys(batch([{"x": i, "s": str(i)} for i in range(50)], KEY_SCHEMA))
    assert out.schema.names == ["x", "s", KEY_COLUMN]
    for key in out.column(KEY_COLUMN).to_pylist():
        u = uuid.UUID(key)
        assert str(u) == key
        assert u.version == 7 and u.variant == uuid.RFC_4122
        assert u.int >> 80 == time_ms


def test_keys_differ_across_batches_and_apps_but_not_participants() -> None:
    """The key salt is (app_id, batch_id): not the participant, not the generator instance.

    Pass: the same rows get pairwise different keys for another batch_id and another app_id,
    and identical keys from a second generator of the same batch (another participant).
    """
    rows = [{"x": i, "s": "v"} for i in range(20)]

    def keys(app: str, batch_id: int) -> list[str]:
        gen = KeyGenerator(app, batch_id, 1_700_000_000_000)
        return list(gen.keys(batch(rows, KEY_SCHEMA)).to_pylist())

    base = keys("app", 1)
    assert not set(base) & set(keys("app", 2))
    assert not set(base) & set(keys("other", 1))
    assert keys("app", 1) == base


def test_add_keys_refuses_an_existing_key_column() -> None:
    """A batch that already has the generated key column is a SchemaError, with a fix.

    Pass: SchemaError naming the column.
    """
    b = pa.RecordBatch.from_pylist([{"x": 1, KEY_COLUMN: "k"}])
    with pytest.raises(SchemaError, match=KEY_COLUMN) as info:
        KeyGenerator("app", 0, 0).add_keys(b)
    assert info.value.fix


# -- versions: stored numbers never change ------------------------------------------------------

GOLDEN_SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("s", pa.string()),
        ("b", pa.binary()),
        ("d", pa.decimal128(12, 2)),
        ("f", pa.float64()),
        ("l", pa.list_(pa.int32())),
    ]
)


def golden_batch() -> pa.RecordBatch:
    rows = [
        {
            "i": n,
            "s": ["a", "bb", None, "héllo"][n % 4],
            "b": [b"x", None, b""][n % 3],
            "d": None if n % 5 == 0 else Decimal(n) / 4,
            "f": n / 3,
            "l": [n, n + 1] if n % 2 else None,
        }
        for n in range(5000)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=GOLDEN_SCHEMA)


@pytest.mark.parametrize(
    ("version", "sums"),
    [
        (1, ("57ce7bfb90406c98", "08336536351ebaae")),
        (2, ("190b69e52f0fcf6b", "5368d9337cf8f542")),
        (3, ("a3339784a968cc24", "7b282ea11b0de09a")),
    ],
)
def test_fingerprint_versions_are_pinned(version: int, sums: tuple[str, str]) -> None:
    """Bundles store fingerprints and replays compare with them: a version's numbers never change.

    Pass: a fixed batch fingerprints to the numbers recorded when each version was introduced.
    """
    fp = fingerprint_of(golden_batch(), version)
    assert (fp.rows, f"{fp.sum1:016x}", f"{fp.sum2:016x}", fp.version) == (5000, *sums, version)


def test_new_fingerprints_use_the_current_version() -> None:
    """Pass: fingerprint_of defaults to FINGERPRINT_VERSION (3); version 2 differs from version 1 on
    decimals only, version 3 from version 2 on strings and binaries only."""
    batch = golden_batch()
    assert fingerprint_of(batch).version == FINGERPRINT_VERSION == 3
    no_decimal = batch.drop_columns(["d"])
    v1, v2 = fingerprint_of(no_decimal, 1), fingerprint_of(no_decimal, 2)
    assert (v1.sum1, v1.sum2) == (v2.sum1, v2.sum2) and v1 != v2
    no_bytes = batch.drop_columns(["s", "b"])
    v2, v3 = fingerprint_of(no_bytes, 2), fingerprint_of(no_bytes, 3)
    assert (v2.sum1, v2.sum2) == (v3.sum1, v3.sum2) and v2 != v3
    assert fingerprint_of(batch, 2).sum1 != fingerprint_of(batch, 3).sum1


def test_count_only_fingerprints_hold_the_row_count() -> None:
    """Pass: version COUNT_ONLY counts rows without hashing (two-phase commit's), adds up, and names itself."""
    batch = golden_batch()
    one = fingerprint_of(batch, COUNT_ONLY)
    assert one == Fingerprint(batch.num_rows, version=COUNT_ONLY) and (one.sum1, one.sum2) == (0, 0)
    assert (one + one).rows == 2 * batch.num_rows and str(one) == f"{batch.num_rows} rows (count only)"
    assert Fingerprint.from_json(one.to_json()) == one
    assert one != fingerprint_of(batch)
    assert TwoPhaseCommit().fingerprint_version() == COUNT_ONLY
    assert TxidCheck().fingerprint_version() == Idempotent().fingerprint_version() == FINGERPRINT_VERSION


def _bytes_reference(value: bytes) -> int:
    """Version 3's hash of one string or binary value, in plain Python (the definition)."""
    mod = 1 << 64
    poly = sum((c + 1) * pow(_rowhash._BASE, t, mod) for t, c in enumerate(value)) % mod
    length = int(splitmix64(np.array([len(value)], dtype=np.uint64))[0])
    return int(splitmix64(np.array([(poly + length) % mod], dtype=np.uint64))[0])


def test_bytes_hash_v3_is_its_definition_whatever_the_layout(monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 3 hashes strings and binaries from Arrow's buffers, in spans of bytes at a time.

    Pass: every value hashes to the plain-Python definition, in string, large string, binary and
    large binary arrays, in a slice as alone, and with a span so small that values cross span
    ends and some are longer than a span; an empty value, a zero byte and a prefix are told apart.
    """
    rng = random.Random(3)
    values = [bytes(rng.randrange(256) for _ in range(rng.randrange(0, 90))) for _ in range(200)]
    values += [b"", b"\x00", b"\x00a", b"a", b"a\x00", "héllo".encode()]
    expected = [_bytes_reference(v) for v in values]
    for kind in (pa.binary(), pa.large_binary()):
        arr = pa.array(values, kind)
        assert [int(h) for h in column_hash(arr, 3)] == expected
        assert [int(h) for h in column_hash(arr.slice(17, 60), 3)] == expected[17:77]
    text = ["a", "héllo", "", "zzz" * 40]
    for kind in (pa.string(), pa.large_string()):
        assert [int(h) for h in column_hash(pa.array(text, kind), 3)] == [_bytes_reference(t.encode()) for t in text]
    assert len(set(expected[-6:-1])) == 5
    monkeypatch.setattr(_rowhash, "_SPAN", 64)
    monkeypatch.setattr(_rowhash, "_TABLES", [])
    assert [int(h) for h in column_hash(pa.array(values, pa.binary()), 3)] == expected
    nulls = pa.array(["a", None, ""], pa.string())
    assert column_hash(nulls, 3)[1] == column_hash(pa.array([None], pa.string()), 3)[0] != column_hash(nulls, 3)[2]


def test_decimal_hash_v2_ignores_slicing_and_tells_values_apart() -> None:
    """Version 2 hashes decimals from their buffer: an array slice must hash like the same values alone.

    Pass: equal values hash equal across slices, signs and widths are told apart, nulls hash to the constant.
    """
    values = [Decimal("1.50"), Decimal("-1.50"), None, Decimal("0.00"), Decimal("1.50"), Decimal("99999999.99")]
    for kind in (pa.decimal128(12, 2), pa.decimal256(40, 2)):
        arr = pa.array(values, type=kind)
        whole = column_hash(arr, 2)
        assert list(column_hash(arr.slice(2, 3), 2)) == list(whole[2:5])
        assert whole[0] == whole[4] and len({whole[0], whole[1], whole[3], whole[5]}) == 4
        assert whole[2] == column_hash(pa.array([None], type=kind), 2)[0]


def test_generated_keys_are_pinned() -> None:
    """Generated keys stay on row-hash version 1: a replay after an upgrade must upsert the same keys.

    Pass: a fixed batch gets the keys recorded when fingerprint version 2 was introduced.
    """
    schema = pa.schema([("x", pa.int64()), ("s", pa.string()), ("d", pa.decimal128(5, 1))])
    rows = [{"x": i, "s": ["a", None, "é"][i % 3], "d": Decimal(i) / 2} for i in range(4)]
    keys = KeyGenerator("app", 7, 1767225600000).keys(pa.RecordBatch.from_pylist(rows, schema=schema))
    assert keys.to_pylist() == [
        "019b76da-a800-7bc2-abd8-027178c3a1f2",
        "019b76da-a800-72e9-a31e-c6c3869e1a19",
        "019b76da-a800-77a5-acb3-d8769ba7f0d1",
        "019b76da-a800-7944-ab3f-bd8b3d726fe1",
    ]


def test_fingerprint_json_keeps_the_version_and_reads_old_bundles() -> None:
    """Pass: the current version round-trips through JSON; JSON without a version (older bundles) reads as version 1;
    empty fingerprints are equal whatever their version; adding different versions is refused."""
    fp = fingerprint_of(golden_batch())
    assert Fingerprint.from_json(json.loads(json.dumps(fp.to_json()))) == fp
    old = fingerprint_of(golden_batch(), 1)
    assert "version" not in old.to_json() and Fingerprint.from_json(old.to_json()).version == 1
    assert Fingerprint() == Fingerprint(version=2) and hash(Fingerprint()) == hash(Fingerprint(version=2))
    assert Fingerprint() + fp == fp == fp + Fingerprint(version=1)
    with pytest.raises(ValueError, match="versions 3 and 1"):
        _ = fp + old
    with pytest.raises(ValueError, match="unknown row-hash version"):
        column_hash(pa.array([1]), 4)
