"""catalog.server.pgcodec against real PostgreSQL codecs: psycopg's loaders read what we encode (DataRows,
COPY binary and text), psycopg's dumpers write what we decode, the text format is byte for byte
the old per-value encoder's, COPY text/csv follow PostgreSQL's documented rules, and parameter
decoding is bounded (ValueError, fast) on hostile input."""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import struct
import uuid
from decimal import Decimal

import duckdb
import numpy as np
import psycopg._copy_base as copy_base
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq import Format

from bench.bench_pgcodec import old_encode_rows, old_text_value, stats_batch
from catalog.server import pgcodec, pgwire

UTC = dt.UTC

# -- helpers -----------------------------------------------------------------------------------


def datarows(buf: bytes) -> list[list[bytes | None]]:
    """Split concatenated DataRow messages into their fields, checking every length word."""
    rows, pos = [], 0
    while pos < len(buf):
        assert buf[pos : pos + 1] == b"D"
        (length,) = struct.unpack_from("!i", buf, pos + 1)
        body = buf[pos + 5 : pos + 1 + length]
        rows.append(_fields(body))
        pos += 1 + length
    assert pos == len(buf)
    return rows


def _fields(body: bytes) -> list[bytes | None]:
    (count,) = struct.unpack_from("!h", body)
    pos, out = 2, []
    for _ in range(count):
        (n,) = struct.unpack_from("!i", body, pos)
        pos += 4
        out.append(None if n == -1 else body[pos : pos + n])
        pos += max(n, 0)
    assert pos == len(body), "field lengths do not add up to the message length"
    return out


def copy_binary_tuples(payload: bytes) -> list[bytes]:
    """The tuples of a whole COPY BINARY stream (header and trailer checked)."""
    assert payload.startswith(b"PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")
    pos, out = 19, []
    while True:
        (count,) = struct.unpack_from("!h", payload, pos)
        if count == -1:
            assert pos + 2 == len(payload)
            return out
        start, pos = pos, pos + 2
        for _ in range(count):
            (n,) = struct.unpack_from("!i", payload, pos)
            pos += 4 + max(n, 0)
        out.append(payload[start:pos])


def load(raw: bytes | None, oid: int, fmt: Format):
    return None if raw is None else Transformer().get_loader(oid, fmt).load(raw)


def same(a, b) -> bool:
    """Equality with NaN equal to NaN and bools kept apart from ints, recursively through lists."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def expected(v, t: pa.DataType):
    """What psycopg's loader gives for an Arrow value (as to_pylist returns it) of type t."""
    if v is None:
        return None
    if pa.types.is_dictionary(t):
        return expected(v, t.value_type)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [expected(x, t.value_type) for x in v]
    if pa.types.is_uint64(t):
        return Decimal(v)
    if pa.types.is_timestamp(t):
        if hasattr(v, "to_pydatetime"):  # pandas Timestamp (ns): PostgreSQL keeps microseconds
            v = v.to_pydatetime(warn=False)
        return v.astimezone(UTC) if t.tz else v
    if t == pa.month_day_nano_interval():  # psycopg: a year is 365 days, a month 30
        years = int(v.months / 12)
        months = v.months - 12 * years
        return dt.timedelta(days=years * 365 + months * 30 + v.days, microseconds=v.nanoseconds // 1000)
    if isinstance(t, pa.BaseExtensionType) and t.extension_name == "arrow.uuid":
        return v
    return v


@pytest.fixture(params=["vectorized", "per-value"])
def path(request, monkeypatch) -> str:
    """Run a test through both encoders: the vectorized one (every batch) and the per-value one
    pgcodec uses for batches of at most _SMALL_ROWS rows."""
    monkeypatch.setattr(pgcodec, "_SMALL_ROWS", -1 if request.param == "vectorized" else 10**9)
    return request.param


# -- a table of every type DuckDB results hold ---------------------------------------------------

TRICKY = [
    "",
    'q"uote',
    "back\\slash",
    "{brace}",
    "com,ma",
    "sp ace",
    "tab\there",
    "new\nline",
    "NULL",
    "null",
    "é€😀",
]


def every_type_batch() -> pa.RecordBatch:
    d = Decimal
    cols = {
        "bool": pa.array([True, False, None, True]),
        "int8": pa.array([1, -128, None, 127], pa.int8()),
        "int16": pa.array([1, -32768, None, 32767], pa.int16()),
        "int32": pa.array([1, -(2**31), None, 2**31 - 1], pa.int32()),
        "int64": pa.array([2**62, -(2**63), None, 0], pa.int64()),
        "uint8": pa.array([0, 255, None, 7], pa.uint8()),
        "uint16": pa.array([0, 65535, None, 7], pa.uint16()),
        "uint32": pa.array([0, 2**32 - 1, None, 7], pa.uint32()),
        "uint64": pa.array([2**64 - 1, 0, None, 10000], pa.uint64()),
        "float16": pa.array([0.1, 1.5, None, 65504], pa.float16()),
        "float32": pa.array([0.1, 1e-5, None, math.inf], pa.float32()),
        "float64": pa.array([1.0, math.nan, None, -math.inf]),
        "float64b": pa.array([1.5e-5, -3.2e-7, 1e16, 123456789012.5]),
        "float64c": pa.array([-0.0, 0.0, 5e-324, 1.7976931348623157e308]),
        "dec": pa.array([d("1.50"), d("-0.01"), None, d("12345678.99")], pa.decimal128(10, 2)),
        "dec_scale10": pa.array([d("0"), d("1.5"), None, d("-0.0000001")], pa.decimal128(20, 10)),
        "hugeint": pa.array([d(10**38 - 1), d(-(10**38) + 1), None, d(0)], pa.decimal128(38, 0)),
        "dec256": pa.array([d("1e40"), d("-1.5"), None, d("0.001")], pa.decimal256(45, 3)),
        "string": pa.array([*TRICKY[:3], None]),
        "large_string": pa.array([*TRICKY[3:6], None], pa.large_string()),
        "string_view": pa.array([*TRICKY[6:9], None], pa.string_view()),
        "binary": pa.array([b"", b"\x00\xff", None, b"abc"]),
        "large_binary": pa.array([b"x", b"\\", None, b""], pa.large_binary()),
        "fixed_binary": pa.array([b"ab", b"cd", None, b"ef"], pa.binary(2)),
        "date32": pa.array([dt.date(2024, 1, 1), dt.date(1, 1, 1), None, dt.date(9999, 12, 31)]),
        "date64": pa.array(
            [dt.date(2024, 2, 29), dt.date(1970, 1, 1), None, dt.date(1999, 12, 31)], pa.date64()
        ),
        "ts_s": pa.array([0, -1, None, 1_700_000_000], pa.timestamp("s")),
        "ts_ms": pa.array([0, 1, None, 1_700_000_000_123], pa.timestamp("ms")),
        "ts_us": pa.array(
            [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, 1, 2, 3, 4), None, dt.datetime(1, 1, 1)],
            pa.timestamp("us"),
        ),
        "ts_ns": pa.array([0, 1000, None, 1_700_000_000_123_456_789], pa.timestamp("ns")),
        "tstz_utc": pa.array([0, 1, None, 1_700_000_000_123_456], pa.timestamp("us", tz="UTC")),
        "tstz_etc": pa.array([0, 1, None, 1_700_000_000_123_456], pa.timestamp("us", tz="Etc/UTC")),
        "tstz_ny": pa.array([0, 1, None, 1_720_000_000_000_000], pa.timestamp("us", tz="America/New_York")),
        "tstz_kolkata": pa.array([0, 1, None, 1_700_000_000_000_000], pa.timestamp("us", tz="+05:30")),
        "tstz_ns": pa.array([0, 1, None, 1_700_000_000_123_456_000], pa.timestamp("ns", tz="UTC")),
        "time32s": pa.array([0, 1, None, 86399], pa.time32("s")),
        "time32ms": pa.array([0, 1, None, 86_399_999], pa.time32("ms")),
        "time64us": pa.array([0, 1, None, 86_399_999_999], pa.time64("us")),
        "time64ns": pa.array([0, 1000, None, 86_399_999_999_000], pa.time64("ns")),
        "duration": pa.array([0, -1, None, 86_400_000_001], pa.duration("us")),
        "duration_s": pa.array([0, 3600, None, -86401], pa.duration("s")),
        "uuid_str": pa.array(
            [str(uuid.UUID(int=1)), str(uuid.UUID(int=2**128 - 1)), None, str(uuid.UUID(int=0))]
        ),
        "uuid": pa.array([uuid.UUID(int=1).bytes, uuid.UUID(int=2**100).bytes, None, bytes(16)], pa.uuid()),
        "list_int": pa.array([[1, 2, None], [], None, [3]], pa.list_(pa.int64())),
        "list_int32": pa.array([[1], [None], None, []], pa.list_(pa.int32())),
        "list_float": pa.array([[1.0, math.nan], [], None, [1e-5, -math.inf]], pa.list_(pa.float64())),
        "list_text": pa.array([TRICKY[:6], [], None, [*TRICKY[6:], None]]),
        "list_bool": pa.array([[True, None], [False], None, []]),
        "list_ts": pa.array(
            [[dt.datetime(2024, 1, 1)], [], None, [None, dt.datetime(2000, 1, 1, 0, 0, 1)]],
            pa.list_(pa.timestamp("us")),
        ),
        "list_tstz": pa.array([[0], [], None, [None]], pa.list_(pa.timestamp("us", tz="UTC"))),
        "list_date": pa.array([[dt.date(2024, 1, 1)], [None], None, []]),
        "list_dec": pa.array([[d("1.5"), None], [d("-2.25")], None, []], pa.list_(pa.decimal128(5, 2))),
        "list_bytes": pa.array([[b"\x00", b"ab"], [None], None, []]),
        "large_list": pa.array([[1, 2], [], None, [None]], pa.large_list(pa.int16())),
        "fixed_list": pa.array([[1, 2], [3, 4], None, [5, None]], pa.list_(pa.int32(), 2)),
        "nested_list": pa.array([[[1, 2], [3]], [[]], None, [None, [None]]]),
        "nested_text": pa.array([[["a b", None]], [], None, [["{x}"]]]),
        "struct": pa.array([{"a": 1, "b": "x"}, {"a": None, "b": "y y"}, None, {"a": 3, "b": ""}]),
        "map": pa.array([[(1, "a")], [], None, [(2, None)]], pa.map_(pa.int32(), pa.string())),
        "dict": pa.array(["x", "y y", None, "x"]).dictionary_encode(),
        "list_dict": pa.array([["a"], [None], None, []], pa.list_(pa.dictionary(pa.int8(), pa.string()))),
        "nulls": pa.array([None, None, None, None], pa.null()),
    }
    return pa.RecordBatch.from_pydict(cols)


# types whose old text the new one deliberately changes: MonthDayNano (the old gave Python's
# repr), array elements with \r \v \f (now quoted, as array_out does)
def interval_batch() -> pa.RecordBatch:
    mdn = pa.MonthDayNano
    values = [
        mdn([0, 1, 0]),
        mdn([14, 3, 14_706_500_000_000]),
        mdn([0, 0, 0]),
        None,
        mdn([0, -1, 1_000_000_000]),
    ]
    values += [mdn([-1, 0, 0]), mdn([0, 0, -1000]), mdn([1, 1, 3_600_000_000_000])]
    return pa.RecordBatch.from_pydict({"i": pa.array(values, pa.month_day_nano_interval())})


# -- type OIDs ---------------------------------------------------------------------------------


def test_oid_of_every_arrow_type():
    b = every_type_batch()
    want = {
        "bool": 16, "int8": 21, "int16": 21, "int32": 23, "int64": 20, "uint8": 21, "uint16": 23,
        "uint32": 26, "uint64": 1700, "float16": 700, "float32": 700, "float64": 701, "dec": 1700,
        "hugeint": 1700,
        "dec256": 1700, "string": 25, "large_string": 25, "string_view": 25, "binary": 17, "large_binary": 17,
        "fixed_binary": 17, "date32": 1082, "date64": 1082, "ts_s": 1114, "ts_ns": 1114, "tstz_utc": 1184,
        "tstz_ny": 1184, "time32s": 1083, "time64ns": 1083, "duration": 1186, "uuid_str": 25, "uuid": 2950,
        "list_int": 1016, "list_int32": 1007, "list_float": 1022, "list_text": 1009, "list_bool": 1000,
        "list_ts": 1115, "list_tstz": 1185, "list_date": 1182, "list_dec": 1231, "list_bytes": 1001,
        "large_list": 1005, "fixed_list": 1007, "nested_list": 25, "struct": 25, "map": 25, "dict": 25,
        "list_dict": 1009, "nulls": 25,
    }  # fmt: skip
    for name, oid in want.items():
        assert pgcodec.oid_of(b.schema.field(name).type) == oid, name
    assert pgcodec.oid_of(pa.month_day_nano_interval()) == pgcodec.INTERVAL
    assert pgcodec.oid_of(pa.list_(pa.string_view())) == 1009
    assert pgcodec.oid_of(pa.list_(pa.large_string())) == 1009
    assert pgcodec.type_size(pgcodec.INT8) == 8 and pgcodec.type_size(pgcodec.TEXT) == -1
    assert pgcodec.type_size(pgcodec.INTERVAL) == 16 and pgcodec.type_size(pgcodec.UUID) == 16
    assert pgwire.oid_of is pgcodec.oid_of and pgwire.decode_param is pgcodec.decode_param


def test_duckdb_uuid_is_text_and_lossless_uuid_is_uuid():
    assert duckdb.sql("select uuid() u").to_arrow_table().schema.field("u").type == pa.string()
    con = duckdb.connect()
    con.sql("SET arrow_lossless_conversion = true")
    t = con.sql("select uuid() u, 1::hugeint h").to_arrow_table()
    assert pgcodec.oid_of(t.schema.field("u").type) == pgcodec.UUID
    assert pgcodec.oid_of(t.schema.field("h").type) == pgcodec.NUMERIC


# -- text format: the old encoder's bytes ----------------------------------------------------


def test_text_is_the_old_encoders_bytes_for_every_type(path):
    b = every_type_batch()
    for name in b.schema.names:
        one = b.select([name])
        assert pgcodec.encode_datarow_list(one) == old_encode_rows(one), name
    assert pgcodec.encode_datarows(b, [0] * b.num_columns) == b"".join(old_encode_rows(b))
    assert pgwire.encode_rows(b) == old_encode_rows(b)


def test_text_of_sliced_and_empty_batches(path):
    b = every_type_batch()
    for start, length in ((1, 2), (3, 1), (0, 0), (2, 2)):
        part = b.slice(start, length)
        assert pgcodec.encode_datarows(part, [0] * b.num_columns) == b"".join(old_encode_rows(part))
    empty = pa.RecordBatch.from_pydict({})
    assert pgcodec.encode_datarows(pa.record_batch([pa.array([1, 2])], ["a"]).select([]), []) == (
        b"D\x00\x00\x00\x06\x00\x00" * 2
    )
    assert pgcodec.encode_datarows(empty, []) == b""


def test_text_of_stats_shaped_rows_is_the_old_encoders():
    b = stats_batch(3000, seed=3)
    assert pgcodec.encode_datarows(b, [0] * b.num_columns) == b"".join(old_encode_rows(b))


def test_gathered_text_rows_are_the_general_paths_and_the_old_encoders(monkeypatch):
    """Results of strings and integers only (the NaN query's shape) are gathered in one pass
    (`_text_rows_gathered`): the same bytes as the padded-matrix path and the old encoder, with
    NULLs, empty strings, multi-byte text, every integer width, large strings, slices of a batch
    and non-ASCII names."""
    rng = np.random.default_rng(5)
    n = 300
    names = [None if i % 7 == 0 else ("" if i % 11 == 0 else f"Default/op{i}/é✓" * (i % 4)) for i in range(n)]
    cols = {
        "name": pa.array(names, pa.string()),
        "large": pa.array(names[::-1], pa.large_string()),
        "i64": pa.array(rng.integers(-(2**63), 2**63 - 1, n), mask=rng.random(n) < 0.2),
        "i32": pa.array(rng.integers(-(2**31), 2**31 - 1, n).astype(np.int32)),
        "i8": pa.array(rng.integers(-128, 127, n).astype(np.int8)),
        "u64": pa.array(rng.integers(0, 2**63, n).astype(np.uint64) * 2),
    }
    batch = pa.RecordBatch.from_pydict(cols)
    parts = [batch, batch.slice(65, 100), batch.slice(200), batch.select(["i64"]), batch.select(["name"])]
    for part in parts:
        assert pgcodec._text_rows_gathered(part) is not None
        gathered = pgcodec.encode_datarows(part, [0] * part.num_columns)
        assert gathered == b"".join(old_encode_rows(part))
        monkeypatch.setattr(pgcodec, "_GATHER_ROWS", 0)
        assert pgcodec.encode_datarows(part, [0] * part.num_columns) == gathered
        monkeypatch.undo()
    # any other column, or a result of big values, takes the general path
    assert pgcodec._text_rows_gathered(stats_batch(100, seed=4)) is None
    big = pa.record_batch([pa.array(["x" * 4000] * 100)], ["s"])
    assert pgcodec._text_rows_gathered(big) is None
    assert pgcodec.encode_datarows(big, [0]) == b"".join(old_encode_rows(big))
    with_float = batch.append_column("f", pa.array(rng.random(n)))
    assert pgcodec._text_rows_gathered(with_float) is None
    assert pgcodec.encode_datarows(with_float, [0] * with_float.num_columns) == b"".join(
        old_encode_rows(with_float)
    )


def test_chunking_does_not_change_the_bytes(monkeypatch):
    """Rows are laid out in chunks sized by the padded width; tiny chunks, chunks halved around a
    1 MB value and one chunk for everything give the same bytes."""
    b = stats_batch(700, seed=11)
    long_text = pa.array(["x" * (1 << 20) if i == 350 else f"v{i}" for i in range(700)])
    b = b.append_column("long", long_text)
    want = {fmt: pgcodec.encode_datarows(b, [fmt] * b.num_columns) for fmt in (0, 1)}
    want["csv"] = pgcodec.encode_copy(b, "csv")
    for budget in (1, 512, 1 << 30):
        monkeypatch.setattr(pgcodec, "_BUDGET", budget)
        for fmt in (0, 1):
            assert pgcodec.encode_datarows(b, [fmt] * b.num_columns) == want[fmt]
        assert pgcodec.encode_copy(b, "csv") == want["csv"]
    assert want[0] == b"".join(old_encode_rows(b))
    table = pa.Table.from_batches([b.slice(0, 300), b.slice(300)])
    assert pgcodec.encode_datarows(table, [1] * b.num_columns) == want[1]
    assert pgcodec.encode_copy(table, "csv") == want["csv"]


def test_float_text_is_pythons_repr_at_every_magnitude():
    rng = np.random.default_rng(7)
    x = np.concatenate(
        [
            rng.standard_normal(20000) * 10.0 ** rng.integers(-330, 308, 20000),
            rng.integers(0, 2**64, 20000, dtype=np.uint64).view(np.float64),
            np.round(rng.standard_normal(2000) * 1000),
        ]
    )
    edges = [10.0**k for k in range(-12, 20)] + [5e-324, 1.7976931348623157e308, 0.0, -0.0]
    with np.errstate(all="ignore"):
        edges += [np.nextafter(e, 0) for e in edges] + [np.nextafter(e, np.inf) for e in edges]
        x = np.concatenate([x, edges, np.negative(edges)])
        x32 = x.astype(np.float32)
    for arr in (pa.array(x), pa.array(x32)):
        got = [f[0] for f in datarows(pgcodec.encode_datarows(pa.record_batch([arr], ["x"]), [0]))]
        assert got == [old_text_value(v).encode() for v in arr.to_pylist()]


def test_text_deliberate_changes_from_the_old_encoder(path):
    """Intervals print as PostgreSQL does (the old encoder sent Python's MonthDayNano repr) and
    array elements holding \\r \\v \\f are quoted (array_out quotes every isspace character)."""
    rows = datarows(pgcodec.encode_datarows(interval_batch(), [0]))
    assert [r[0] for r in rows] == [
        b"1 day",
        b"1 year 2 mons 3 days 04:05:06.5",
        b"00:00:00",
        None,
        b"-1 days +00:00:01",
        b"-1 mons",
        b"-00:00:00.000001",
        b"1 mon 1 day 01:00:00",
    ]
    for raw, v in zip([r[0] for r in rows], interval_batch().column(0).to_pylist(), strict=True):
        assert load(raw, pgcodec.INTERVAL, Format.TEXT) == expected(v, pa.month_day_nano_interval())
    b = pa.record_batch([pa.array([["a\rb", "c\vd", "e\ff", "ok"]])], ["l"])
    (row,) = datarows(pgcodec.encode_datarows(b, [0]))
    assert row[0] == b'{"a\rb","c\vd","e\ff",ok}'
    assert load(row[0], 1009, Format.TEXT) == ["a\rb", "c\vd", "e\ff", "ok"]


def test_text_infinite_and_out_of_range_dates(path):
    """DuckDB's infinities (the old encoder raised on them) and years beyond 1-9999."""
    days = pa.array([2**31 - 1, -(2**31 - 1), -719163, -719528, 2_932_897, 0], pa.date32())
    ts = pa.array([2**63 - 1, -(2**63 - 1), 0], pa.timestamp("us"))
    got = [r[0] for r in datarows(pgcodec.encode_datarows(pa.record_batch([days], ["d"]), [0]))]
    assert got == [
        b"infinity",
        b"-infinity",
        b"0001-12-31 BC",
        b"0001-01-01 BC",
        b"10000-01-01",
        b"1970-01-01",
    ]
    got = [r[0] for r in datarows(pgcodec.encode_datarows(pa.record_batch([ts], ["t"]), [0]))]
    assert got == [b"infinity", b"-infinity", b"1970-01-01 00:00:00"]
    rows = datarows(
        pgcodec.encode_datarows(pa.record_batch([days, ts.take([0, 1, 2, 2, 2, 2])], ["d", "t"]), [1, 1])
    )
    assert [struct.unpack("!i", r[0])[0] for r in rows[:2]] == [2**31 - 1, -(2**31)]
    assert [struct.unpack("!q", r[1])[0] for r in rows[:2]] == [2**63 - 1, -(2**63)]


def test_text_loads_with_psycopg(path):
    """The text format parses back with psycopg's text loaders to the Arrow values (types whose
    text PostgreSQL prints: durations keep the old encoder's own spelling)."""
    b = every_type_batch()
    skip = {
        "duration",
        "duration_s",
        "ts_ns",
        "tstz_ns",
        "struct",
        "map",
        "nested_list",
        "nested_text",
        "nulls",
    }
    rows = datarows(pgcodec.encode_datarows(b, [0] * b.num_columns))
    for j, field in enumerate(b.schema):
        if field.name in skip:
            continue
        oid = pgcodec.oid_of(field.type)
        for row, v in zip(rows, b.column(j).to_pylist(), strict=True):
            want = expected(v, field.type)
            if isinstance(field.type, pa.BaseExtensionType):
                want = uuid.UUID(bytes=want.bytes) if want is not None else None
            assert same(load(row[j], oid, Format.TEXT), want), (field.name, row[j], v)


# -- binary format: psycopg's loaders --------------------------------------------------------


def check_binary(b: pa.RecordBatch, buf: bytes | None = None) -> None:
    rows = datarows(pgcodec.encode_datarows(b, [1] * b.num_columns) if buf is None else buf)
    assert len(rows) == b.num_rows
    text_rows = datarows(pgcodec.encode_datarows(b, [0] * b.num_columns))
    for j, field in enumerate(b.schema):
        oid = pgcodec.oid_of(field.type)
        for i, (row, v) in enumerate(zip(rows, b.column(j).to_pylist(), strict=True)):
            got = load(row[j], oid, Format.BINARY)
            if oid == pgcodec.TEXT and not (
                pa.types.is_string(field.type) or pa.types.is_large_string(field.type)
            ):
                assert row[j] == text_rows[i][j], field.name  # sent as text: the text bytes
                continue
            want = expected(v, field.type)
            assert same(got, want), (field.name, got, want)


def test_binary_loads_with_psycopg_for_every_type(path):
    b = every_type_batch().drop_columns(["ts_s"])  # -1 s: checked below (the floor of negative units)
    check_binary(b)
    check_binary(interval_batch())
    (row,) = datarows(pgcodec.encode_datarows(every_type_batch().select(["ts_s"]).slice(1, 1), [1]))
    assert load(row[0], pgcodec.TIMESTAMP, Format.BINARY) == dt.datetime(1969, 12, 31, 23, 59, 59)


def test_binary_of_sliced_batches(path):
    b = every_type_batch()
    for start, length in ((1, 3), (2, 1), (3, 1)):
        check_binary(b.slice(start, length).drop_columns(["ts_s"]))


def test_binary_numeric_digits():
    """numeric_send's base-10000 digits, weight, sign and scale, read back by psycopg."""
    values = [
        "0",
        "0.00",
        "1",
        "-1",
        "10000",
        "9999.9999",
        "0.0001",
        "-0.00001",
        "123456789.123456789",
        "1e20",
    ]
    values += ["1.50", "-12.3400", str(2**127), "0.000000001"]
    for s in values:
        d = Decimal(s)
        raw = pgcodec._numeric_send(d)
        got = load(raw, pgcodec.NUMERIC, Format.BINARY)
        assert got == d and got.as_tuple().exponent == min(d.as_tuple().exponent, 0), s
        assert pgcodec.decode_param(raw, pgcodec.NUMERIC, 1) == (int(d) if "." not in s else d)
    for v in (Decimal("NaN"), Decimal("Infinity"), Decimal("-Infinity")):
        assert same(load(pgcodec._numeric_send(v), pgcodec.NUMERIC, Format.BINARY), v) or v.is_nan()


def test_duckdb_results_round_trip(path):
    """Real DuckDB results: every format decodes with psycopg to what DuckDB's own fetch gives."""
    q = """SELECT * FROM (VALUES
        (1::TINYINT, 2::SMALLINT, 3, 4::BIGINT, 5::UTINYINT, 6::UBIGINT, 7::HUGEINT, 1.5::FLOAT, 2.5::DOUBLE,
         1.25::DECIMAL(10,2), 'text', 'x'::BLOB, DATE '2024-02-29', TIME '12:34:56.789',
         TIMESTAMP '2024-01-02 03:04:05.678901', TIMESTAMPTZ '2024-01-02 03:04:05+00', INTERVAL 3 DAY,
         [1, NULL, 3], ['a b', NULL, '"q"'], [1.5, NULL]::DOUBLE[], true, 'a'::ENUM('a', 'b')),
        (NULL, NULL, NULL, NULL, NULL, NULL, NULL, 'nan'::FLOAT, '-inf'::DOUBLE, NULL, '', NULL, NULL,
         NULL, NULL, NULL, NULL, [], [], NULL, NULL, NULL)
    ) t(a, b, c, d, e, f, g, h, i, j, k, l, m, n, o, p, q, r, s, u, v, w)"""
    rel = duckdb.sql(q)
    rows = rel.fetchall()
    (batch,) = rel.to_arrow_table().to_batches()
    check_binary(batch)
    binary = datarows(pgcodec.encode_datarows(batch, [1] * batch.num_columns))
    for j, field in enumerate(batch.schema):
        oid = pgcodec.oid_of(field.type)
        for row, duck_row in zip(binary, rows, strict=True):
            got, want = load(row[j], oid, Format.BINARY), duck_row[j]
            if isinstance(want, dt.timedelta):
                assert got == want
            elif not isinstance(want, dt.datetime) or want.tzinfo is None:
                assert same(got, Decimal(want) if oid == pgcodec.NUMERIC and want is not None else want), j
            else:
                assert got == want


def test_mixed_formats_per_column(path):
    b = every_type_batch()
    fmts = [i % 2 for i in range(b.num_columns)]
    rows = datarows(pgcodec.encode_datarows(b, fmts))
    text = datarows(pgcodec.encode_datarows(b, [0] * b.num_columns))
    binary = datarows(pgcodec.encode_datarows(b, [1] * b.num_columns))
    for i, row in enumerate(rows):
        assert row == [(binary if f else text)[i][j] for j, f in enumerate(fmts)]
    with pytest.raises(ValueError):
        pgcodec.encode_datarows(b, [0])
    with pytest.raises(ValueError):
        pgcodec.encode_datarows(b, [2] * b.num_columns)


def encodings(b: pa.RecordBatch) -> list[bytes]:
    n = b.num_columns
    out = [pgcodec.encode_datarows(b, [f] * n) for f in (0, 1)]
    out += [pgcodec.encode_datarows(b, [i % 2 for i in range(n)]), b"".join(pgcodec.encode_datarow_list(b))]
    out += [pgcodec.encode_copy(b, "binary"), pgcodec.encode_copy(b, "text"), pgcodec.encode_copy(b, "csv")]
    out += [pgcodec.encode_copy(b, "text", delimiter="-", null="NULL", header=True)]
    out += [
        pgcodec.encode_copy(
            b, "csv", delimiter=" ", quote="'", escape="\\", null="x", force_quote=b.schema.names[:2]
        )
    ]
    return out


def test_per_value_and_vectorized_encoders_agree(monkeypatch):
    batches = [every_type_batch(), interval_batch(), copy_batch(), stats_batch(50, seed=2)]
    batches.append(pa.record_batch([pa.array([2**31 - 1, -(2**31 - 1), -719163, 0], pa.date32())], ["d"]))
    for b in batches:
        monkeypatch.setattr(pgcodec, "_SMALL_ROWS", -1)
        vectorized = encodings(b)
        monkeypatch.setattr(pgcodec, "_SMALL_ROWS", 10**9)
        assert encodings(b) == vectorized


# -- COPY ----------------------------------------------------------------------------------------


def test_copy_binary_is_datarow_bodies_and_loads_with_psycopg(path):
    b = every_type_batch()
    tuples = copy_binary_tuples(
        pgcodec.COPY_BINARY_HEADER + pgcodec.encode_copy(b, "binary") + pgcodec.COPY_BINARY_TRAILER
    )
    rows = pgcodec.encode_datarows(b, [1] * b.num_columns)
    assert b"".join(tuples) == b"".join(r[5:] for r in pgcodec.encode_datarow_list(b, [1] * b.num_columns))
    assert len(rows) == sum(len(t) + 5 for t in tuples)
    oids = [pgcodec.oid_of(f.type) for f in b.schema]
    tx = Transformer()
    tx.set_loader_types(oids, Format.BINARY)
    text = datarows(pgcodec.encode_datarows(b, [0] * b.num_columns))
    for i, t in enumerate(tuples):
        loaded = copy_base.parse_row_binary(t, tx)
        for j, field in enumerate(b.schema):
            if (
                oids[j] == pgcodec.TEXT
                and not pa.types.is_string(field.type)
                and field.name != "large_string"
            ):
                assert (loaded[j] or "").encode() == (text[i][j] or b"")
                continue
            want = expected(b.column(j)[i].as_py(), field.type)
            assert same(loaded[j], want), field.name
    assert b"PGCOPY\n\xff\r\n\x00" + bytes(8) == pgcodec.COPY_BINARY_HEADER
    assert pgcodec.COPY_BINARY_TRAILER == b"\xff\xff"
    with pytest.raises(ValueError):
        pgcodec.encode_copy(b, "binary", header=True)


def copy_batch() -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array(["a\tb", "back\\slash", "line\nbreak\r", "", "\\N", None, "x|y", "bs\bff\fvt\v"]),
            pa.array([1, None, -2, 0, 3, 4, 5, 6]),
            pa.array([1.5, math.nan, -math.inf, 0.0, 1e-05, None, 2.0, -0.5]),
        ],
        ["s", "i", "f"],
    )


def copy_messages(stream: bytes) -> list[bytes]:
    """The payloads of concatenated CopyData messages."""
    out, pos = [], 0
    while pos < len(stream):
        assert stream[pos : pos + 1] == b"d"
        (n,) = struct.unpack_from("!i", stream, pos + 1)
        out.append(stream[pos + 5 : pos + 1 + n])
        pos += 1 + n
    assert pos == len(stream)
    return out


def test_copy_encoder_sends_one_row_per_message(path, monkeypatch):
    """PostgreSQL sends one row per CopyData message and psycopg's Copy.rows() parses each message
    as one row: read the stream with psycopg's own COPY formatters, message by message."""
    # psycopg_binary's C text row parser loads nothing without a connection: its Python twin
    monkeypatch.setattr(copy_base, "parse_row_text", copy_base._parse_row_text)
    b = every_type_batch().select(
        ["bool", "int64", "float64", "string", "binary", "ts_us", "list_text", "dec"]
    )
    oids = [pgcodec.oid_of(f.type) for f in b.schema]
    parts = [b.slice(0, 2), b.slice(2, 0), b.slice(2)]
    for fmt, formatter in (("text", copy_base.TextFormatter), ("binary", copy_base.BinaryFormatter)):
        tx = Transformer()
        tx.set_loader_types(oids, Format.BINARY if fmt == "binary" else Format.TEXT)
        enc = pgcodec.CopyEncoder(b.schema.names, fmt)
        stream = enc.start() + b"".join(enc.rows(p) for p in parts) + enc.finish()
        messages = copy_messages(stream)
        assert len(messages) == b.num_rows + (fmt == "binary")
        reader = formatter(tx)
        rows = [reader.parse_row(m) for m in messages]
        if fmt == "binary":
            assert rows.pop() is None
            assert (
                b"".join(messages) == pgcodec.COPY_BINARY_HEADER + pgcodec.encode_copy(b, fmt) + b"\xff\xff"
            )
        else:
            assert b"".join(messages) == pgcodec.encode_copy(b, fmt)
        for i, row in enumerate(rows):
            for j, field in enumerate(b.schema):
                assert same(row[j], expected(b.column(j)[i].as_py(), field.type)), (fmt, field.name)
    enc = pgcodec.CopyEncoder(b.schema.names, "csv", header=True, force_quote="*")
    messages = copy_messages(enc.start() + b"".join(enc.rows(p) for p in parts) + enc.finish())
    assert messages[0] == pgcodec.copy_csv_header(b.schema.names) and len(messages) == b.num_rows + 1
    assert b"".join(messages[1:]) == pgcodec.encode_copy(b, "csv", force_quote="*")
    empty = pgcodec.CopyEncoder(["a"], "binary")
    (only,) = copy_messages(empty.start() + empty.rows(b.slice(0, 0)) + empty.finish())
    assert copy_base.BinaryFormatter(Transformer()).parse_row(only) is None
    with pytest.raises(ValueError):
        pgcodec.CopyEncoder(["a"], "binary", header=True)


def test_copy_text_by_postgresql_rules(path):
    """COPY TO text: tab, \\N, and backslash before backslash, \\b \\f \\n \\r \\t \\v and the
    delimiter (PostgreSQL's CopyAttributeOutText); a literal '\\N' string is escaped."""
    out = pgcodec.encode_copy(copy_batch(), "text")
    assert out == (
        b"a\\tb\t1\t1.5\n"
        b"back\\\\slash\t\\N\tNaN\n"
        b"line\\nbreak\\r\t-2\t-Infinity\n"
        b"\t0\t0.0\n"
        b"\\\\N\t3\t1e-05\n"
        b"\\N\t4\t\\N\n"
        b"x|y\t5\t2.0\n"
        b"bs\\bff\\fvt\\v\t6\t-0.5\n"
    )
    piped = pgcodec.encode_copy(copy_batch().slice(5, 3), "text", delimiter="|", null="NUL", header=True)
    assert piped == b"s|i|f\nNUL|4|NUL\nx\\|y|5|2.0\nbs\\bff\\fvt\\v|6|-0.5\n"
    minus = pgcodec.encode_copy(copy_batch().select(["i", "f"]).slice(2, 1), "text", delimiter="-")
    assert minus == b"\\-2-\\-Infinity\n"  # the delimiter inside numbers is escaped too
    with pytest.raises(ValueError):
        pgcodec.encode_copy(copy_batch(), "text", delimiter="\\")
    with pytest.raises(ValueError):
        pgcodec.encode_copy(copy_batch(), "text", delimiter="|", null="a|b")


def test_copy_text_loads_with_psycopg(path):
    b = every_type_batch().select(
        [
            "bool",
            "int64",
            "float64",
            "string",
            "large_string",
            "string_view",
            "binary",
            "date32",
            "ts_us",
            "tstz_utc",
            "list_text",
            "list_int",
            "dec",
        ]
    )
    oids = [pgcodec.oid_of(f.type) for f in b.schema]
    tx = Transformer()
    tx.set_loader_types(oids, Format.TEXT)
    lines = pgcodec.encode_copy(b, "text").split(b"\n")
    assert lines[-1] == b""
    for i, line in enumerate(lines[:-1]):
        loaded = copy_base._parse_row_text(line + b"\n", tx)  # the C one needs a live copy
        for j, field in enumerate(b.schema):
            assert same(loaded[j], expected(b.column(j)[i].as_py(), field.type)), field.name


def test_copy_csv_by_postgresql_rules(path):
    """CSV: quoted when the value holds the delimiter, the quote, CR or LF, or equals the null
    string (so '' is quoted under the default empty NULL); quotes doubled; NULL unquoted."""
    b = pa.record_batch(
        [
            pa.array(["a,b", "", "multi\nline", " lead space", None, "cr\r"]),
            pa.array([1, None, 2, 3, 4, 5]),
            pa.array(['say "hi"', "x", "\\.", "trailing ", "NULL", None]),
        ],
        ["s", "i", "t"],
    )
    assert pgcodec.encode_copy(b, "csv") == (
        b'"a,b",1,"say ""hi"""\n""'
        + b",,x\n"
        + b'"multi\nline",2,\\.\n lead space,3,trailing \n,4,NULL\n"cr\r",5,\n'
    )
    header = pgcodec.copy_csv_header(b.schema.names)
    assert header == b"s,i,t\n"
    assert pgcodec.encode_copy(b, "csv", header=True) == header + pgcodec.encode_copy(b, "csv")
    forced = pgcodec.encode_copy(b.slice(3, 3), "csv", force_quote=["t"], null="NULL")
    assert forced == b' lead space,3,"trailing "\nNULL,4,"NULL"\n"cr\r",5,NULL\n'
    assert pgcodec.encode_copy(b.slice(1, 1), "csv", force_quote="*") == b'"",,"x"\n'
    single = pa.record_batch([pa.array(["\\.", "x"])], ["\\."])
    assert pgcodec.encode_copy(single, "csv", header=True) == b'"\\."\n"\\."\nx\n'
    semi = pgcodec.encode_copy(b.slice(0, 1), "csv", delimiter=";", quote="'", escape="\\")
    assert semi == b'a,b;1;say "hi"\n'
    quoted = pa.record_batch([pa.array(["it's", "back\\slash 'q'", "plain"])], ["v"])
    assert (
        pgcodec.encode_copy(quoted, "csv", quote="'", escape="\\")
        == b"'it\\'s'\n'back\\\\slash \\'q\\''\nplain\n"
    )
    with pytest.raises(ValueError):
        pgcodec.encode_copy(b, "csv", force_quote=["nope"])
    with pytest.raises(ValueError):
        pgcodec.encode_copy(b, "csv", delimiter="ab")


def test_copy_csv_parses_back_with_pythons_csv(path):
    b = every_type_batch().select(
        ["string", "large_string", "string_view", "int64", "float64", "list_text", "bool"]
    )
    text = pgcodec.encode_copy(b, "csv", header=True).decode()
    rows = list(csv.reader(io.StringIO(text, newline="")))
    assert rows[0] == b.schema.names
    old_text = [[None if v is None else old_text_value(v) for v in b.column(j).to_pylist()] for j in range(7)]
    for i, row in enumerate(rows[1:]):
        assert row == ["" if old_text[j][i] is None else old_text[j][i] for j in range(7)]
    assert len(rows) == b.num_rows + 1
    tricky = pa.record_batch([pa.array([*TRICKY, None])], ["v"])
    back = list(csv.reader(io.StringIO(pgcodec.encode_copy(tricky, "csv").decode(), newline="")))
    assert [r[0] if r else "" for r in back] == [*TRICKY, ""]  # csv reads a blank line as []


def test_copy_of_stats_shaped_rows_matches_per_value_rules():
    b = stats_batch(2000, seed=5)
    lines = pgcodec.encode_copy(b, "text").split(b"\n")[:-1]
    texts = [[None if v is None else old_text_value(v) for v in c.to_pylist()] for c in b.columns]
    for i, line in enumerate(lines):
        want = "\t".join("\\N" if c[i] is None else c[i].replace("\\", "\\\\") for c in texts)
        assert line == want.encode()
    assert pgcodec.encode_copy(b, "binary") == b"".join(
        r[5:] for r in pgcodec.encode_datarow_list(b, [1] * b.num_columns)
    )


# -- parameters ----------------------------------------------------------------------------------

PARAMS = [
    0,
    1,
    -1,
    300,
    -40000,
    2**40,
    -(2**63),
    2**70,
    1.5,
    -0.0,
    math.nan,
    math.inf,
    -math.inf,
    1e-310,
    True,
    False,
    "",
    "héllo wörld 😀",
    "back\\slash",
    b"",
    b"\x00\xff\\x",
    dt.datetime(2024, 1, 2, 3, 4, 5, 6),
    dt.datetime(1, 1, 1),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999999),
    dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
    dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone(dt.timedelta(hours=5, minutes=30))),
    dt.date(2024, 2, 29),
    dt.date(1, 1, 1),
    dt.time(1, 2, 3, 4),
    dt.time(0, 0),
    Decimal("-12.3400"),
    Decimal("0.000001"),
    Decimal("1e-20"),
    Decimal("12345678901234567890.5"),
    uuid.UUID(int=2**127 + 5),
    dt.timedelta(days=1, seconds=2, microseconds=3),
    dt.timedelta(days=-3, microseconds=-1),
    [1, None, 3],
    [2**40, None],
    [1.5, None, math.nan, -math.inf],
    [],
    ["a b", None, 'q"', "\\", "NULL", "", "{x}", "c,d", "é"],
    [[1, 2], [3, 4]],
    [[None]],
    [True, None, False],
    [dt.date(2024, 1, 1), None],
    [Decimal("1.5"), None],
    [uuid.UUID(int=1)],
    [b"\x00", None],
]


def normalized(v):
    """The Python value decode_param gives for a psycopg-dumped v (same value, DuckDB's types)."""
    if isinstance(v, list):
        return [normalized(x) for x in v]
    if isinstance(v, uuid.UUID):
        return str(v)
    if isinstance(v, Decimal) and v == v.to_integral_value() and v.as_tuple().exponent >= 0:
        return int(v)
    return v


@pytest.mark.parametrize("fmt", [PyFormat.BINARY, PyFormat.TEXT])
@pytest.mark.parametrize("value", PARAMS, ids=lambda v: type(v).__name__ + ":" + repr(v)[:30])
def test_decode_param_reads_psycopg_dumps(value, fmt):
    tx = Transformer()
    dumper = tx.get_dumper(value, fmt)
    raw = dumper.dump(value)
    oid = dumper.oid
    if isinstance(value, list) and value and oid == 0:  # psycopg leaves lists of str/None untyped
        if fmt == PyFormat.BINARY:  # ... and sends them as text: an unknown type stays a string
            assert pgcodec.decode_param(bytes(raw), 0, 1) == bytes(raw).decode()
            return
        oid = pgcodec.ARRAY_OF[pgcodec.TEXT]
    if isinstance(value, str) and oid == 0:
        oid = pgcodec.TEXT
    if isinstance(value, bytes) and fmt == PyFormat.TEXT:  # without a connection psycopg escapes
        raw = b"\\x" + value.hex().encode()  # for a string literal: send what a connection sends
    if value == [b"\x00", None] and fmt == PyFormat.TEXT:
        raw = b'{"\\\\x00",NULL}'
    got = pgcodec.decode_param(None if raw is None else bytes(raw), oid, 1 if fmt == PyFormat.BINARY else 0)
    if value == [] and oid == 0:
        assert got == "{}"
        return
    want = normalized(value)
    if isinstance(value, float) and oid == pgcodec.FLOAT4:
        want = struct.unpack("!f", struct.pack("!f", value))[0]
    assert same(got, want) or (isinstance(want, dt.datetime) and got == want), (raw, got, want)


def test_decode_param_types_duckdb_takes():
    con = duckdb.connect()
    cases = [
        (b"123", pgcodec.NUMERIC, 0, "INTEGER"),
        (b"1.50", pgcodec.NUMERIC, 0, "DECIMAL(3,2)"),
        (b"1" + b"0" * 50, pgcodec.NUMERIC, 0, "DOUBLE"),
        (b"2024-01-02 03:04:05+05:30", pgcodec.TIMESTAMPTZ, 0, "TIMESTAMP WITH TIME ZONE"),
        (b"{1,2,NULL}", 1016, 0, "INTEGER[]"),
        (b"1 year 2 mons 3 days 04:05:06", pgcodec.INTERVAL, 0, "VARCHAR"),
        (b"3 days 04:05:06", pgcodec.INTERVAL, 0, "INTERVAL"),
        (b"0f0e0d0c-0b0a-0908-0706-050403020100", pgcodec.UUID, 0, "VARCHAR"),
    ]
    for raw, oid, fmt, duck_type in cases:
        value = pgcodec.decode_param(raw, oid, fmt)
        assert con.execute("SELECT typeof($1)", [value]).fetchone()[0] == duck_type, raw
    months = pgcodec.decode_param(b"1 year 2 mons 3 days 04:05:06", pgcodec.INTERVAL, 0)
    assert con.execute(
        "SELECT $1::INTERVAL = INTERVAL '1 year 2 months 3 days 4 hours 5 minutes 6 seconds'", [months]
    ).fetchone()[0]


def test_decode_param_text_forms():
    d = pgcodec.decode_param
    assert (
        d(b" 42 ", pgcodec.INT4, 0) == 42 and d(b"0x1F", pgcodec.INT8, 0) == 31 and d(b"1_000", 20, 0) == 1000
    )
    assert d(b"NaN", pgcodec.FLOAT8, 0) != d(b"NaN", pgcodec.FLOAT8, 0)
    assert d(b"-Infinity", pgcodec.FLOAT8, 0) == -math.inf and d(b"1e3", pgcodec.FLOAT4, 0) == 1000.0
    assert d(b"1e3", pgcodec.NUMERIC, 0) == 1000 and d(b"2.50", pgcodec.NUMERIC, 0) == Decimal("2.50")
    assert d(b"-0.5e-3", pgcodec.NUMERIC, 0) == Decimal("-0.0005") and math.isnan(
        d(b"nan", pgcodec.NUMERIC, 0)
    )
    assert [
        d(w, pgcodec.BOOL, 0) for w in (b"t", b"TRUE", b" yes ", b"on", b"1", b"f", b"off", b"No", b"0")
    ] == [
        True,
        True,
        True,
        True,
        True,
        False,
        False,
        False,
        False,
    ]
    assert (
        d(b"\\x00ff", pgcodec.BYTEA, 0) == b"\x00\xff" and d(b"a\\\\b\\001", pgcodec.BYTEA, 0) == b"a\\b\x01"
    )
    assert d(b"2024-01-02T03:04:05.1234567Z", pgcodec.TIMESTAMPTZ, 0) == dt.datetime(
        2024, 1, 2, 3, 4, 5, 123457, tzinfo=UTC
    )
    assert d(b"2024-01-02 03:04:05-08", pgcodec.TIMESTAMP, 0) == dt.datetime(2024, 1, 2, 3, 4, 5)
    assert d(b"2024-01-02", pgcodec.TIMESTAMPTZ, 0) == dt.datetime(2024, 1, 2, tzinfo=UTC)
    assert (
        d(b"infinity", pgcodec.TIMESTAMP, 0) == "infinity" and d(b"-infinity", pgcodec.DATE, 0) == "-infinity"
    )
    assert d(b"24:00:00", pgcodec.TIME, 0) == "24:00:00"
    assert d(b"@ 1 day 2 hours ago", pgcodec.INTERVAL, 0) == -dt.timedelta(days=1, hours=2)
    assert d(b"P1DT2H3M4.5S", pgcodec.INTERVAL, 0) == dt.timedelta(days=1, hours=2, minutes=3, seconds=4.5)
    assert d(b"-1 days +00:00:01", pgcodec.INTERVAL, 0) == dt.timedelta(days=-1, seconds=1)
    assert (
        d(b"{A1A2A3A4-B1B2-C1C2-D1D2-D3D4D5D6D7D8}", pgcodec.UUID, 0)
        == "a1a2a3a4-b1b2-c1c2-d1d2-d3d4d5d6d7d8"
    )
    assert (
        d(b"anything", 0, 0) == "anything" and d(b"x", 999999, 1) == "x" and d(None, pgcodec.INT4, 1) is None
    )
    assert d(b"{1,2}", 0, 0) == "{1,2}"


def test_decode_param_arrays():
    d = pgcodec.decode_param
    assert d(b'{a,"b c",NULL,"NULL","",  spaced out  ,"q\\"x",\\{}', 1009, 0) == [
        "a",
        "b c",
        None,
        "NULL",
        "",
        "spaced out",
        'q"x',
        "{",
    ]
    assert d(b"{{1,2},{3,NULL}}", 1007, 0) == [[1, 2], [3, None]]
    assert d(b"[0:1]={7,8}", 1016, 0) == [7, 8]
    assert d(b"{}", 1016, 0) == [] and d(b" { } ", 1009, 0) == []
    assert d(b"{1.5,NaN,-Infinity}", 1022, 0)[2] == -math.inf
    assert d(b'{"2024-01-01 00:00:00+00"}', 1185, 0) == [dt.datetime(2024, 1, 1, tzinfo=UTC)]
    binary = struct.pack("!iiI", 2, 1, pgcodec.INT4) + struct.pack("!iiii", 2, 1, 2, 1)
    binary += b"".join(struct.pack("!ii", 4, v) for v in (1, 2, 3)) + struct.pack("!i", -1)
    assert d(binary, 1007, 1) == [[1, 2], [3, None]]
    assert d(struct.pack("!iiI", 0, 0, pgcodec.INT8), 1016, 1) == []


MALFORMED_ARRAYS = [
    b"",
    b"1,2",
    b"{1,2",
    b"{1,,2}",
    b"{1,2}}",
    b"{,}",
    b"{1,}",
    b'{"a}',
    b"{{1},2}",
    b"{1,{2}}",
    b"{{1,2},{3}}",
    b"{{1},{}}",
    b"{1} x",
    b"{{}}x",
    b"{" * 7 + b"1" + b"}" * 7,
    b"{a}",
    b"{1 2}",
    b'{"1"x}',
    b"{\\",
    b"[1:2]{1}",
]


@pytest.mark.parametrize("raw", MALFORMED_ARRAYS)
def test_malformed_text_arrays_raise_value_error(raw):
    with pytest.raises(ValueError):
        pgcodec.decode_param(raw, 1007, 0)


def test_malformed_binary_values_raise_value_error():
    bad = [
        (b"\x00", pgcodec.INT4),
        (b"\x00" * 3, pgcodec.INT8),
        (b"", pgcodec.BOOL),
        (b"\x00" * 15, pgcodec.UUID),
        (b"\x00\x01\x00\x00\x00\x00\x00\x00", pgcodec.NUMERIC),
        (struct.pack("!hhHhH", 1, 0, 0, 0, 10000), 1700),
        (struct.pack("!hhHh", 0, 0, 0x1234, 0), 1700),
        (struct.pack("!i", 2**31 - 2), pgcodec.DATE),
        (b"\xff\xfe", pgcodec.TEXT),
        (struct.pack("!iiI", 7, 0, 23), 1007),
        (struct.pack("!iiI", -1, 0, 23), 1007),
        (struct.pack("!iiIii", 1, 0, 23, 10**8, 1), 1007),
        (struct.pack("!iiIii", 1, 0, 23, 2**31 - 1, 1), 1007),
        (struct.pack("!iiIiii", 1, 0, 23, 1, 1, 5) + b"\x00", 1007),
        (struct.pack("!iiIiii", 1, 0, 23, 1, 1, -2), 1007),
        (struct.pack("!iiIiiii", 1, 0, 23, 1, 1, 4, 1) + b"x", 1007),
        (struct.pack("!iiI", 1, 0, 20), 1007),
        (struct.pack("!iiI", 1, 0, 1007) + struct.pack("!ii", 1, 1) + struct.pack("!i", -1), 1007),
        (struct.pack("!iiiiii", 6, 0, 23, 100, 1, 100) + struct.pack("!ii", 100, 1) * 4, 1007),
        (struct.pack("!qii", 0, 0, 0)[:12], pgcodec.INTERVAL),
        (b"\x7f" + b"\xff" * 7, pgcodec.TIME),
        (struct.pack("!q", 2**62), pgcodec.TIMESTAMP),
        (b"\x02{}", pgcodec.JSONB),
    ]
    for raw, oid in bad:
        with pytest.raises(ValueError):
            pgcodec.decode_param(raw, oid, 1)
    with pytest.raises(ValueError):
        pgcodec.decode_param(b"1", pgcodec.INT4, 2)


def test_bounded_numeric_text():
    """PostgreSQL's numeric range (131072 digits before the point, 16383 after) is checked from
    the text: no huge Decimal-to-int conversion ever starts (it took over a minute before)."""
    for raw in (
        b"1e1000000",
        b"-1E+131073",
        b"9" * 131073,
        b"0." + b"0" * 16383 + b"1",
        b"1e-16384",
        b"1e9999999999",
    ):
        with pytest.raises(ValueError):
            pgcodec.decode_param(raw, pgcodec.NUMERIC, 0)
    big = pgcodec.decode_param(b"1e100000", pgcodec.NUMERIC, 0)
    assert big == Decimal("1e100000") and not isinstance(big, int)
    assert pgcodec.decode_param(b"9" * 38, pgcodec.NUMERIC, 0) == int("9" * 38)
    for raw in (b"1e", b"e5", b".", b"1.2.3", b"--1", b"1 2", b"0x10", b"\xff"):
        with pytest.raises(ValueError):
            pgcodec.decode_param(raw, pgcodec.NUMERIC, 0)
    for raw, oid in (
        (b"99999", pgcodec.INT2),
        (b"9" * 5000, pgcodec.INT8),
        (b"1e400", pgcodec.FLOAT8),
        (b"maybe", 16),
    ):
        with pytest.raises(ValueError):
            pgcodec.decode_param(raw, oid, 0)


def test_bounded_array_text():
    with pytest.raises(ValueError):
        pgcodec.decode_param(b"{" * 100_000 + b"}" * 100_000, 1007, 0)
    deep = b"{" * 6 + b"1" + b"}" * 6
    assert pgcodec.decode_param(deep, 1007, 0) == [[[[[[1]]]]]]


# -- properties ------------------------------------------------------------------------------------

ints = st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1))
floats = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
texts = st.one_of(st.none(), st.text(max_size=12), st.sampled_from(TRICKY))
bools = st.one_of(st.none(), st.booleans())
int_lists = st.one_of(st.none(), st.lists(ints, max_size=5))


@st.composite
def tables(draw) -> pa.RecordBatch:
    n = draw(st.integers(0, 25))
    cols = {
        "i": pa.array(draw(st.lists(ints, min_size=n, max_size=n)), pa.int64()),
        "f": pa.array(draw(st.lists(floats, min_size=n, max_size=n)), pa.float64()),
        "s": pa.array(draw(st.lists(texts, min_size=n, max_size=n)), pa.string()),
        "b": pa.array(draw(st.lists(bools, min_size=n, max_size=n)), pa.bool_()),
        "l": pa.array(draw(st.lists(int_lists, min_size=n, max_size=n)), pa.list_(pa.int64())),
    }
    batch = pa.RecordBatch.from_pydict(cols)
    start = draw(st.integers(0, n))
    return batch.slice(start, draw(st.integers(0, n - start)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_property_binary_round_trips_through_psycopg(batch):
    small, pgcodec._SMALL_ROWS = pgcodec._SMALL_ROWS, -1  # the vectorized encoder (small batches)
    try:
        rows = datarows(pgcodec.encode_datarows(batch, [1] * batch.num_columns))
    finally:
        pgcodec._SMALL_ROWS = small
    assert len(rows) == batch.num_rows
    for j, field in enumerate(batch.schema):
        oid = pgcodec.oid_of(field.type)
        for row, v in zip(rows, batch.column(j).to_pylist(), strict=True):
            got = load(row[j], oid, Format.BINARY)
            assert same(got, v), (field.name, got, v)
            if isinstance(v, float):
                assert math.copysign(1, got) == math.copysign(1, v)
    copy = pgcodec.encode_copy(batch, "binary")
    assert copy == b"".join(r[5:] for r in pgcodec.encode_datarow_list(batch, [1] * batch.num_columns))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables())
def test_property_text_is_the_old_encoders(batch):
    assert pgcodec.encode_datarows(batch, [0] * batch.num_columns) == b"".join(old_encode_rows(batch))
    small, pgcodec._SMALL_ROWS = pgcodec._SMALL_ROWS, -1
    try:
        vectorized = encodings(batch)
    finally:
        pgcodec._SMALL_ROWS = small
    assert encodings(batch) == vectorized
    lines = pgcodec.encode_copy(batch, "csv").decode()
    back = list(csv.reader(io.StringIO(lines, newline="")))
    assert len(back) == batch.num_rows


@settings(max_examples=400, deadline=None)
@given(
    st.binary(max_size=64) | st.text(max_size=40).map(str.encode),
    st.sampled_from(
        [
            16,
            17,
            20,
            21,
            23,
            25,
            26,
            114,
            700,
            701,
            1082,
            1083,
            1114,
            1184,
            1186,
            1266,
            1700,
            2950,
            3802,
            1000,
            1001,
            1007,
            1009,
            1016,
            1022,
            1115,
            1182,
            1185,
            1187,
            1231,
            2951,
            0,
        ]
    ),
    st.sampled_from([0, 1]),
)
def test_property_decode_param_raises_only_value_error(raw, oid, fmt):
    try:
        pgcodec.decode_param(raw, oid, fmt)
    except ValueError as exc:
        assert str(exc)
