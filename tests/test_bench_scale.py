"""bench/bench_scale.py's generator writes a catalog whose answers are what it planted, and whose flat
files are what the catalog's own writer (ingest/storage/flat.py) makes of the same raw batches: the scale
figures in docs/benchmarks.md are measured on a real dumpcat catalog."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from catalog.api import Catalog
from ingest.storage.store import CatalogStore
from tests.conftest import REPO, as_written_before_flat_files

sys.path.insert(0, str(REPO / "bench"))
import bench_scale

ROWS, STEP_ROWS, ITERATIONS = 10_000, 250, 10  # 40 steps: 4 ranks of 10 iterations


@pytest.fixture(scope="module", params=[True, False], ids=["tensor_files", "statistics_only"])
def generated(request, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, bench_scale.Summary]:
    """A catalog of a dump with tensor files (saved_data "full") and of a statistics-only one."""
    path = tmp_path_factory.mktemp("scale") / "cat"
    summary = bench_scale.generate(
        path, ROWS, step_rows=STEP_ROWS, iterations=ITERATIONS, tensor_files=request.param,
        anomaly_share=0.2, collect=True,
    )  # fmt: skip
    return path, summary


def _id(summary: bench_scale.Summary) -> str:
    """What identifies a row: its tensor's row id, or without tensor files its statistic id."""
    return "row_id" if summary.tensor_files else "stat_id"


def _one(cat: Catalog, query: str, params: list | None = None):
    return cat.sql(query, params).column(0)[0].as_py()


def test_stats_nan_rows_are_the_planted_ones(generated):
    path, summary = generated
    assert (summary.rows, summary.ranks) == (ROWS, 4)
    with Catalog.open(path) as cat:
        assert _one(cat, "SELECT count(*) FROM stats") == ROWS
        assert _one(cat, "SELECT count(*) FROM tensors") == (ROWS if summary.tensor_files else 0)
        nan = cat.sql(f"SELECT {_id(summary)} AS id, op_name FROM stats WHERE nan_count > 0").to_pydict()
        assert summary.nan_rows > 0
        assert sorted(nan["id"]) == sorted(summary.nan_row_ids.tolist())
        assert all(name.startswith(("Default/", "Gradients/")) for name in nan["op_name"])
        assert _one(cat, "SELECT count(*) FROM stats WHERE pos_inf_count > 0") == summary.inf_rows > 0
        # every row resolved to its operator, as an ingest of such a dump resolves it
        assert cat.sql("SELECT DISTINCT name_match FROM stats").column(0).to_pylist() == ["exact"]
        if not summary.tensor_files:  # a statistic.csv row without a tensor file has no row id
            assert _one(cat, "SELECT count(*) FROM stats WHERE row_id IS NULL") == ROWS


def test_first_anomaly_is_the_planted_one_per_step(generated):
    path, summary = generated
    with Catalog.open(path) as cat:
        rows = cat.sql("SELECT * FROM first_anomaly").to_pylist()
        ops = {(r["rank"], r["exec_index"]): r["op_name"] for r in cat.sql("SELECT * FROM ops").to_pylist()}
    assert len(summary.first_anomaly) >= 5
    planted = {step: op for step, (op, _) in summary.first_anomaly.items()}
    assert {(r["rank"], r["iteration"]): r["exec_index"] for r in rows} == planted
    if summary.tensor_files:
        planted_ids = {step: rid for step, (_, rid) in summary.first_anomaly.items()}
        assert {(r["rank"], r["iteration"]): r["row_id"] for r in rows} == planted_ids
    for r in rows:
        assert (r["io"], r["slot"], r["graph_id"]) == ("output", 0, 0)
        assert r["op_name"] == ops[(r["rank"], r["exec_index"])]
        assert (r["nan_count"] > 0) != (r["pos_inf_count"] > 0)
        assert r["source_file"] == bench_scale.MODEL_FILE and r["source_code"]
        assert r["input_ops"]  # from the graph's data edges
        assert r["anomalous_outputs"] >= 1


def test_lookup_gives_the_row_its_ids_hash(generated):
    path, summary = generated
    from ingest.ids import stat_row_id, tensor_row_id

    with Catalog.open(path) as cat:
        for rid in summary.sample_ids[:20]:
            (stat,) = cat.sql(f"SELECT * FROM stats WHERE {_id(summary)} = ?", [rid]).to_pylist()
            csv = f"rank_{stat['rank']}/Net/0/{stat['iteration']}/statistic.csv"
            line = _one(cat, "SELECT line_no FROM raw_stat_rows WHERE stat_id = ?", [stat["stat_id"]])
            assert stat_row_id("job", csv, line) == stat["stat_id"]
            if not summary.tensor_files:
                continue
            (tensor,) = cat.sql("SELECT * FROM tensors WHERE row_id = ?", [rid]).to_pylist()
            assert tensor_row_id("job", tensor["rel_path"]) == rid
            assert (stat["op_name"], stat["timestamp_us"]) == (tensor["op_name"], tensor["timestamp_us"])
            assert tensor["path"] == f"/dumps/job/{tensor['rel_path']}"
        if summary.tensor_files:
            with pytest.raises(Exception, match="file is gone"):
                cat.tensor(summary.sample_ids[0])  # the dump files are not written


def test_flat_files_are_what_the_catalogs_own_writer_builds(generated, tmp_path):
    """The same raw batches given flat files by ingest/storage/flat.py (the upgrade of a catalog from
    before flat files: each run resolved from all its batches, one file per table): the same
    columns, types, nullability, rows in the same order, index and snapshot entries."""
    path, _ = generated
    ref = tmp_path / "ref"
    shutil.copytree(path, ref)
    as_written_before_flat_files(ref)
    assert CatalogStore(ref).upgrade()
    ours = json.loads((path / "snapshot.json").read_text())["flat"]
    theirs = json.loads((ref / "snapshot.json").read_text())["flat"]
    con = duckdb.connect()
    assert [len(ours[t]) for t in ("stats", "tensors")] == [len(theirs[t]) for t in ("stats", "tensors")]
    for table in [t for t in ("stats", "tensors") if ours[t]]:
        ((a,), (b,)) = ours[table], theirs[table]
        assert {k: a[k] for k in ("run", "rows", "sources", "keys")} == {
            k: b[k] for k in ("run", "rows", "sources", "keys")
        }
        fa, fb = path / a["path"] / "data.parquet", ref / b["path"] / "data.parquet"
        assert pq.read_schema(fa).equals(pq.read_schema(fb)), table
        # (row groups: DuckDB's, ~122,880 rows; flat.py's boundaries move by a few hundred rows with
        # its range-by-range sort, which no query can tell: at 10^4 rows both have one)
        assert pq.ParquetFile(fa).metadata.num_row_groups == pq.ParquetFile(fb).metadata.num_row_groups == 1
        # same rows in the same order (EXCEPT ALL counts NaN = NaN, as DuckDB compares)
        numbered = "SELECT row_number() OVER () AS n, * FROM read_parquet('{}')"
        for x, y in ((fa, fb), (fb, fa)):
            diff = f"SELECT count(*) FROM ({numbered.format(x)} EXCEPT ALL {numbered.format(y)})"
            assert con.sql(diff).fetchall() == [(0,)], table
        if table == "tensors":
            index = [pa.ipc.open_file(str(p / "index.arrow")).read_all() for p in (fa.parent, fb.parent)]
            assert index[0].equals(index[1])


def test_generator_refuses_what_it_cannot_write(tmp_path):
    with pytest.raises(ValueError, match="multiple of step_rows"):
        bench_scale.generate(tmp_path / "x", 1_001, step_rows=250)
    (tmp_path / "y").mkdir()
    with pytest.raises(FileExistsError):
        bench_scale.generate(tmp_path / "y", 1_000, step_rows=250)


def test_shards_one_per_host(tmp_path):
    """--hosts: one named shard per host, its ranks' rows and flat files in it; readers see the union."""
    summary = bench_scale.generate(tmp_path / "cat", 4_000, step_rows=250, iterations=4, hosts=2)
    shards = json.loads((tmp_path / "cat" / "shards.json").read_text())["shards"]
    assert [s["writer"] for s in shards] == ["host00", "host01"]
    with Catalog.open(tmp_path / "cat") as cat:
        per_rank = cat.sql("SELECT rank, count(*) FROM stats GROUP BY rank ORDER BY rank").to_pylist()
        assert [r["count_star()"] for r in per_rank] == [1_000] * 4
        firsts = cat.sql("SELECT rank, iteration, row_id FROM first_anomaly").to_pylist()
        assert {(r["rank"], r["iteration"]): r["row_id"] for r in firsts} == {
            step: rid for step, (_, rid) in summary.first_anomaly.items()
        }
    for shard in shards:
        snap = json.loads((tmp_path / "cat" / shard["path"] / "snapshot.json").read_text())
        assert [len(snap["flat"][t]) for t in ("stats", "tensors")] == [1, 1]
        assert all(e["path"].startswith(shard["path"] + "/") for e in snap["flat"]["stats"])


def test_a_catalog_path_with_quotes(tmp_path):
    """The generator writes flat files with a DuckDB COPY: a quote in the catalog's path is data."""
    path = tmp_path / """it's a "cat"; x"""
    bench_scale.generate(path, 1_000, step_rows=250, iterations=4)
    with Catalog.open(path) as cat:
        assert _one(cat, "SELECT count(*) FROM stats") == 1_000


def test_flat_writer_catalog_is_an_ingests_commits(tmp_path):
    """--flat-writer catalog (the baseline for how long ingest/storage/flat.py takes): each batch through
    commit_batch, then finish_run; the same answers, one flat file per table, nothing retired left."""
    summary = bench_scale.generate(
        tmp_path / "cat", 4_000, step_rows=250, iterations=4, batch_rows=1_000, anomaly_share=0.3,
        flat_writer="catalog",
    )  # fmt: skip
    assert summary.first_anomaly
    snap = json.loads((tmp_path / "cat" / "snapshot.json").read_text())
    assert [len(snap["flat"][t]) for t in ("stats", "tensors")] == [1, 1]
    assert not snap.get("retired")
    with Catalog.open(tmp_path / "cat") as cat:
        assert _one(cat, "SELECT count(*) FROM stats WHERE nan_count > 0") == summary.nan_rows
        firsts = cat.sql("SELECT rank, iteration, row_id FROM first_anomaly").to_pylist()
        assert {(r["rank"], r["iteration"]): r["row_id"] for r in firsts} == {
            step: rid for step, (_, rid) in summary.first_anomaly.items()
        }
