"""Property-based fuzzing (hypothesis) of `dumpcat serve`'s startup and extended-protocol state
machine: any sequence of startup packets and protocol messages, well-formed or not, in any order,
gets well-formed replies or a closed connection, within the deadlines, and never an unhandled
error in the server; the server answers everyone else afterwards."""

from __future__ import annotations

import logging
import socket
import struct
import time
from pathlib import Path

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog.server.server import Limits, Server
from tests.conftest import nan_log_catalog

PROTOCOL_3 = 196608
QUERIES = [
    "SELECT 1", "SELECT $1::int + 1", "SELECT $1, $2", "SELECT op_name FROM stats LIMIT 3",
    "BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT a", "RELEASE a", "SHOW transaction isolation level",
    "SET my.x = 'y'", "DECLARE c CURSOR FOR SELECT 1", "FETCH 1 FROM c", "CLOSE c",
    "COPY (SELECT 1) TO STDOUT", "SELECT * FROM read_csv('/etc/passwd')", "SELEC", "", ";",
    "SELECT 1; SELECT 2", "SELECT '\u00e9\U0001d4c1'", "SELECT count(*) FROM range(100000000000)",
]  # fmt: skip
NAMES = ["", "a", "b"]


def _cstr(s: str) -> bytes:
    return s.encode() + b"\x00"


def _msg(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("!i", len(body) + 4) + body


names = st.sampled_from(NAMES)
param_values = st.one_of(
    st.none(), st.binary(max_size=12), st.sampled_from([b"1", b"-7", b"1e1000000", b"x"])
)
OIDS = [0, 16, 20, 23, 25, 700, 1700, 2950, -1]


def _parse(name: str, query: str, oids: list[int]) -> bytes:
    types = struct.pack("!h", len(oids)) + b"".join(struct.pack("!i", o) for o in oids)
    return _msg(b"P", _cstr(name) + _cstr(query) + types)


parse = st.builds(_parse, names, st.sampled_from(QUERIES), st.lists(st.sampled_from(OIDS), max_size=3))


def _bind(portal: str, stmt: str, fmts: list[int], params: list, rfmts: list[int]) -> bytes:
    body = (
        _cstr(portal)
        + _cstr(stmt)
        + struct.pack("!h", len(fmts))
        + b"".join(struct.pack("!h", f) for f in fmts)
    )
    body += struct.pack("!h", len(params))
    for p in params:
        body += struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p
    return _msg(b"B", body + struct.pack("!h", len(rfmts)) + b"".join(struct.pack("!h", f) for f in rfmts))


formats = st.lists(st.sampled_from([0, 1, 2, -1]), max_size=3)
bind = st.builds(_bind, names, names, formats, st.lists(param_values, max_size=3), formats)
describe = st.builds(lambda k, n: _msg(b"D", k + _cstr(n)), st.sampled_from([b"S", b"P", b"X"]), names)
close = st.builds(lambda k, n: _msg(b"C", k + _cstr(n)), st.sampled_from([b"S", b"P", b"Z"]), names)
execute = st.builds(lambda n, rows: _msg(b"E", _cstr(n) + struct.pack("!i", rows)), names,
                    st.sampled_from([0, 1, 2, -1, 2**31 - 1]))  # fmt: skip
query = st.builds(lambda q: _msg(b"Q", _cstr(q)), st.sampled_from(QUERIES))
simple = st.sampled_from([_msg(b"S", b""), _msg(b"H", b""), _msg(b"d", b"data"), _msg(b"c", b""),
                          _msg(b"f", _cstr("no")), _msg(b"F", b"\x00\x00\x00\x01")])  # fmt: skip
garbage = st.one_of(
    st.builds(lambda t, b: _msg(t, b), st.binary(min_size=1, max_size=1), st.binary(max_size=40)),
    st.builds(lambda t, n: t + struct.pack("!i", n), st.sampled_from([b"P", b"Q", b"B"]),
              st.sampled_from([0, 3, -5, 2**31 - 1])),  # lengths that lie
)  # fmt: skip
messages = st.lists(st.one_of(parse, bind, describe, close, execute, query, simple, garbage), max_size=12)


def _startup(user: str = "fuzz") -> bytes:
    params = _cstr("user") + _cstr(user) + _cstr("database") + _cstr("dumpcat") + b"\x00"
    return struct.pack("!ii", len(params) + 8, PROTOCOL_3) + params


startups = st.one_of(
    st.just(_startup()),
    st.just(struct.pack("!ii", 8, 80877103) + b"|" + _startup()),  # SSLRequest, then a startup
    st.builds(
        lambda n, code: struct.pack("!ii", n, code),
        st.sampled_from([0, 7, 8, 10001, -1]),
        st.sampled_from([PROTOCOL_3, 80877102, 80877104, 1234]),
    ),
    st.builds(
        lambda b: struct.pack("!i", len(b) + 8) + struct.pack("!i", PROTOCOL_3) + b, st.binary(max_size=30)
    ),
)


class Errors(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    cat = nan_log_catalog(tmp_path_factory.mktemp("fuzz"))
    errors = Errors()
    logging.getLogger("dumpcat.server").addHandler(errors)
    limits = Limits(max_concurrent=2, query_timeout=3, login_timeout=3, idle_timeout=5, send_timeout=3)
    with Server(Path(cat), port=0, limits=limits) as srv:
        yield srv, errors
    logging.getLogger("dumpcat.server").removeHandler(errors)


def _read_all(sock: socket.socket, seconds: float) -> bytes:
    """What the server sends until it closes, goes quiet for a moment after a ReadyForQuery, or
    time is up. (The quiet moment is short: what a client may read of a reply before it hangs up
    is a case the fuzzing covers as well.)"""
    out = b""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ready = out.endswith(b"Z\x00\x00\x00\x05I") or out.endswith(b"Z\x00\x00\x00\x05E")
        sock.settimeout(0.25 if ready else 1.0)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            if ready:
                break
            continue
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def _well_formed(data: bytes) -> None:
    """Replies parse as backend messages (an SSL 'N'/'S' answer first is allowed)."""
    i = 0
    if data[:1] in (b"N", b"S") and (len(data) == 1 or data[1:2] in b"ERZSK"):
        i = 1
    while i < len(data):
        assert len(data) - i >= 5, data[i:]
        tag = data[i : i + 1]
        (n,) = struct.unpack("!i", data[i + 1 : i + 5])
        assert tag in b"RSKZTDCEINnst123GHdcA" and 4 <= n <= (64 << 20), (tag, n)
        i += 1 + n


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture],
          derandomize=True)  # fmt: skip
@given(start=startups, body=messages)
def test_any_message_sequence_gets_well_formed_replies(server, start, body):
    srv, errors = server
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as sock:
        try:
            if b"|" in start[:9]:  # SSLRequest: wait for the one-byte answer, then start up
                sock.sendall(start[:8])
                sock.recv(1)
                start = start[9:]
            sock.sendall(start + b"".join(body) + _msg(b"S", b""))
        except OSError:
            pass  # the server may hang up on a bad startup before reading everything
        data = _read_all(sock, 15)
    if data[:1] in (b"N", b"S"):
        data = data[1:]
    _well_formed(data)
    assert not errors.records, [r.getMessage() for r in errors.records]


def test_the_server_answers_after_the_fuzzing(server):
    srv, errors = server
    with psycopg.connect(host="127.0.0.1", port=srv.port, user="u", dbname="d", autocommit=True) as c:
        assert c.execute("SELECT 1").fetchall() == [(1,)]
    assert not errors.records
