"""The memory budgets of `dumpcat serve`'s main process (catalog/server/memory.py): what one
session may hold in texts (--session-memory, counted as Python holds them, so 4-byte characters
count 4 bytes), and one server-wide budget (--buffer-memory) for every session's texts, rows
buffered for row-limited portals, and large protocol messages. Over budget is an error for the one
client; everyone else goes on; the main process stays bounded."""

from __future__ import annotations

import struct
import threading
from pathlib import Path

import psutil
import psycopg
import pytest

from catalog.server.server import Limits, Server
from tests.conftest import nan_log_catalog
from tests.hostile import RawClient, ServeProcess

WIDE = "\U0001d4c1" * 60_000  # 60,000 characters outside the BMP: 240 KB as Python holds them


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Path:
    return nan_log_catalog(tmp_path_factory.mktemp("memory"))


def _error(replies) -> bytes:
    errors = [body for tag, body in replies if tag == b"E"]
    assert errors, replies
    return errors[0]


def test_a_sessions_texts_are_capped_in_bytes(cat):
    limits = Limits(max_concurrent=2, session_memory=1 << 20)
    with Server(cat, port=0, limits=limits) as srv, psycopg.connect(**_dsn(srv)) as c:
        taken = 0
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="--session-memory"):
            for i in range(10):
                c.execute(f"SET my.s{i} = '{WIDE}'")
                taken += 1
        assert taken == 4  # four values of 240 KB fit in 1 MiB with the defaults; a fifth does not
        assert c.execute("SELECT 1").fetchall() == [(1,)]  # the session goes on
        c.execute("RESET ALL")
        c.execute(f"SET my.again = '{WIDE}'")  # room again
        with pytest.raises(psycopg.errors.ProgramLimitExceeded, match="--session-memory"):
            c.execute(f"SELECT '{WIDE}{WIDE}{WIDE}{WIDE}{WIDE}' AS s", prepare=True)


def test_rows_buffered_by_all_sessions_share_one_budget(cat):
    """Two sessions fetch row-limited portals of about 1 MB each under a 1.5 MiB --buffer-memory:
    the second is refused (53200) while the first holds its rows, and served once it let go."""
    limits = Limits(max_concurrent=2, buffer_memory=3 << 19)
    big = b"SELECT repeat('x', 1000) FROM range(1000)\x00"
    one_row = struct.pack("!i", 1)
    with Server(cat, port=0, limits=limits) as srv, RawClient(srv.port) as a, RawClient(srv.port) as b:

        def fetch_one(client: RawClient, name: bytes):
            client.query("BEGIN")
            return client.exchange(
                b"P" + name + b"\x00" + big + b"\x00\x00",
                b"Bp\x00" + name + b"\x00" + b"\x00\x00" * 3,
                b"Ep\x00" + one_row,
            )

        assert [t for t, _ in fetch_one(a, b"s1")][-2:] == [b"s", b"Z"]  # PortalSuspended: rows held
        refused = _error(fetch_one(b, b"s1"))
        assert b"53200" in refused and b"--buffer-memory" in refused
        b.query("ROLLBACK")
        a.query("COMMIT")  # the portal and its rows are gone
        assert [t for t, _ in fetch_one(b, b"s2")][-2:] == [b"s", b"Z"]
        b.query("COMMIT")


def test_a_message_over_the_budget_is_refused_and_the_server_goes_on(cat):
    limits = Limits(max_concurrent=2, buffer_memory=2 << 20)
    with Server(cat, port=0, limits=limits) as srv:
        with RawClient(srv.port) as c:
            text = b"SELECT '" + b"x" * (3 << 20) + b"'\x00"
            c.send(b"P\x00" + text + b"\x00\x00", b"S")
            replies = c.until_ready()
            assert replies is not None and b"53200" in _error(replies)
            c.send(b"Q" + text)  # a simple query: its error, then ReadyForQuery
            assert b"--buffer-memory" in _error(c.until_ready())
            assert c.query("SELECT 1")[-3][0] == b"D"  # the session goes on
        with psycopg.connect(**_dsn(srv)) as c:
            assert c.execute("SELECT 1").fetchall() == [(1,)]


def test_the_main_process_stays_bounded_under_a_text_flood(cat, tmp_path):
    """24 sessions each fill their settings with 4-byte characters until refused: the main
    process grows by about 24 x --session-memory at most, not by what the clients send."""
    srv = ServeProcess(cat, tmp_path, "--max-concurrent", "2", "--session-memory", "4MiB",
                       "--buffer-memory", "256MiB")  # fmt: skip
    try:
        main = psutil.Process(srv.proc.pid)
        before = main.memory_info().rss
        sent = [0]
        lock = threading.Lock()

        errors: list[BaseException] = []

        def flood(k: int) -> None:
            try:
                with psycopg.connect(**srv.dsn()) as c:
                    for i in range(256):
                        try:
                            c.execute(f"SET f{k}.s{i} = '{WIDE}'")
                        except psycopg.errors.ProgramLimitExceeded:
                            break
                        with lock:
                            sent[0] += 1
                    assert c.execute("SELECT 1").fetchall() == [(1,)]
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=flood, args=(k,)) for k in range(24)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        grown = main.memory_info().rss - before
        assert not errors, errors[:3]
        assert 24 * 8 <= sent[0] <= 24 * 17, sent[0]  # 17 values of 240 KB fit in 4 MiB, not 18
        # What the clients sent: 24 x 17 x 240 KB = 98 MB held, bounded by --session-memory.
        assert grown < 24 * (4 << 20) + (96 << 20), grown
    finally:
        srv.stop()


def _dsn(srv: Server) -> dict:
    return dict(host="127.0.0.1", port=srv.port, user="u", dbname="dumpcat", autocommit=True)
