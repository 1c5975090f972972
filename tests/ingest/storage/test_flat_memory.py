"""The flat writer (ingest/storage/flat.py) on wide rows: exact files, and a bounded memory cap.

Real LLM dumps carry long scope names: ~600 bytes of path strings per row. Sorting 122,880 such
rows at once needed more than the writer's then 256 MB cap, and an ingest of 10^6 of them failed
with OutOfMemoryException while merging flat files. The writer sorts in parts sized in bytes, and
a statement that still runs out of memory is retried with the cap doubled. Row groups stay DuckDB's
122,880 rows whatever the width (queries scan row group by row group: 12-16k-row groups made
count(*) and the NaN scan 3-4x one flat file at 10^6 rows), so the parquet writer holds one such
group: the cap is raised for it when the rows are wide. The catalogs here are written by
bench/bench_scale.py's generator through the store's own commits (a Llama-like model's names), so
every flat file is the writer's work.
"""

from __future__ import annotations

import json
import logging
import shutil
import sys
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

from catalog.api import Catalog
from ingest.storage import flat
from ingest.storage.store import CatalogStore
from tests.conftest import REPO, as_written_before_flat_files, dump_of

sys.path.insert(0, str(REPO / "bench"))
import bench_scale

ROWS, STEP_ROWS, ITERATIONS = 100_000, 2_500, 10  # 4 ranks; 2 commits of 50,000 rows


CAP = "128MiB"


class _Messages(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture(scope="module")
def wide(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bench_scale.Summary, int]:
    """A catalog of 10^5 wide rows whose flat files were written under a 128 MiB cap (the old
    writer ran out of memory here: 122,880 rows of ~1.2 KB sorted at once); the writer's final cap."""
    path = tmp_path_factory.mktemp("wide") / "cat"
    messages = _Messages()
    logging.getLogger("dumpcat.ingest").addHandler(messages)
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(flat, "_MEMORY_LIMIT", CAP)
            summary = bench_scale.generate(
                path, ROWS, step_rows=STEP_ROWS, iterations=ITERATIONS, flat_writer="catalog"
            )
    finally:
        logging.getLogger("dumpcat.ingest").removeHandler(messages)
    said = [m for m in messages.messages if "ran out of memory" in m]
    raised = [int(m.split("retrying with ")[1].split()[0]) for m in said]
    return path, summary, (raised[-1] << 20) if raised else flat._memory_bytes(CAP)


def _flat_files(path: Path) -> dict[str, Path]:
    snap = json.loads((path / "snapshot.json").read_text())["flat"]
    assert [len(snap[t]) for t in ("stats", "tensors")] == [1, 1]
    return {t: path / snap[t][0]["path"] / flat.DATA_FILE for t in ("stats", "tensors")}


def test_wide_rows_are_cataloged_exactly_under_a_small_cap(wide):
    path, summary, _ = wide
    with Catalog.open(path) as cat:
        assert cat.sql("SELECT count(*) FROM stats").column(0)[0].as_py() == ROWS
        nan = cat.sql("SELECT count(*) FROM stats WHERE nan_count > 0").column(0)[0].as_py()
        assert nan == summary.nan_rows > 0
        firsts = cat.sql("SELECT rank, iteration, row_id FROM first_anomaly").to_pylist()
        assert {(r["rank"], r["iteration"]): r["row_id"] for r in firsts} == {
            step: rid for step, (_, rid) in summary.first_anomaly.items()
        }
        # the flat files hold exactly what query-time resolution gives, in row-id order (each
        # view evaluated once, into a temporary table of a cursor's: resolving 10^5 rows is costly)
        cur = cat.cursor()
        for view in ("stats", "tensors"):
            for name in (view, f"{view}_resolved"):
                cur.execute(f"CREATE OR REPLACE TEMP TABLE check_{name} AS SELECT * FROM {name}")
            for a, b in ((view, f"{view}_resolved"), (f"{view}_resolved", view)):
                query = f"SELECT count(*) FROM (SELECT * FROM check_{a} EXCEPT ALL SELECT * FROM check_{b})"
                assert cur.execute(query).fetchone()[0] == 0, view
        cur.close()
    con = duckdb.connect()
    for table, file in _flat_files(path).items():
        ids = con.sql(f"SELECT row_id FROM read_parquet('{file}')").fetchnumpy()["row_id"]
        assert (ids[1:] >= ids[:-1]).all(), table


def test_row_groups_are_duckdbs_whatever_the_width(wide):
    """Wide rows are written in DuckDB's row groups too (what part 1's scans need), the writer's
    cap raised to hold one if it must, and no further than that."""
    path, _, cap = wide
    for table, file in _flat_files(path).items():
        meta = pq.ParquetFile(file).metadata
        sample = pq.ParquetFile(file).read_row_group(0)
        assert sample.nbytes / sample.num_rows > 600, table  # the long names are there
        sizes = [meta.row_group(i).num_rows for i in range(meta.num_row_groups)]
        assert sizes == [min(ROWS, 122_880)] * len(sizes) and sum(sizes) == ROWS, (table, sizes)
    assert cap <= 4 * flat._memory_bytes(CAP)


# The retry test's own catalog: the same wide rows, fewer of them. What it proves is the retry
# (16 MiB is too little for the resolution joins of rows this wide: 8 x 10^3 run out at 16 and
# 32 MiB, as 2 x 10^4 and 10^5 do) and that the files are the same; at 10^5 rows the writer then
# spent ~70 s resolving them in 64 MiB parts, and 2 x 10^4 took twice the time of 8 x 10^3, which
# proved nothing more.
RETRY_ROWS, RETRY_STEP_ROWS = 8_000, 200  # 4 ranks of 10 iterations, a commit each


def test_a_statement_that_runs_out_of_memory_is_retried_with_a_doubled_cap(tmp_path, caplog):
    """The same raw batches given flat files by a writer capped at 16 MiB (too little for the
    resolution joins): it says so, doubles its cap until they fit, and writes the same files as
    the writer under the module's 128 MiB cap (8 x 10^3 wide rows: see RETRY_ROWS)."""
    path = tmp_path / "cat"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(flat, "_MEMORY_LIMIT", CAP)
        bench_scale.generate(
            path, RETRY_ROWS, step_rows=RETRY_STEP_ROWS, iterations=ITERATIONS, flat_writer="catalog"
        )
    ref = tmp_path / "ref"
    shutil.copytree(path, ref)
    as_written_before_flat_files(ref)
    with pytest.MonkeyPatch.context() as mp, caplog.at_level(logging.WARNING, logger="dumpcat.ingest"):
        mp.setattr(flat, "_MEMORY_LIMIT", "16MiB")
        assert CatalogStore(ref).upgrade()
    raised = [r.getMessage() for r in caplog.records if "ran out of memory" in r.getMessage()]
    assert raised and raised[0].startswith(
        "dumpcat: the catalog writer's DuckDB ran out of memory under 16 MiB"
    )
    ours, theirs = _flat_files(path), _flat_files(ref)
    con = duckdb.connect()
    for table in ours:
        assert con.sql(f"SELECT count(*) FROM read_parquet('{theirs[table]}')").fetchall() == [(RETRY_ROWS,)]
        numbered = "SELECT row_number() OVER () AS n, * FROM read_parquet('{}')"
        for x, y in ((ours[table], theirs[table]), (theirs[table], ours[table])):
            diff = f"SELECT count(*) FROM ({numbered.format(x)} EXCEPT ALL {numbered.format(y)})"
            assert con.sql(diff).fetchall() == [(0,)], table
    # nothing of a failed attempt is left behind: every flat directory is in the snapshot
    live = {
        e["path"]
        for t in ("stats", "tensors")
        for e in json.loads((ref / "snapshot.json").read_text())["flat"][t]
    }
    retired = {e["path"] for e in json.loads((ref / "snapshot.json").read_text()).get("retired", [])}
    on_disk = {str(p.relative_to(ref)) for p in (ref / "data" / "flat").glob("*/*")}
    assert on_disk <= live | retired


def test_memory_limits_are_read_as_duckdb_reads_them():
    assert flat._memory_bytes("256MB") == 256_000_000
    assert flat._memory_bytes("1GiB") == 1 << 30
    assert flat._memory_bytes("512 mib") == 512 << 20
    with pytest.raises(ValueError, match="DUMPCAT_WRITER_MEMORY"):
        flat._memory_bytes("lots")


@pytest.mark.parametrize("scenario", ["long_names", "control_flow"])
def test_a_real_dump_under_a_tiny_cap_gives_the_same_catalog(scenario, tmp_path, caplog):
    """Real MindSpore 2.10 dumps (long scope names; control flow with several graphs) ingested
    by a writer capped at 16 MiB: it runs out, says so, doubles its cap, and every row of every
    view is what an ingest under the default cap gives."""
    with Catalog.open(tmp_path / "ref", create=True) as cat:
        cat.ingest(dump_of(scenario))
    with pytest.MonkeyPatch.context() as mp, caplog.at_level(logging.WARNING, logger="dumpcat.ingest"):
        mp.setattr(flat, "_MEMORY_LIMIT", "16MiB")
        with Catalog.open(tmp_path / "small", create=True) as cat:
            cat.ingest(dump_of(scenario))
    assert any("ran out of memory under 16 MiB" in r.getMessage() for r in caplog.records)
    # (each catalog opened once: an open defines every view, ~1 s, and was 8 of this test's 10 s)
    with Catalog.open(tmp_path / "ref") as ref, Catalog.open(tmp_path / "small") as small:
        for view in ("stats", "tensors", "first_anomaly", "ingest_errors"):
            order = "row_id, stat_id, stat_source" if view == "stats" else "ALL"
            rows = [cat.sql(f"SELECT * FROM {view} ORDER BY {order}").to_pylist() for cat in (ref, small)]
            assert repr(rows[0]) == repr(rows[1]), view  # repr: NaN statistics compare equal
            if view in ("stats", "tensors"):
                assert rows[0], view


def _anonymous_mib() -> float:
    """This process's anonymous resident memory (what allocators hold), in MiB."""
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no Anonymous: line in smaps_rollup")


def _first_big_batch(snap: dict) -> dict:
    return next(b for b in snap["batches"] if b["tables"].get("tensors", 0) >= 20_000)


def test_the_writer_gives_back_what_its_statements_freed(wide):
    """DuckDB's buffer pool keeps the blocks a finished statement freed (duckdb_memory() shows
    none): after resolving a 50,000-row batch the writer held ~70 MiB more until its next
    statement. `release_buffers` gives them back, and the writer keeps its cap."""
    path, _, _ = wide
    store = CatalogStore(path)
    snap = store.snapshot()
    batch = _first_big_batch(snap)
    writer = flat.FlatWriter(store)
    try:
        con = writer._connect(snap)
        source = store.root / batch["path"] / "tensors.parquet"
        con.execute(f"CREATE TABLE scratch AS SELECT * FROM read_parquet('{source}') ORDER BY rel_path")
        con.execute("DROP TABLE scratch").fetchall()
        held = _anonymous_mib()
        con.execute("SELECT 1").fetchall()
        after_another_statement = _anonymous_mib()
        writer.release_buffers()
        released = after_another_statement - _anonymous_mib()
        assert released > 20, f"only {released:.1f} MiB given back"
        # another statement does not free them: compared with what release_buffers gave back in the
        # same run (the allocator's own trimming moved a few MiB once, under load)
        assert held - after_another_statement < released / 2, (held, after_another_statement, released)
        limit = con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        assert (
            limit
            == duckdb.connect()
            .execute(
                f"SET memory_limit = '{writer.memory_limit >> 20}MiB'; SELECT current_setting('memory_limit')"
            )
            .fetchone()[0]
        )
    finally:
        writer.close()


def test_a_flat_write_gives_its_memory_back_before_its_index_is_read(wide, monkeypatch):
    """The sidecar index of a tensors file is read back with pyarrow (~70 MiB of a 10^6 file's
    row group) right after DuckDB wrote the file: the writer gives DuckDB's freed blocks back
    first, so the two are not held at once (the last merge of a 10^6 ingest: 450 -> 412 MiB)."""
    path, _, _ = wide
    store = CatalogStore(path)
    snap = store.snapshot()
    batch = _first_big_batch(snap)
    writer = flat.FlatWriter(store)
    still_held: list[float] = []
    real_write_index = flat.write_index

    def write_index_after_measuring(data: Path, index: Path, **kw) -> None:
        held = _anonymous_mib()
        writer.release_buffers()
        still_held.append(held - _anonymous_mib())
        real_write_index(data, index, **kw)

    monkeypatch.setattr(flat, "write_index", write_index_after_measuring)
    try:
        entry = writer._resolve(snap, "tensors", batch["run"], [batch["id"]])
        assert entry is not None and entry["rows"] == batch["tables"]["tensors"]
        shutil.rmtree(path / entry["path"])  # never part of the catalog
        assert len(still_held) == 1 and still_held[0] < 5, f"{still_held} MiB held while the index was read"
    finally:
        writer.close()


def test_the_cap_grows_at_every_retry_however_small(tmp_path, caplog):
    """A write retried under a cap raised by 15% still gets more memory each time when the cap
    is a few MiB (rounded to whole MiB, 15% of 1 MiB is nothing): no retry loops on one cap; from
    the default 128 MB a retried write gets 15% more, not the 50% that took 10^6 rows to 183 MiB."""
    store = CatalogStore(tmp_path / "cat", create=True)
    writer = flat.FlatWriter(store)
    writer.memory_limit = 1_000_000
    con = duckdb.connect()
    caps = []
    with caplog.at_level(logging.WARNING, logger="dumpcat.ingest"):
        for _ in range(4):
            writer._raise_cap(con, duckdb.OutOfMemoryException("test"), factor=flat._COPY_RETRY_FACTOR)
            caps.append(writer.memory_limit >> 20)
    assert caps == [1, 2, 3, 4]
    assert con.execute("SELECT current_setting('memory_limit')").fetchone()[0] == "4.0 MiB"
    assert len([r for r in caplog.records if "retrying with" in r.getMessage()]) == 4
    writer.memory_limit = flat._memory_bytes("128MB")
    for expected in (140, 161, 185):
        writer._raise_cap(con, duckdb.OutOfMemoryException("test"), factor=flat._COPY_RETRY_FACTOR)
        assert writer.memory_limit >> 20 == expected
