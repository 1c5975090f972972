"""PostgreSQL frontend/backend protocol 3: pure functions, no sockets.

Message framing (parse frontend messages, build backend ones), SCRAM-SHA-256 (RFC 5802 / 7677)
and MD5 password checks, the mapping from Arrow/DuckDB types to PostgreSQL type OIDs, and the
text encoding of values (NaN/Infinity, arrays as `{1,2,3}`, timestamps) that clients parse.
`catalog.server` does the I/O.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import hashlib
import hmac
import math
import secrets
import struct
from dataclasses import dataclass, field

import pyarrow as pa

PROTOCOL_3 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

# -- type OIDs ---------------------------------------------------------------------------------

BOOL, BYTEA, NAME, INT8, INT2, INT4, TEXT, OID = 16, 17, 19, 20, 21, 23, 25, 26
JSON, FLOAT4, FLOAT8, VARCHAR = 114, 700, 701, 1043
DATE, TIME, TIMESTAMP, TIMESTAMPTZ, INTERVAL, NUMERIC, UUID = 1082, 1083, 1114, 1184, 1186, 1700, 2950
ARRAY_OF = {BOOL: 1000, INT2: 1005, INT4: 1007, TEXT: 1009, INT8: 1016, FLOAT4: 1021, FLOAT8: 1022}
TYPE_NAMES = {
    BOOL: "bool", BYTEA: "bytea", NAME: "name", INT8: "int8", INT2: "int2", INT4: "int4", TEXT: "text",
    OID: "oid", JSON: "json", FLOAT4: "float4", FLOAT8: "float8", VARCHAR: "varchar", DATE: "date",
    TIME: "time", TIMESTAMP: "timestamp", TIMESTAMPTZ: "timestamptz", INTERVAL: "interval",
    NUMERIC: "numeric", UUID: "uuid", 1000: "_bool", 1005: "_int2", 1007: "_int4", 1009: "_text",
    1016: "_int8", 1021: "_float4", 1022: "_float8",
}  # fmt: skip
TYPE_SIZES = {BOOL: 1, INT2: 2, INT4: 4, INT8: 8, OID: 4, FLOAT4: 4, FLOAT8: 8, DATE: 4, TIME: 8,
              TIMESTAMP: 8, TIMESTAMPTZ: 8, INTERVAL: 16, UUID: 16, NAME: 64}  # fmt: skip

# DuckDB type names (as in duckdb_columns().data_type) -> PostgreSQL OID.
DUCK_TYPE_OIDS = {
    "BOOLEAN": BOOL, "TINYINT": INT2, "SMALLINT": INT2, "INTEGER": INT4, "BIGINT": INT8,
    "UTINYINT": INT2, "USMALLINT": INT4, "UINTEGER": INT8, "UBIGINT": NUMERIC, "HUGEINT": NUMERIC,
    "FLOAT": FLOAT4, "DOUBLE": FLOAT8, "VARCHAR": TEXT, "BLOB": BYTEA, "DATE": DATE, "TIME": TIME,
    "TIMESTAMP": TIMESTAMP, "TIMESTAMP WITH TIME ZONE": TIMESTAMPTZ, "INTERVAL": INTERVAL,
    "UUID": UUID, "JSON": JSON, "BIGINT[]": 1016, "INTEGER[]": 1007, "VARCHAR[]": 1009,
    "DOUBLE[]": 1022, "FLOAT[]": 1021, "BOOLEAN[]": 1000, "SMALLINT[]": 1005,
}  # fmt: skip


def _scalar_oid(t: pa.DataType) -> int:
    if pa.types.is_boolean(t):
        return BOOL
    if pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t):
        return INT2
    if pa.types.is_int32(t) or pa.types.is_uint16(t):
        return INT4
    if pa.types.is_int64(t) or pa.types.is_uint32(t):
        return INT8
    if pa.types.is_uint64(t) or pa.types.is_decimal(t):
        return NUMERIC
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return FLOAT4
    if pa.types.is_float64(t):
        return FLOAT8
    if pa.types.is_timestamp(t):
        return TIMESTAMPTZ if t.tz else TIMESTAMP
    if pa.types.is_date(t):
        return DATE
    if pa.types.is_time(t):
        return TIME
    if pa.types.is_interval(t) or pa.types.is_duration(t):
        return INTERVAL
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return BYTEA
    return TEXT


def oid_of(t: pa.DataType) -> int:
    """PostgreSQL type OID for an Arrow column type (lists of scalars -> array types)."""
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        inner = t.value_type
        if pa.types.is_list(inner) or pa.types.is_large_list(inner):
            return TEXT  # nested (possibly ragged) lists: the array literal as text
        return ARRAY_OF.get(_scalar_oid(inner), TEXT)
    return _scalar_oid(t)


# -- text encoding of values -------------------------------------------------------------------


def _float_text(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    return repr(v)


def _array_elem(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, list):
        return "{" + ",".join(_array_elem(x) for x in v) + "}"
    s = text_value(v)
    if isinstance(v, bool | int | float) and not isinstance(v, str):
        return s
    if s == "" or s.upper() == "NULL" or any(c in s for c in ',{}"\\ \t\n'):
        return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return s


def text_value(v: object) -> str:
    """The PostgreSQL text representation of a Python value (as produced by Arrow's to_pylist)."""
    if isinstance(v, bool):
        return "t" if v else "f"
    if isinstance(v, float):
        return _float_text(v)
    if isinstance(v, int | str):
        return str(v)
    if isinstance(v, list):
        return "{" + ",".join(_array_elem(x) for x in v) + "}"
    if isinstance(v, dt.datetime):
        s = v.isoformat(sep=" ")
        if v.tzinfo is not None and s.endswith("+00:00"):
            s = s[:-6] + "+00"
        return s
    if isinstance(v, dt.date | dt.time):
        return v.isoformat()
    if isinstance(v, dt.timedelta):
        return f"{v.days} days {v.seconds} seconds {v.microseconds} microseconds" if v.days else str(v)
    if isinstance(v, bytes):
        return "\\x" + v.hex()
    if isinstance(v, decimal.Decimal):
        return str(v)
    if isinstance(v, dict):
        import json

        return json.dumps(v, default=str)
    return str(v)


def encode_rows_text(rows) -> list[bytes]:
    """One DataRow message (text format) per row of Python values."""
    out = []
    for row in rows:
        body = bytearray(struct.pack("!h", len(row)))
        for v in row:
            if v is None:
                body += b"\xff\xff\xff\xff"
            else:
                b = text_value(v).encode()
                body += struct.pack("!i", len(b)) + b
        out.append(b"D" + struct.pack("!i", len(body) + 4) + bytes(body))
    return out


def encode_rows(batch: pa.RecordBatch) -> list[bytes]:
    """DataRow messages (text format) for every row of a record batch."""
    cols = [c.to_pylist() for c in batch.columns]
    return (
        encode_rows_text(zip(*cols, strict=True)) if cols else [b"D\x00\x00\x00\x06\x00\x00"] * batch.num_rows
    )


# -- parameters (Bind) -------------------------------------------------------------------------


def decode_param(raw: bytes | None, oid: int, fmt: int) -> object:
    """A Bind parameter as a Python value for DuckDB."""
    if raw is None:
        return None
    if fmt == 1:  # binary
        if oid == INT2:
            return struct.unpack("!h", raw)[0]
        if oid in (INT4, OID):
            return struct.unpack("!i", raw)[0]
        if oid == INT8:
            return struct.unpack("!q", raw)[0]
        if oid == FLOAT4:
            return struct.unpack("!f", raw)[0]
        if oid == FLOAT8:
            return struct.unpack("!d", raw)[0]
        if oid == BOOL:
            return raw != b"\x00"
        if oid == BYTEA:
            return bytes(raw)
        return raw.decode()
    s = raw.decode()
    if oid in (INT2, INT4, INT8, OID):
        return int(s)
    if oid in (FLOAT4, FLOAT8):
        return float(s)
    if oid == NUMERIC:
        d = decimal.Decimal(s)
        return int(d) if d == d.to_integral_value() and "." not in s else float(d)
    if oid == BOOL:
        return s.lower() in ("t", "true", "1", "on", "yes", "y")
    return s


# -- frontend messages -------------------------------------------------------------------------


class Reader:
    """Cursor over a message body."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def int16(self) -> int:
        (v,) = struct.unpack_from("!h", self.data, self.pos)
        self.pos += 2
        return v

    def int32(self) -> int:
        (v,) = struct.unpack_from("!i", self.data, self.pos)
        self.pos += 4
        return v

    def cstr(self) -> str:
        end = self.data.index(b"\x00", self.pos)
        s = self.data[self.pos : end].decode()
        self.pos = end + 1
        return s

    def take(self, n: int) -> bytes:
        b = self.data[self.pos : self.pos + n]
        self.pos += n
        return b


def parse_startup(body: bytes) -> tuple[int, dict[str, str] | tuple[int, int]]:
    """(code, params) of a startup-phase packet body (after its length word).

    code is PROTOCOL_3 (params: dict), SSL_REQUEST / GSSENC_REQUEST (params: {}) or
    CANCEL_REQUEST (params: (pid, secret)).
    """
    r = Reader(body)
    code = r.int32()
    if code == CANCEL_REQUEST:
        return code, (r.int32(), r.int32())
    params: dict[str, str] = {}
    if code == PROTOCOL_3:
        while r.pos < len(body) and body[r.pos] != 0:
            k = r.cstr()
            params[k] = r.cstr()
    return code, params


@dataclass
class Parse:
    name: str
    query: str
    param_oids: list[int]


@dataclass
class Bind:
    portal: str
    statement: str
    param_formats: list[int]
    params: list[bytes | None]
    result_formats: list[int] = field(default_factory=list)


def parse_parse(body: bytes) -> Parse:
    r = Reader(body)
    name, query = r.cstr(), r.cstr()
    n = r.int16()
    return Parse(name, query, [r.int32() for _ in range(n)])


def parse_bind(body: bytes) -> Bind:
    r = Reader(body)
    portal, stmt = r.cstr(), r.cstr()
    fmts = [r.int16() for _ in range(r.int16())]
    params: list[bytes | None] = []
    for _ in range(r.int16()):
        n = r.int32()
        params.append(None if n < 0 else r.take(n))
    rfmts = [r.int16() for _ in range(r.int16())] if r.pos < len(body) else []
    return Bind(portal, stmt, fmts, params, rfmts)


def param_formats(bind: Bind) -> list[int]:
    """Per-parameter format codes (0 text, 1 binary) following the Bind rules."""
    n = len(bind.params)
    if not bind.param_formats:
        return [0] * n
    if len(bind.param_formats) == 1:
        return bind.param_formats * n
    return bind.param_formats


# -- backend messages --------------------------------------------------------------------------


def msg(tag: bytes, body: bytes = b"") -> bytes:
    return tag + struct.pack("!i", len(body) + 4) + body


def cstr(s: str) -> bytes:
    return s.encode() + b"\x00"


def auth_ok() -> bytes:
    return msg(b"R", struct.pack("!i", 0))


def auth_cleartext() -> bytes:
    return msg(b"R", struct.pack("!i", 3))


def auth_md5(salt: bytes) -> bytes:
    return msg(b"R", struct.pack("!i", 5) + salt)


def auth_sasl(mechanisms: list[str]) -> bytes:
    return msg(b"R", struct.pack("!i", 10) + b"".join(cstr(m) for m in mechanisms) + b"\x00")


def auth_sasl_continue(data: bytes) -> bytes:
    return msg(b"R", struct.pack("!i", 11) + data)


def auth_sasl_final(data: bytes) -> bytes:
    return msg(b"R", struct.pack("!i", 12) + data)


def parameter_status(name: str, value: str) -> bytes:
    return msg(b"S", cstr(name) + cstr(value))


def backend_key(pid: int, secret: int) -> bytes:
    return msg(b"K", struct.pack("!ii", pid, secret))


def ready(status: str = "I") -> bytes:
    return msg(b"Z", status.encode())


def row_description(fields: list[tuple[str, int]]) -> bytes:
    body = bytearray(struct.pack("!h", len(fields)))
    for name, oid in fields:
        body += cstr(name) + struct.pack("!ihihih", 0, 0, oid, TYPE_SIZES.get(oid, -1), -1, 0)
    return msg(b"T", bytes(body))


def parameter_description(oids: list[int]) -> bytes:
    return msg(b"t", struct.pack("!h", len(oids)) + b"".join(struct.pack("!i", o) for o in oids))


def command_complete(tag: str) -> bytes:
    return msg(b"C", cstr(tag))


def error_response(sqlstate: str, message: str, severity: str = "ERROR") -> bytes:
    body = b"S" + cstr(severity) + b"V" + cstr(severity) + b"C" + cstr(sqlstate) + b"M" + cstr(message)
    return msg(b"E", body + b"\x00")


PARSE_COMPLETE = msg(b"1")
BIND_COMPLETE = msg(b"2")
CLOSE_COMPLETE = msg(b"3")
NO_DATA = msg(b"n")
EMPTY_QUERY = msg(b"I")
PORTAL_SUSPENDED = msg(b"s")

# -- passwords ---------------------------------------------------------------------------------


def md5_password_ok(user: str, password: str, salt: bytes, response: str) -> bool:
    """Check an MD5 password message: 'md5' + md5(md5(password + user) + salt)."""
    inner = hashlib.md5((password + user).encode()).hexdigest()
    expected = "md5" + hashlib.md5(inner.encode() + salt).hexdigest()
    return hmac.compare_digest(expected, response)


def _hmac(key: bytes, data: bytes) -> bytes:
    return hmac.new(key, data, hashlib.sha256).digest()


@dataclass
class ScramVerifier:
    """A stored SCRAM-SHA-256 secret (what pg_authid keeps), derived from a password."""

    salt: bytes
    iterations: int
    stored_key: bytes
    server_key: bytes

    @classmethod
    def from_password(cls, password: str, salt: bytes | None = None, iterations: int = 4096) -> ScramVerifier:
        salt = salt or secrets.token_bytes(16)
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), salt, iterations)
        client_key = _hmac(salted, b"Client Key")
        return cls(salt, iterations, hashlib.sha256(client_key).digest(), _hmac(salted, b"Server Key"))


class ScramError(ValueError):
    pass


class ScramServer:
    """Server side of one SCRAM-SHA-256 exchange (RFC 5802 / 7677), without channel binding."""

    MECHANISM = "SCRAM-SHA-256"

    def __init__(self, verifier: ScramVerifier, nonce: str | None = None) -> None:
        self.verifier = verifier
        self.server_nonce = nonce or base64.b64encode(secrets.token_bytes(18)).decode()
        self.client_first_bare = ""
        self.server_first = ""
        self.nonce = ""

    def first(self, client_first: str) -> str:
        """client-first-message -> server-first-message."""
        parts = client_first.split(",", 2)
        if len(parts) != 3 or parts[0] not in ("n", "y"):
            raise ScramError("channel binding is not supported")
        bare = parts[2]
        attrs = dict(a.split("=", 1) for a in bare.split(",") if "=" in a)
        if "r" not in attrs:
            raise ScramError("client nonce missing")
        self.client_first_bare = bare
        self.nonce = attrs["r"] + self.server_nonce
        salt = base64.b64encode(self.verifier.salt).decode()
        self.server_first = f"r={self.nonce},s={salt},i={self.verifier.iterations}"
        return self.server_first

    def final(self, client_final: str) -> str:
        """client-final-message -> server-final-message ('v=...'); ScramError if the proof is wrong."""
        without_proof, _, proof_part = client_final.rpartition(",p=")
        attrs = dict(a.split("=", 1) for a in without_proof.split(",") if "=" in a)
        if attrs.get("r") != self.nonce:
            raise ScramError("nonce mismatch")
        if attrs.get("c") not in ("biws", "eSws"):
            raise ScramError("channel binding is not supported")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError as exc:
            raise ScramError("bad proof") from exc
        auth_message = f"{self.client_first_bare},{self.server_first},{without_proof}".encode()
        signature = _hmac(self.verifier.stored_key, auth_message)
        if len(proof) != len(signature):
            raise ScramError("bad proof")
        client_key = bytes(a ^ b for a, b in zip(proof, signature, strict=True))
        if not hmac.compare_digest(hashlib.sha256(client_key).digest(), self.verifier.stored_key):
            raise ScramError("password authentication failed")
        server_sig = _hmac(self.verifier.server_key, auth_message)
        return "v=" + base64.b64encode(server_sig).decode()


def parse_sasl_initial(body: bytes) -> tuple[str, str]:
    """(mechanism, client-first-message) of a SASLInitialResponse."""
    r = Reader(body)
    mech = r.cstr()
    n = r.int32()
    return mech, (r.take(n).decode() if n >= 0 else "")
