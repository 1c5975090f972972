"""`dumpcat healthcheck`: log in to a running `dumpcat serve` and run one query over the catalog.

The container's HEALTHCHECK runs it: an open port says little (the server accepts connections while
its statement workers are dead or the catalog unreadable); a query answered says the server logs
clients in, a worker runs SQL and the catalog's views read. It speaks the PostgreSQL protocol itself
(startup, cleartext/MD5/SCRAM-SHA-256 login, one simple query) with the standard library alone, so
the image needs no psql, and it imports neither DuckDB nor Arrow (a whole check takes under half a
second, most of it the interpreter's start). psycopg or pg8000 would do the same, but as a runtime
dependency of every install for one container command; this client is only ever pointed at
dumpcat's own server, whose login the real clients of tests/catalog/server check.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import secrets
import socket
import struct
import time

QUERY = "SELECT count(*) AS runs FROM runs"
_PROTOCOL_3 = 196608
_MAX_MESSAGE = 1 << 20  # bytes: the answer to QUERY is a few dozen


class HealthcheckError(RuntimeError):
    """The server did not answer the query; the message says at which step and why (one line)."""


def _msg(tag: bytes, body: bytes) -> bytes:
    return tag + struct.pack("!i", len(body) + 4) + body


def _fields(body: bytes) -> dict[str, str]:
    """The fields of an ErrorResponse (S, C, M, ...)."""
    out: dict[str, str] = {}
    for part in body.split(b"\x00"):
        if part:
            out[chr(part[0])] = part[1:].decode(errors="replace")
    return out


class _Connection:
    def __init__(self, host: str, port: int, deadline: float) -> None:
        self.deadline = deadline
        try:
            self.sock = socket.create_connection((host, port), timeout=self._left())
        except OSError as exc:
            raise HealthcheckError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self.buf = b""

    def _left(self) -> float:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise HealthcheckError("no answer within the timeout")
        return left

    def send(self, data: bytes) -> None:
        self.sock.settimeout(self._left())
        try:
            self.sock.sendall(data)
        except TimeoutError:
            raise HealthcheckError("no answer within the timeout") from None
        except OSError as exc:
            raise HealthcheckError(f"the server closed the connection: {exc.strerror or exc}") from None

    def _read(self, n: int) -> bytes:
        while len(self.buf) < n:
            self.sock.settimeout(self._left())
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                raise HealthcheckError("no answer within the timeout") from None
            except OSError as exc:
                raise HealthcheckError(f"the server closed the connection: {exc.strerror or exc}") from None
            if not chunk:
                raise HealthcheckError("the server closed the connection")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def message(self) -> tuple[bytes, bytes]:
        """The next (tag, body); an ErrorResponse is raised as HealthcheckError."""
        tag = self._read(1)
        (length,) = struct.unpack("!i", self._read(4))
        if not 4 <= length <= _MAX_MESSAGE:
            raise HealthcheckError(f"not a PostgreSQL server (message {tag!r} of length {length})")
        body = self._read(length - 4)
        if tag == b"E":
            f = _fields(body)
            raise HealthcheckError(f"{f.get('C', '?')}: {f.get('M', 'error')}")
        return tag, body

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.sendall(_msg(b"X", b""))
        self.sock.close()


def _scram(conn: _Connection, password: str, mechanisms: list[str]) -> None:
    """Client side of SCRAM-SHA-256 (RFC 5802/7677, no channel binding); checks the server's proof."""
    if "SCRAM-SHA-256" not in mechanisms:
        raise HealthcheckError(f"the server offers no mechanism this client knows: {', '.join(mechanisms)}")
    nonce = base64.b64encode(secrets.token_bytes(18)).decode()
    first_bare = f"n=,r={nonce}"
    first = ("n,," + first_bare).encode()
    conn.send(_msg(b"p", b"SCRAM-SHA-256\x00" + struct.pack("!i", len(first)) + first))
    tag, body = conn.message()
    if tag != b"R" or struct.unpack("!i", body[:4])[0] != 11:
        raise HealthcheckError("unexpected answer during SCRAM login")
    server_first = body[4:].decode()
    attrs = dict(a.split("=", 1) for a in server_first.split(",") if "=" in a)
    if not attrs.get("r", "").startswith(nonce) or "s" not in attrs or "i" not in attrs:
        raise HealthcheckError("malformed SCRAM challenge from the server")
    salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
    client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
    stored_key = hashlib.sha256(client_key).digest()
    without_proof = f"c=biws,r={attrs['r']}"
    auth_message = f"{first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored_key, auth_message, hashlib.sha256).digest()
    proof = bytes(a ^ b for a, b in zip(client_key, signature, strict=True))
    conn.send(_msg(b"p", f"{without_proof},p={base64.b64encode(proof).decode()}".encode()))
    tag, body = conn.message()
    if tag != b"R" or struct.unpack("!i", body[:4])[0] != 12:
        raise HealthcheckError("unexpected answer during SCRAM login")
    server_key = hmac.new(salted, b"Server Key", hashlib.sha256).digest()
    expected = b"v=" + base64.b64encode(hmac.new(server_key, auth_message, hashlib.sha256).digest())
    if not hmac.compare_digest(body[4:], expected):
        raise HealthcheckError("the server did not prove it knows the password (SCRAM)")


def _login(conn: _Connection, user: str, password: str | None) -> None:
    params = {"user": user, "database": "dumpcat", "application_name": "dumpcat healthcheck"}
    body = struct.pack("!i", _PROTOCOL_3) + b"".join(
        k.encode() + b"\x00" + v.encode() + b"\x00" for k, v in params.items()
    )
    conn.send(struct.pack("!i", len(body) + 5) + body + b"\x00")
    while True:
        tag, body = conn.message()
        if tag == b"Z":
            return
        if tag != b"R":
            continue  # ParameterStatus, BackendKeyData, NoticeResponse
        (code,) = struct.unpack("!i", body[:4])
        if code == 0:
            continue
        if password is None:
            raise HealthcheckError(
                "the server asks for a password: set DUMPCAT_PASSWORD or DUMPCAT_PASSWORD_FILE"
            )
        if code == 3:
            conn.send(_msg(b"p", password.encode() + b"\x00"))
        elif code == 5:
            inner = hashlib.md5((password + user).encode()).hexdigest()
            answer = "md5" + hashlib.md5(inner.encode() + body[4:8]).hexdigest()
            conn.send(_msg(b"p", answer.encode() + b"\x00"))
        elif code == 10:
            _scram(conn, password, [m.decode() for m in body[4:].split(b"\x00") if m])
        else:
            raise HealthcheckError(f"the server asks for an authentication this client lacks ({code})")


def check(
    host: str = "127.0.0.1",
    port: int = 5433,
    user: str | None = None,
    password: str | None = None,
    timeout: float = 10.0,
    query: str = QUERY,
) -> str:
    """Log in to the server at host:port and run `query`; its first value (as text), or
    HealthcheckError saying what failed. Without `user`, logs in as "dumpcat" (a server without
    --user serves loopback clients with no password)."""
    conn = _Connection(host, port, time.monotonic() + timeout)
    try:
        _login(conn, user or "dumpcat", password)
        sql = query.encode()
        conn.send(_msg(b"Q", sql + b"\x00"))
        value: str | None = None
        while True:
            tag, body = conn.message()
            if tag == b"D" and value is None:
                (ncols,) = struct.unpack("!h", body[:2])
                (n,) = struct.unpack("!i", body[2:6]) if ncols else (-1,)
                value = body[6 : 6 + n].decode(errors="replace") if n >= 0 else "NULL"
            elif tag == b"Z":
                break
        if value is None:
            raise HealthcheckError(f"the query returned no row: {query}")
        return value
    finally:
        conn.close()
