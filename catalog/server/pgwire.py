"""PostgreSQL frontend/backend protocol 3: pure functions, no sockets.

Message framing (parse frontend messages, build backend ones), SCRAM-SHA-256 (RFC 5802 / 7677)
and MD5 password checks, the mapping from Arrow/DuckDB types to PostgreSQL type OIDs, and the
text encoding of values (NaN/Infinity, arrays as `{1,2,3}`, timestamps) that clients parse.
`catalog.server.server` does the I/O.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import struct
from dataclasses import dataclass, field

import pyarrow as pa

from catalog.server import pgcodec
from catalog.server.pgcodec import (  # noqa: F401 (re-exported: the OIDs live with the Arrow -> OID mapping)
    ARRAY_OF,
    BOOL,
    BYTEA,
    DATE,
    FLOAT4,
    FLOAT8,
    INT2,
    INT4,
    INT8,
    INTERVAL,
    JSON,
    NAME,
    NUMERIC,
    OID,
    TEXT,
    TIME,
    TIMESTAMP,
    TIMESTAMPTZ,
    TYPE_NAMES,
    TYPE_SIZES,
    UUID,
    VARCHAR,
)

PROTOCOL_3 = 196608
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102

# DuckDB type names (as in duckdb_columns().data_type) -> PostgreSQL OID.
DUCK_TYPE_OIDS = {
    "BOOLEAN": BOOL, "TINYINT": INT2, "SMALLINT": INT2, "INTEGER": INT4, "BIGINT": INT8,
    "UTINYINT": INT2, "USMALLINT": INT4, "UINTEGER": OID, "UBIGINT": NUMERIC, "HUGEINT": NUMERIC,
    "FLOAT": FLOAT4, "DOUBLE": FLOAT8, "VARCHAR": TEXT, "BLOB": BYTEA, "DATE": DATE, "TIME": TIME,
    "TIMESTAMP": TIMESTAMP, "TIMESTAMP WITH TIME ZONE": TIMESTAMPTZ, "INTERVAL": INTERVAL,
    "UUID": UUID, "JSON": JSON, "BIGINT[]": 1016, "INTEGER[]": 1007, "VARCHAR[]": 1009,
    "DOUBLE[]": 1022, "UINTEGER[]": 1028, "FLOAT[]": 1021, "BOOLEAN[]": 1000, "SMALLINT[]": 1005,
}  # fmt: skip


oid_of = pgcodec.oid_of  # PostgreSQL type OID of an Arrow column type

# -- text encoding of values (catalog.server.pgcodec) --------------------------------------------------

text_value = pgcodec.text_value  # the PostgreSQL text of one Python value


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
    """DataRow messages (text format) for every row of a record batch (pgcodec, vectorized)."""
    return pgcodec.encode_datarow_list(batch)


# -- parameters (Bind) -------------------------------------------------------------------------

decode_param = pgcodec.decode_param  # a Bind parameter as a Python value for DuckDB


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


def row_description(fields: list[tuple[str, int]], formats: list[int] | None = None) -> bytes:
    """RowDescription: each field's name, type OID, size and format code (0 text, 1 binary)."""
    body = bytearray(struct.pack("!h", len(fields)))
    for i, (name, oid) in enumerate(fields):
        fmt = formats[i] if formats else 0
        body += cstr(name) + struct.pack("!ihihih", 0, 0, oid, TYPE_SIZES.get(oid, -1), -1, fmt)
    return msg(b"T", bytes(body))


def copy_out_response(fmt: int, ncols: int) -> bytes:
    """CopyOutResponse: overall format (0 text/csv, 1 binary) and each column's (the same)."""
    return msg(b"H", struct.pack("!bh", fmt, ncols) + struct.pack(f"!{ncols}h", *([fmt] * ncols)))


def copy_data(payload: bytes) -> bytes:
    return msg(b"d", payload)


COPY_DONE = b"c\x00\x00\x00\x04"


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
