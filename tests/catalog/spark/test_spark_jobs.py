"""Heavy work as Spark jobs (catalog/spark/jobs.py, catalog/missing_stats.py): `dumpcat stats` and `dumpcat
compare` give the same rows computed locally, as Spark tasks in local mode and on a standalone master
+ worker started on 127.0.0.1 (the `spark` fixture of conftest.py), over real committed dumps.

`dumpcat stats` on a catalog ingested with --no-stats must end with exactly the `stats`,
`tensor_stats` and `ingest_errors` rows an ingest with statistics writes; a compare with --spark
must add exactly the `comparisons` rows the local compare adds (the time of the comparison aside).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java (openjdk-17-jre-headless)", allow_module_level=True)

from catalog import Catalog
from catalog.spark.jobs import check_master_url, pack_tasks, task_bounds
from ingest.pipeline import ingest_dump
from ingest.storage.store import CatalogStore
from tests.compare import catalog_content
from tests.conftest import DATA, REPO, _free_port, dump_of
from tests.ingest.storage.test_flat import SPARK_ROOTS, _run_name
from tests.replay import make_stat_csv_tree

ROOT = REPO
COMPARE = DATA / "ms210" / "compare"

# What must be equal: every statistic users see, dumpcat's rows behind them, and the errors.
STATS_QUERIES = (
    "SELECT * FROM stats ORDER BY ALL",
    "SELECT * FROM raw_tensor_stats ORDER BY ALL",
    "SELECT run, path, stage, reason, file_size FROM ingest_errors ORDER BY ALL",
    "SELECT count(*) AS n FROM tensors",
)
COMPARE_QUERIES = (
    "SELECT * EXCLUDE (compared_at) FROM comparisons ORDER BY ALL",
    "SELECT * EXCLUDE (compared_at) FROM raw_comparisons ORDER BY ALL",
)


def _cli(*args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    """`dumpcat ARGS` in a new process, importing this checkout's dumpcat."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "catalog.cli", *args], capture_output=True, text=True, env=env, **kwargs
    )
    if check:
        assert proc.returncode == 0, (args, proc.stderr)
    return proc


def _batches(path: Path, table: str) -> int:
    snap = json.loads((path / "snapshot.json").read_text())
    return sum(1 for b in snap["batches"] if table in b["tables"])


# -- catalogs --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def trees(tmp_path_factory: pytest.TempPathFactory) -> list[tuple[Path, str]]:
    """Every committed dump tree (test_flat.py's list: each producer and layout), plus the
    nan_log dump with a statistic.csv in each iteration folder whose rows of one folder stop half
    way: tensors with a producer's row and tensors without, side by side."""
    tree = make_stat_csv_tree(dump_of("nan_log"), tmp_path_factory.mktemp("statcsv") / "dump")
    csv = sorted(tree.rglob("statistic.csv"))[0]
    lines = csv.read_text().splitlines(keepends=True)
    csv.write_text("".join(lines[: len(lines) // 2]))
    return [(root, _run_name(root)) for root in SPARK_ROOTS] + [(tree, "statcsv")]


@pytest.fixture(scope="module")
def with_stats(trees, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trees ingested with statistics: what `dumpcat stats` must end with."""
    path = tmp_path_factory.mktemp("with_stats") / "cat"
    CatalogStore(path, create=True)
    for root, run in trees:
        ingest_dump(path, root, run=run, workers=1)
    return path


@pytest.fixture(scope="module")
def no_stats_master(trees, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same trees ingested with --no-stats (tests work on copies: `no_stats`)."""
    path = tmp_path_factory.mktemp("no_stats") / "cat"
    CatalogStore(path, create=True)
    for root, run in trees:
        ingest_dump(path, root, run=run, compute_stats=False, workers=1)
    return path


@pytest.fixture
def no_stats(no_stats_master: Path, tmp_path: Path) -> Path:
    """A copy of the --no-stats catalog (paths in a snapshot are relative to the catalog)."""
    return Path(shutil.copytree(no_stats_master, tmp_path / "cat"))


@pytest.fixture(scope="module")
def expected(with_stats: Path) -> list:
    with Catalog.open(with_stats) as cat:
        return catalog_content(cat, STATS_QUERIES)


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two real MindSpore 2.10 runs of one net, `cast` rounding fc2's input through float16."""
    path = tmp_path_factory.mktemp("two_runs") / "cat"
    CatalogStore(path, create=True)
    for run in ("base", "cast"):
        ingest_dump(path, COMPARE / run / "dump", run=run, workers=1)
    return path


@pytest.fixture(scope="module")
def compared_locally(two_runs: Path, tmp_path_factory: pytest.TempPathFactory) -> list:
    path = Path(shutil.copytree(two_runs, tmp_path_factory.mktemp("compared") / "cat"))
    with Catalog.open(path) as cat:
        summary = cat.compare("cast", "base", workers=2)
        assert summary.pairs > 100 and summary.statuses["ok"] > 100
        return catalog_content(cat, COMPARE_QUERIES)


# -- statistics ------------------------------------------------------------------------------------------


def test_stats_locally_are_what_ingest_writes(no_stats, expected):
    with Catalog.open(no_stats) as cat:
        before = catalog_content(cat, STATS_QUERIES)
        assert before != expected
        summary = cat.compute_stats(workers=2)
        assert summary.computed == len(expected[1]) > 2500 and summary.errors == 0
        assert summary.runs["statcsv"].todo == summary.runs["statcsv"].computed > 0
        assert summary.runs["msprobe-pt_mix_tensor"].computed > 0  # dump.json rows have no counts
        assert summary.runs["ge-ge_stats"].todo == 0
        assert catalog_content(cat, STATS_QUERIES) == expected
        # statistic.csv rows are not computed again: the statcsv run has both kinds
        sources = cat.sql(
            "SELECT DISTINCT stat_source FROM stats WHERE run = 'statcsv' ORDER BY 1"
        ).to_pylist()
        assert [r["stat_source"] for r in sources] == ["computed", "statistic.csv"]


def test_stats_on_spark_are_what_ingest_writes(spark, no_stats, expected):
    """Local mode and standalone: the same rows; a re-run computes nothing and commits nothing."""
    with Catalog.open(no_stats) as cat:
        summary = cat.compute_stats(spark=spark)
        assert summary.computed == len(expected[1]) and summary.errors == 0
        assert summary.tasks > len(summary.runs) // 2  # several tasks per big run
        assert summary.where.startswith(f"Spark {spark.sparkContext.master}")
        assert catalog_content(cat, STATS_QUERIES) == expected
        snapshot = (no_stats / "snapshot.json").read_text()
        again = cat.compute_stats(spark=spark)
        assert again.computed == 0 and again.batches == 0 and again.tasks == 0
        assert all(r.todo == 0 for r in again.runs.values())
        assert (no_stats / "snapshot.json").read_text() == snapshot


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_one_run_only_and_its_shards(spark, tmp_path):
    """`run` limits the work; a run written by two named writers gets each shard's statistics in
    that shard (where the rank's operators resolve them), as an ingest with statistics does."""
    hosts = []
    for rank in (0, 1):
        root = tmp_path / f"host{rank}" / "dump"
        shutil.copytree(dump_of("nan_log") / "rank_0", root / f"rank_{rank}")
        hosts.append(root)
    paths = {}
    for name, stats in (("want", True), ("got", False)):
        paths[name] = tmp_path / name
        CatalogStore(paths[name], create=True)
        ingest_dump(paths[name], dump_of("simple"), run="simple", compute_stats=stats, workers=1)
        for k, root in enumerate(hosts):
            ingest_dump(paths[name], root, run="sharded", compute_stats=stats, workers=1, writer=f"host{k}")
    with Catalog.open(paths["got"]) as cat:
        summary = cat.compute_stats("sharded", spark=spark)
        assert list(summary.runs) == ["sharded"] and summary.computed == 360
        assert cat.sql("SELECT count(*) FROM stats WHERE run = 'simple'").column(0)[0].as_py() == 0
        assert cat.compute_stats("simple").computed > 0
        got = catalog_content(cat, STATS_QUERIES)
    for k in (0, 1):
        assert _batches(paths["got"] / "data" / "run=sharded" / f"writer=host{k}", "tensor_stats") == 1
    with Catalog.open(paths["want"]) as cat:
        assert got == catalog_content(cat, STATS_QUERIES)
        with pytest.raises(ValueError, match="run 'nope' is not in the catalog"):
            cat.compute_stats("nope")


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_md5_as_ingest_md5(spark, tmp_path):
    """`md5=True` (`--md5`) on Spark gives the md5 column `ingest --md5` gives."""
    contents = []
    for name, stats in (("want", True), ("got", False)):
        ingest_dump(
            tmp_path / name, dump_of("nan_log"), run="nan_log", compute_stats=stats, md5=stats, workers=1
        )
        with Catalog.open(tmp_path / name) as cat:
            if not stats:
                assert cat.compute_stats(spark=spark, md5=True).computed == 180
            contents.append(catalog_content(cat, STATS_QUERIES))
    assert contents[0] == contents[1]
    assert all(row["md5"] for row in contents[1][0])


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_a_missing_file_is_an_error_row_as_at_ingest(spark, copy_dump, tmp_path):
    """A tensor file gone since ingest: the `ingest_errors` row ingest writes when it cannot read a
    tensor's data, the same locally and on Spark, and not written again by a re-run."""
    dump = copy_dump("nan_log")
    path = tmp_path / "cat"
    ingest_dump(path, dump, run="nan_log", compute_stats=False, workers=1)
    gone = sorted((dump / "rank_0" / "Net" / "0" / "1").glob("*.npy"))[3]
    gone.unlink()
    results = []
    for how in ("local", "spark"):
        copy = Path(shutil.copytree(path, tmp_path / how))
        with Catalog.open(copy) as cat:
            summary = cat.compute_stats(spark=spark if how == "spark" else None)
            assert (summary.computed, summary.errors) == (179, 1)
            assert cat.compute_stats().runs["nan_log"].todo == 0  # not retried
            errors = cat.sql("SELECT path, stage, reason FROM ingest_errors").to_pylist()
            assert errors == [
                {"path": f"rank_0/Net/0/1/{gone.name}", "stage": "tensor_stats",
                 "reason": f"FileNotFoundError: [Errno 2] No such file or directory: '{gone}'"},
            ]  # fmt: skip
            results.append(catalog_content(cat, STATS_QUERIES))
    assert results[0] == results[1]


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_cli_killed_then_resumed(spark, no_stats, expected):
    """`dumpcat stats --spark local[2]` killed (SIGKILL, with its JVM) after its first commit keeps
    that batch; `dumpcat stats` then computes the rest, and the catalog ends as an ingest with
    statistics. Batches and tasks are made small here so that the kill lands half way."""
    code = (
        "import sys; import catalog.missing_stats as s; s._COMMIT_ROWS = 40; s._TASK_MAX_TENSORS = 40; "
        "from catalog.cli.commands import main; main(sys.argv[1:])"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SPARK_LOCAL_IP": "127.0.0.1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "stats", str(no_stats), "--spark", "local[2]"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while _batches(no_stats, "tensor_stats") == 0:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    with Catalog.open(no_stats) as cat:
        kept = cat.sql("SELECT count(*) FROM raw_tensor_stats").column(0)[0].as_py()
    assert 0 < kept < len(expected[1]) - 40
    rerun = _cli("stats", str(no_stats), "--workers", "2")
    todo = sum(
        int(m.replace(",", ""))
        for m in re.findall(r"^run '.*': ([\d,]+) tensors without", rerun.stdout, re.M)
    )
    assert todo == len(expected[1]) - kept, rerun.stdout
    assert re.fullmatch(r"committed \d+ batch(es)? in [\d.]+ s \(local, 2 workers\)\n", rerun.stderr)
    with Catalog.open(no_stats) as cat:
        assert catalog_content(cat, STATS_QUERIES) == expected
    assert "nothing to compute" in _cli("stats", str(no_stats)).stdout


# -- compare ---------------------------------------------------------------------------------------------


def test_compare_on_spark_is_the_local_compare(spark, two_runs, compared_locally, tmp_path):
    path = Path(shutil.copytree(two_runs, tmp_path / "cat"))
    with Catalog.open(path) as cat:
        summary = cat.compare("cast", "base", spark=spark)
        assert summary.pairs == len(compared_locally[0])
        assert catalog_content(cat, COMPARE_QUERIES) == compared_locally
        assert cat.compare("cast", "base", spark=spark).pairs == 0


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_compare_with_a_missing_file(spark, tmp_path):
    """A run tensor gone since ingest: status `unreadable_run`, on Spark as locally."""
    for run in ("base", "cast"):
        shutil.copytree(COMPARE / run / "dump", tmp_path / run)
    path = tmp_path / "cat"
    for run in ("base", "cast"):
        ingest_dump(path, tmp_path / run, run=run, workers=1)
    gone = sorted((tmp_path / "cast").rglob("MatMul.*output.0*.npy"))[0]
    gone.unlink()
    results = []
    for how in ("local", "spark"):
        copy = Path(shutil.copytree(path, tmp_path / how))
        with Catalog.open(copy) as cat:
            summary = cat.compare("cast", "base", spark=spark if how == "spark" else None, workers=2)
            assert summary.statuses["unreadable_run"] == 1
            results.append(catalog_content(cat, COMPARE_QUERIES))
    assert results[0] == results[1]


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_cli_compare_on_spark(spark, two_runs, compared_locally, tmp_path):
    path = Path(shutil.copytree(two_runs, tmp_path / "cat"))
    proc = _cli("compare", str(path), "cast", "base", "--spark", "local[2]", "--format", "csv")
    assert re.fullmatch(r"compared 'cast' with 'base': [\d,]+ new pairs \(.*\) in [\d.]+ s\n", proc.stderr)
    assert proc.stdout.startswith("rank,iteration,op_name,")
    with Catalog.open(path) as cat:
        assert catalog_content(cat, COMPARE_QUERIES) == compared_locally


# -- errors ----------------------------------------------------------------------------------------------


def _one_line_error(proc: subprocess.CompletedProcess, *, status: int = 1) -> str:
    assert proc.returncode == status, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.mark.parametrize("spark", ["local"], indirect=True)
def test_bad_master_and_missing_pyspark_are_one_line_errors(spark, no_stats, two_runs, tmp_path):
    two_runs = Path(shutil.copytree(two_runs, tmp_path / "two_runs"))
    port = _free_port()  # nothing listens there
    line = _one_line_error(_cli("stats", str(no_stats), "--spark", f"spark://127.0.0.1:{port}", check=False))
    url = f"spark://127.0.0.1:{port}"
    assert (
        line == f"dumpcat: error: cannot reach the Spark master {url}: 127.0.0.1:{port}: Connection refused"
    )
    line = _one_line_error(_cli("stats", str(no_stats), "--spark", "local[0]", check=False))
    why = "Asked to run locally with 0 threads"  # a URL of the right form that Spark refuses
    assert line.startswith(f"dumpcat: error: cannot start Spark on 'local[0]': {why} (Spark's log: "), line
    compare = _cli(
        "compare", str(two_runs), "cast", "base", "--spark", f"spark://127.0.0.1:{port}", check=False
    )
    assert "cannot reach the Spark master" in _one_line_error(compare)
    with Catalog.open(two_runs) as cat:  # nothing was committed by the failed compare
        assert cat.sql("SELECT count(*) FROM raw_comparisons").column(0)[0].as_py() == 0
    without = (
        "import sys; sys.modules['pyspark'] = None; from catalog.cli.commands import main; main(sys.argv[1:])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", without, "stats", str(no_stats), "--spark", "local[2]"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert "pip install 'dumpcat[spark]'" in _one_line_error(proc)
    usage = _cli("stats", str(no_stats), "--spark", "local[2]", "--workers", "2", check=False)
    assert usage.returncode == 2 and "--workers" in usage.stderr
    with Catalog.open(no_stats) as cat:  # nothing was committed by any of them
        assert cat.sql("SELECT count(*) FROM raw_tensor_stats").column(0)[0].as_py() == 0


# -- tasks -----------------------------------------------------------------------------------------------


def test_a_mistyped_master_url_is_an_error_even_with_nothing_to_do(two_runs, tmp_path):
    """A master URL that is no Spark master URL (a typo, a quote too many) is one error line before
    any work, also when there is nothing to compute and no session would start (it used to end
    in success then, the URL never looked at); `dumpcat stats` and `compare`, CLI and Python."""
    from catalog.spark.jobs import SparkJobError

    path = Path(shutil.copytree(two_runs, tmp_path / "cat"))  # ingested with statistics
    with Catalog.open(path) as cat:
        cat.compare("cast", "base", workers=1)
    for url in ("bogus://x", "local[x]", "spark://head", "spark://head:7077/", "local[2]'", ""):
        for args in (("stats", str(path)), ("compare", str(path), "cast", "base")):
            line = _one_line_error(_cli(*args, "--spark", url, check=False))
            assert line.startswith(f"dumpcat: error: bad Spark master URL {url!r}: expected local"), line
        with pytest.raises(SparkJobError, match="bad Spark master URL"), Catalog.open(path) as cat:
            cat.compute_stats(spark=url)
    for url in (
        "local",
        "local[2]",
        "local[*]",
        "local[2, 3]",
        "spark://a:7077,b:7077",
        "yarn",
        "k8s://h:6443",
    ):
        assert check_master_url(url) == url


def test_tasks_are_whole_directories_within_the_bounds():
    groups = [
        ("a", list(range(3)), [10] * 3),
        ("a", list(range(3, 5)), [10] * 2),
        ("a", list(range(5, 17)), [10] * 12),  # bigger than a task: cut
        ("a", list(range(17, 18)), [10]),
        ("b", list(range(18, 20)), [10] * 2),  # another run: another task
        ("b", list(range(20, 21)), [1000]),  # over the byte bound alone
    ]
    tasks = [(key, [list(p) for p in pieces]) for key, pieces in pack_tasks(groups, 5, 100)]
    assert tasks == [
        ("a", [[0, 1, 2], [3, 4]]),
        ("a", [[5, 6, 7, 8, 9]]), ("a", [[10, 11, 12, 13, 14]]), ("a", [[15, 16]]),
        ("a", [[17]]),
        ("b", [[18, 19]]),
        ("b", [[20]]),
    ]  # fmt: skip
    assert task_bounds(100, 0, 2, max_items=2000, max_bytes=1 << 30, min_items=32) == (32, 64 << 20)
    assert task_bounds(10**6, 10**12, 8, max_items=2000, max_bytes=1 << 28, min_items=32) == (2000, 1 << 28)
    assert task_bounds(1000, 0, 2, max_items=2000, max_bytes=1 << 30, min_items=32)[0] == 125


def test_docs_show_what_dumpcat_stats_prints(tmp_path):
    """docs/cli.md's `dumpcat stats` session: an ingest without statistics, `dumpcat stats`, and
    `dumpcat stats` again; each stats command prints the lines shown (stdout, then stderr), but for
    the time it took."""
    text = (ROOT / "docs" / "cli.md").read_text()
    block = re.search(r"^    \$ (dumpcat ingest \S+ --catalog (\S*nostats\.cat) --no-stats)\n"
                      r"((?:    (?!\$ ).*\n)+)((?:    \$ dumpcat stats \2\n(?:    (?!\$ ).*\n)+)+)",
                      text, re.M)  # fmt: skip
    assert block, "docs/cli.md: no `dumpcat stats ...nostats.cat` session"
    ingest = block.group(1).split()[1:]
    ingest[1] = str(ROOT / ingest[1])
    _cli(*ingest, cwd=tmp_path)
    runs = re.findall(r"^    \$ (dumpcat stats \S+)\n((?:    (?!\$ ).*\n)+)", block.group(4), re.M)
    assert len(runs) == 2, runs  # a run that computes, and one that finds nothing left
    timing = re.compile(r" in [\d.]+ s ")
    for command, output in runs:
        proc = _cli(*command.split()[1:], "--workers", "2", cwd=tmp_path)
        shown = [line[4:] for line in output.splitlines()]
        printed = (proc.stdout + proc.stderr).splitlines()
        assert [timing.sub(" in - s ", x) for x in printed] == [timing.sub(" in - s ", x) for x in shown]
