"""The launcher that forks the statement workers (catalog.server.worker_launcher), with real
processes killed with SIGKILL: the workers are its children, a killed worker's status reaches the
server, and the server outlives a killed launcher (its workers serve on; the next replacement
starts a new launcher)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import psycopg
import pytest

from catalog.server.server import Limits, Server
from tests.conftest import nan_log_catalog


@pytest.fixture(scope="module")
def cat(tmp_path_factory) -> Path:
    return nan_log_catalog(tmp_path_factory.mktemp("launcher"))


def launchers() -> list[psutil.Process]:
    """This process's worker launchers (the server runs in this process)."""
    found = []
    for child in psutil.Process().children():
        try:
            if "catalog.server.worker_launcher" in child.cmdline():
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def wait_for(condition, what: str, seconds: float = 120.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(0.1)
    raise AssertionError(f"not seen within {seconds} s: {what}")


def nan_rows(dsn: dict) -> int:
    with psycopg.connect(**dsn) as c:
        return c.execute("SELECT count(*) FROM stats WHERE nan_count > 0").fetchall()[0][0]


def test_workers_are_the_launchers_children_and_outlive_it(cat):
    with Server(cat, port=0, limits=Limits(max_concurrent=2)) as srv:
        dsn = dict(host="127.0.0.1", port=srv.port, user="u", dbname="d", autocommit=True)
        expected = nan_rows(dsn)
        assert expected > 0
        (launcher,) = launchers()
        forked = {p.pid for p in launcher.children()}
        assert set(srv.worker_pids()) < forked and len(forked) == 3  # two workers and the spare

        # An idle worker killed: the server starts another at once (no request needed to find it).
        victim = srv.worker_pids()[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: victim not in srv.worker_pids() and len(launcher.children()) == 3, "a replacement")
        assert victim not in {p.pid for p in launcher.children()}  # reaped by the launcher
        assert nan_rows(dsn) == expected

        # The launcher killed: the workers it forked go on serving.
        survivors = set(srv.worker_pids())
        launcher.kill()
        launcher.wait(30)
        for _ in range(5):
            assert nan_rows(dsn) == expected
        assert set(srv.worker_pids()) == survivors
        assert all(psutil.pid_exists(pid) for pid in survivors)

        # The next worker killed is replaced through a new launcher, without a request finding it
        # dead first (its pidfd tells the server).
        os.kill(min(survivors), signal.SIGKILL)
        (relaunched,) = wait_for(
            lambda: [p for p in launchers() if p.pid != launcher.pid and p.children()] or None,
            "a new launcher with a worker",
        )
        assert wait_for(lambda: nan_rows(dsn) == expected, "answers after the relaunch")
        # the spare took the killed worker's place; the relaunched worker is the new spare
        assert min(survivors) not in srv.worker_pids() and len(srv.worker_pids()) == 2
        assert len(relaunched.children()) == 1

    assert not launchers(), "the launcher ends with the server"
