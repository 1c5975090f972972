"""bench/bench_serve_clients.py in its quick mode: every client and every result path runs against a
real `dumpcat serve`, and every path returns as many rows as `Catalog.sql` in process (the
benchmark's correctness; nothing about its timings)."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import REPO

BENCH = REPO / "bench"
ROWS = 20_000

CLIENTS = [
    "in-process (`Catalog.open` + `sql`)",
    "psycopg 3",
    "psycopg2",
    "pg8000",
    "asyncpg",
    "asyncpg, with `shape` (int8[])",
    "ADBC",
    "SQLAlchemy + psycopg2 (new engine)",
]
PATHS = {  # path -> its format on the wire
    "in-process `Catalog.sql`": "Arrow",
    "psycopg 3, default cursor": "text",
    "psycopg 3, `binary=True`": "binary",
    "asyncpg `fetch`": "binary",
    "psycopg 3 `copy`, COPY text": "copy text",
    "psycopg 3 `copy`, COPY csv": "copy csv",
    "psycopg 3 `copy`, COPY binary": "copy binary",
    "connectorx `read_sql` (Arrow)": "copy binary",
    "ADBC `fetch_arrow_table`": "copy binary",
    "raw socket, text DataRows, nothing decoded": "text",
    "raw socket, binary DataRows, nothing decoded": "binary",
    "raw socket, copy text, nothing decoded": "copy text",
    "raw socket, copy csv, nothing decoded": "copy csv",
    "raw socket, copy binary, nothing decoded": "copy binary",
    "encoding alone (`pgcodec`, 2048-row batches), text": "text",
    "encoding alone (`pgcodec`, 2048-row batches), binary": "binary",
    "encoding alone (`pgcodec`, 2048-row batches), copy text": "copy text",
    "encoding alone (`pgcodec`, 2048-row batches), copy csv": "copy csv",
    "encoding alone (`pgcodec`, 2048-row batches), copy binary": "copy binary",
}


def _table(out: str, header: str) -> dict[str, list[str]]:
    """The markdown table whose header row starts with `header`: first cell -> the other cells."""
    lines = out[out.index(header) :].splitlines()
    rows = {}
    for line in lines[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        rows[cells[0]] = cells[1:]
    return rows


def test_quick_mode_runs_every_path_and_each_returns_every_row(tmp_path):
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_serve_clients.py"), "--rows", str(ROWS), "--rounds", "1",
         "--tries", "1", "--workdir", str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "every path returned the in-process row count" in out, out

    latency = _table(out, "| client |")
    assert list(latency) == CLIENTS, out
    for cells in latency.values():  # connect ms, first row ms, spread, ratio
        assert float(cells[0].replace(",", "")) > 0 and float(cells[1].replace(",", "")) > 0, out

    fetched = _table(out, "| path |")
    assert list(fetched) == list(PATHS), out
    for name, cells in fetched.items():
        wire, rows = cells[0], int(cells[1].replace(",", ""))
        assert (wire, rows) == (PATHS[name], ROWS), (name, out)
        assert float(cells[2].replace(",", "")) > 0, (name, out)  # MB of the result on the wire
    assert re.search(r"^- `python bench/bench_serve_clients.py --rows 20000 --rounds 1 --tries 1`", out, re.M)
