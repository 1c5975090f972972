"""Shared fixtures: paths of the real dump trees committed under tests/data."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

TESTS = Path(__file__).parent  # tests/: its subfolders mirror the packages (tests/ingest/, ...)
REPO = TESTS.parent
DATA = TESTS / "data"
SAMPLES = DATA / "samples" / "mindspore-2.10-cpu"
MS210 = DATA / "ms210"

# The slowest test files, longest first (seconds of test time on a 2-core machine, measured
# 2026-11-29 with --durations: the whole suite in 9.8 min). `--dist loadfile` hands files to the
# two workers in collection order (pytest_configure turns xdist's reordering by test count off):
# the long ones start first, and the short ones fill the gaps at the end, instead of one worker
# running a 4-minute file alone.
SLOWEST_FILES = {
    "test_spark.py": 212, "test_replay.py": 97, "test_shards.py": 76, "test_server_limits.py": 62,
    "test_flat.py": 53, "test_server_availability.py": 49, "test_report.py": 36, "test_flat_memory.py": 30,
    "test_superset.py": 28, "test_leaf_scan.py": 22, "test_cli.py": 22, "test_ascend_raw.py": 17,
    "test_server_hostile.py": 16, "test_server.py": 16, "test_pgcodec.py": 16, "test_hostile_tree.py": 15,
    "test_superset_dialect.py": 30, "test_progress.py": 20, "test_docker.py": 17,
}  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config.option, "loadscopereorder"):  # pytest-xdist's --no-loadscope-reorder
        config.option.loadscopereorder = False
    # Definitions built once per user (the writer's resolution views, the views template, the
    # server's views database: ingest/storage/definitions_cache.py) go to a cache folder: the
    # tests' is a temporary folder of this run (xdist's workers inherit it), never ~/.cache.
    if "DUMPCAT_CACHE_DIR" not in os.environ:
        import tempfile

        folder = tempfile.mkdtemp(prefix="dumpcat-test-cache-")
        os.environ["DUMPCAT_CACHE_DIR"] = folder
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slowest files first (see SLOWEST_FILES); the others keep their order, and so do the
    tests within a file."""
    items.sort(key=lambda item: -SLOWEST_FILES.get(item.path.name, 0))


def dump_of(scenario: str) -> Path:
    """The dump root (holding rank_0/) of a committed real dump."""
    for base in (SAMPLES, MS210):
        if (base / scenario / "dump").is_dir():
            return base / scenario / "dump"
    raise FileNotFoundError(scenario)


def nan_log_catalog(folder: Path) -> Path:
    """A catalog of the committed nan_log dump in `folder/cat` (the server tests' catalog)."""
    from catalog.api import Catalog

    path = folder / "cat"
    Catalog.open(path, create=True).ingest(dump_of("nan_log"), run="nan_log")
    return path


def as_written_before_flat_files(catalog: Path) -> None:
    """Make a catalog look like one an older dumpcat wrote: no flat files, no schema ids in the
    snapshot (so readers check each file's columns, as they must for files that lack newer ones)."""
    import json

    snap_file = catalog / "snapshot.json"
    snap = json.loads(snap_file.read_text())
    snap.pop("flat", None)
    for batch in snap["batches"]:
        batch.pop("schema", None)
    snap_file.write_text(json.dumps(snap))
    shutil.rmtree(catalog / "data" / "flat", ignore_errors=True)


@pytest.fixture
def catalog_dir(tmp_path: Path) -> Path:
    return tmp_path / "cat"


@pytest.fixture
def copy_dump(tmp_path: Path):
    """Copy a committed dump into tmp_path so a test may modify it."""

    def _copy(scenario: str, name: str | None = None) -> Path:
        dest = tmp_path / (name or scenario)
        shutil.copytree(dump_of(scenario), dest)
        for p in [dest, *dest.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)
        return dest

    return _copy


# -- Spark sessions ----------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for_line(log: Path, text: str, proc: subprocess.Popen, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.25)
    tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
    raise RuntimeError(f"{log.name}: no {text!r} (exit {proc.poll()}):\n{tail}")


def _stop(proc: subprocess.Popen) -> None:
    """Stop a daemon started below and what it started (its executors): its own process group."""
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@contextlib.contextmanager
def standalone_cluster(tmp: Path) -> Iterator[str]:
    """A Spark standalone master and one worker (1 core, 1 GB) on 127.0.0.1, run by the pyspark
    package's own spark-class; yields the master URL once the worker has registered."""
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    env = {
        **os.environ,
        "SPARK_HOME": str(spark_home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_LOG_DIR": str(tmp / "logs"),
        "SPARK_LOCAL_DIRS": str(tmp / "local"),
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "PYSPARK_PYTHON": sys.executable,
    }
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = ["bash", str(spark_home / "bin" / "spark-class")]
    procs: list[subprocess.Popen] = []

    def start(name: str, args: list[str], ready: str) -> None:
        log = tmp / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [*spark_class, *args], env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        procs.append(proc)
        _wait_for_line(log, ready, proc)

    try:
        master = ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]
        start("master", [*master, "--webui-port", "0"], "New state: ALIVE")
        worker = ["org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1", "--cores", "1"]
        worker += ["--memory", "1g", "--webui-port", "0", "--work-dir", str(tmp / "work")]
        start("worker", worker, "Successfully registered with master")
        yield url
    finally:
        for proc in reversed(procs):
            _stop(proc)


def _session(master: str, tmp: Path):
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("dumpcat-test")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.local.dir", str(tmp / "driver"))
        # The tests' catalogs are a few thousand rows: a query's time is Spark compiling generated
        # code (Janino) and re-planning each stage, not its rows; both are off here (about half of
        # test_spark.py's time). Spark's interpreted operators give the rows its generated code
        # gives (its own tests run both ways); bench/bench_scale.py's register_views and queries
        # still run with Spark's defaults (codegen and adaptive execution on), in a new session of
        # this driver (test_spark.py test_bench_scale_queries_give_the_generators_answers_...).
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.codegen.wholeStage", "false")
        .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
    )
    if master.startswith("spark://"):
        builder = builder.config("spark.executor.memory", "512m").config("spark.cores.max", "1")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


@pytest.fixture(scope="module", params=["local", "standalone"])
def spark(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """One SparkSession per mode and test module: local[2], then a standalone master + worker on
    127.0.0.1 (tests/catalog/spark/test_spark.py)."""
    tmp = tmp_path_factory.mktemp(f"spark_{request.param}")
    with pytest.MonkeyPatch.context() as mp, contextlib.ExitStack() as stack:
        mp.setenv("SPARK_LOCAL_IP", "127.0.0.1")
        mp.setenv("PYSPARK_PYTHON", sys.executable)
        master = "local[2]"
        if request.param == "standalone":
            master = stack.enter_context(standalone_cluster(tmp))
        session = _session(master, tmp)
        stack.callback(session.stop)
        yield session
