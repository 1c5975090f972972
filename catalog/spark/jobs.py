"""Heavy work as Spark jobs: statistics from tensor data (`dumpcat stats --spark`) and the metrics of
`dumpcat compare --spark`, for runs too big for one machine's cores.

The split of work between the driver and Spark:

- The driver is the dumpcat process. It holds the catalog's writer lock, gets the work list from
  SQL exactly as the local path does (`sql/queries/stats_todo.sql`, `compare_pairs.sql`), cuts it
  into tasks and commits what comes back as catalog batches, with the local path's own commit code.
- A task is the tensors (or pairs) of one leaf dump directory: directories are where a dump's
  files sit together, and a task's files are read by one executor. Consecutive small directories
  of one run share a task and a huge directory is cut into chunks, so that every task stays within
  a bound (`task_bounds`) and there are enough tasks for every executor core.
- A task reads the tensor files itself, at the paths the catalog holds: the executors must see the
  dump at the same paths as the driver (shared storage). It computes with the functions the local
  path uses (`ingest.statistics.rows.computed_stats_rows`: the ingest pipeline's statistics rows;
  `ingest.compare_metrics.compare_jobs`) and returns plain rows (Arrow IPC bytes, or tuples).
- Results stream back: each task is its own Spark job over one partition of a parallelized wave of
  tasks (`SparkContext.runJob`), a few jobs per executor core in flight, and the driver takes each
  result as its job ends and commits every 50,000 rows or so. Memory stays bounded on the driver,
  and a killed driver (Spark's tasks die with it) keeps every batch it committed; the next run
  computes what is left. `RDD.toLocalIterator` would stream too, but it computes one partition at
  a time.

Executors import dumpcat (the task functions are in its modules). On one machine they get the
driver's own copy: its directory goes on the executors' PYTHONPATH, and a session dumpcat starts
runs executors with the driver's Python (unless PYSPARK_PYTHON says otherwise). On a cluster,
install the same dumpcat on every worker. pyspark is imported only here, and only when asked for.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import os
import re
import shutil
import socket
import sys
import tempfile
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    from ingest.compare_metrics import PairJob, PairMetrics

__all__ = [
    "SparkJobError",
    "check_master_url",
    "compare_on_spark",
    "pack_tasks",
    "run_tasks",
    "spark_session",
    "task_bounds",
]

# dumpcat is not on PyPI, where `pip install 'dumpcat[spark]'` would fetch another project: the
# checkout's extra
INSTALL_HINT = "pip install -e '.[spark]'"
# Spark jobs in flight per executor core (default parallelism): one running, one queued behind it.
_JOBS_PER_CORE = 2
# Tasks parallelized together (one RDD, one partition each); each still runs as its own job.
_WAVE_TASKS = 64
# Seconds to wait for a standalone master's port before saying it cannot be reached.
_CONNECT_TIMEOUT_S = 5.0


class SparkJobError(RuntimeError):
    """Spark cannot do the work: pyspark or Java missing, a master that cannot be reached, a task that
    failed. The message is one line, for `dumpcat: error: …`."""


# -- sessions ------------------------------------------------------------------------------------------


@contextlib.contextmanager
def spark_session(spark: str | SparkSession, app: str) -> Iterator[SparkSession]:
    """`spark` itself when it is a SparkSession; for a master URL (`local[4]`, `spark://host:7077`, …) a
    session started here and stopped afterwards (or the process's running one, if it has that master)."""
    if not isinstance(spark, str):
        yield spark
        return
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise SparkJobError(f"pyspark is not installed: {INSTALL_HINT} (Spark also needs Java 17)") from None
    active = SparkSession.getActiveSession()
    if active is not None:
        if active.sparkContext.master != spark:
            raise SparkJobError(
                f"this process already runs a SparkSession with master {active.sparkContext.master}: "
                f"pass that session instead of {spark!r}"
            )
        yield active
        return
    session, log = _start_session(SparkSession, spark, app)
    try:
        yield session
    finally:
        session.stop()
        with contextlib.suppress(OSError):
            os.unlink(log)


# The master URLs Spark itself accepts (SparkContext.createTaskScheduler), by form only.
_MASTER_URL = re.compile(
    r"local(\[(\*|\d+)(\s*,\s*\d+)?\])?|local-cluster\[\s*\d+\s*,\s*\d+\s*,\s*\d+\s*\]|yarn"
    r"|spark://[^\s,/]+:\d+(,[^\s,/]+:\d+)*|k8s://\S+"
)


def check_master_url(master: str) -> str:
    """`master` if it has the form of a Spark master URL; else SparkJobError, in one line. Checked
    before any work, so that a mistyped URL is an error even when there is nothing to do (no
    session is started then, and Spark would never see it)."""
    if not _MASTER_URL.fullmatch(master):
        raise SparkJobError(
            f"bad Spark master URL {master!r}: expected local, local[N], local[*], spark://HOST:PORT, "
            "yarn or k8s://…"
        )
    return master


def _check_master(master: str) -> None:
    """Fail fast, in one line, where Spark would retry for a minute and print stack traces: Java
    missing, or a standalone master whose port does not answer."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise SparkJobError("Spark needs Java 17: java is not on PATH and JAVA_HOME is not set")
    if not master.startswith("spark://"):
        return  # local[N], yarn, k8s://…: Spark itself checks these
    problems = []
    for address in master.removeprefix("spark://").split(","):
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise SparkJobError(f"bad Spark master URL {master!r}: expected spark://HOST:PORT")
        try:
            socket.create_connection((host, int(port)), timeout=_CONNECT_TIMEOUT_S).close()
            return
        except OSError as exc:
            problems.append(f"{address}: {exc.strerror or exc or type(exc).__name__}")
    raise SparkJobError(f"cannot reach the Spark master {master}: {'; '.join(problems)}")


def _start_session(session_class: Any, master: str, app: str) -> tuple[SparkSession, str]:
    """A new session on `master`, and the file its JVM logs to.

    The JVM Spark starts inherits this process's stderr and writes its warnings (and, on a bad master,
    Java stack traces) there for as long as it lives: it gets a log file instead, so that the command
    prints its own lines only; an error names the file."""
    _check_master(master)
    builder = (
        session_class.builder.master(master).appName(app).config("spark.ui.showConsoleProgress", "false")
    )
    log = tempfile.NamedTemporaryFile(prefix="dumpcat-spark-", suffix=".log", delete=False)  # noqa: SIM115
    python_was = os.environ.get("PYSPARK_PYTHON")
    if python_was is None:  # executors run this interpreter (the default is whatever `python3` is)
        os.environ["PYSPARK_PYTHON"] = sys.executable
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(log.fileno(), 2)
    try:
        session = builder.getOrCreate()
    except Exception as exc:
        os.dup2(saved, 2)
        reason = _jvm_reason(log.name) or _first_line(str(exc))
        raise SparkJobError(f"cannot start Spark on {master!r}: {reason} (Spark's log: {log.name})") from None
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        log.close()
        if python_was is None:
            os.environ.pop("PYSPARK_PYTHON", None)
    session.sparkContext.setLogLevel("ERROR")
    return session, log.name


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), text.strip())[:400]


_JAVA_EXCEPTION = re.compile(r"(?:^|\s)[\w.$]*(?:Exception|Error): (.+)$")


def _jvm_reason(log: str) -> str | None:
    """The message of the first Java exception in the JVM's log (`Master must either be yarn or start
    with spark, k8s, or local`), or a launcher's complaint about Java."""
    try:
        text = Path(log).read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(("\t", " ")):
            continue
        if m := _JAVA_EXCEPTION.search(line):
            return m.group(1).strip()[:400]
        if "JAVA_HOME" in line or "java: not found" in line or "java: command not found" in line:
            return line.strip()[:400]
    return None


# -- cutting the work into tasks ---------------------------------------------------------------------


def task_bounds(
    total_items: int, total_bytes: int, parallelism: int, *, max_items: int, max_bytes: int, min_items: int
) -> tuple[int, int]:
    """(items, bytes) a task may hold: about a quarter of one core's share of the work, so that a
    slow task does not hold up the end, within [min_items, max_items] and at most max_bytes."""
    share = max(1, 4 * max(1, parallelism))
    items = min(max_items, max(min_items, math.ceil(total_items / share)))
    nbytes = min(max_bytes, max(64 << 20, math.ceil(total_bytes / share)))
    return items, nbytes


def pack_tasks(
    groups: Iterable[tuple[Hashable, Sequence, Sequence[int]]], max_items: int, max_bytes: int
) -> Iterator[tuple[Hashable, list[Sequence]]]:
    """Tasks of whole groups (dump directories): `groups` are `(key, items, sizes in bytes)`, in
    order; consecutive groups of one key (a run) share a task while it stays within `max_items`
    and `max_bytes`, and a group bigger than that is cut into chunks of it. Yields `(key, pieces)`:
    slices of the groups' items, in order."""
    key: Hashable = None
    pieces: list[Sequence] = []
    n = size = 0
    for group_key, items, sizes in groups:
        count, group_bytes = len(items), sum(sizes)
        if pieces and (group_key != key or n + count > max_items or size + group_bytes > max_bytes):
            yield key, pieces
            pieces, n, size = [], 0, 0
        if count > max_items or group_bytes > max_bytes:
            start, chunk = 0, 0
            for i, item_bytes in enumerate(sizes):
                if i > start and (i - start >= max_items or chunk + item_bytes > max_bytes):
                    yield group_key, [items[start:i]]
                    start, chunk = i, 0
                chunk += item_bytes
            yield group_key, [items[start:]]
            continue
        key = group_key
        pieces.append(items)
        n += count
        size += group_bytes
    if pieces:
        yield key, pieces


# -- running tasks -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _executors_import_this_dumpcat(sc: SparkContext) -> Iterator[None]:
    """Put the directory this dumpcat is imported from on the executors' PYTHONPATH while the jobs
    are defined (Spark sends `SparkContext.environment` with each job), unless it is an installed
    package: on one machine executors then import the driver's copy, not another one."""
    root = str(Path(__file__).resolve().parents[len(__name__.split(".")) - 1])  # the folder holding catalog/
    if Path(root).name in ("site-packages", "dist-packages"):
        yield
        return
    env = sc.environment
    before = env.get("PYTHONPATH")
    if before is None or root not in before.split(os.pathsep):
        env["PYTHONPATH"] = root if not before else root + os.pathsep + before
    try:
        yield
    finally:
        if before is None:
            env.pop("PYTHONPATH", None)
        else:
            env["PYTHONPATH"] = before


def _task_failure(exc: BaseException) -> str:
    """One line for a failed Spark job: the Python exception a task raised, when there is one."""
    text = str(exc)
    at = text.rfind("Traceback (most recent call last):")
    if at >= 0:
        body = re.split(r"\n\s*\n|\n\tat ", text[at:], maxsplit=1)[0]
        lines = [line.strip() for line in body.splitlines() if line.strip() and not line.startswith(" ")]
        if lines:
            reason = lines[-1]
            if reason.startswith(("ModuleNotFoundError", "ImportError")):
                reason += " (executors need dumpcat: install it on every worker)"
            return f"a Spark task failed: {reason}"[:500]
    return f"the Spark job failed: {_first_line(text)}"


def run_tasks(
    spark: SparkSession, fn: Callable[[Iterable[Any]], Iterable[Any]], tasks: Iterable[Any], description: str
) -> Iterator[Any]:
    """`fn` over each task on the executors, one Spark job per task: what `fn` yields for a task, as
    its job ends (tasks finish in any order).

    `fn` is a partition function (an iterable of tasks in, results out) of an importable dumpcat
    module. Tasks are parallelized a wave at a time (`parallelize(wave, len(wave))`: one partition
    per task), and 2 jobs per executor core run at once, so memory holds a few waves of tasks and
    the results not yet taken. Stopping early (an error, Ctrl-C) cancels the jobs still running."""
    sc = spark.sparkContext
    window = _JOBS_PER_CORE * max(1, sc.defaultParallelism)
    group = f"dumpcat-{uuid.uuid4().hex[:12]}"
    pool = ThreadPoolExecutor(max_workers=window, thread_name_prefix="dumpcat-spark")
    running: set[Future] = set()

    def job(rdd, index: int) -> list:
        # Job groups are per thread (pyspark pins each Python thread to a JVM thread).
        sc.setJobGroup(group, description, interruptOnCancel=True)
        return sc.runJob(rdd, fn, [index])

    def finished(futures: set[Future]) -> Iterator[Any]:
        for future in futures:
            try:
                result = future.result()
            except Exception as exc:
                raise SparkJobError(_task_failure(exc)) from None
            yield from result

    try:
        with _executors_import_this_dumpcat(sc):
            it = iter(tasks)
            while wave := list(itertools.islice(it, _WAVE_TASKS)):
                rdd = sc.parallelize(wave, len(wave))
                for index in range(len(wave)):
                    while len(running) >= window:
                        done, running = wait(running, return_when=FIRST_COMPLETED)
                        yield from finished(done)
                    running.add(pool.submit(job, rdd, index))
            while running:
                done, running = wait(running, return_when=FIRST_COMPLETED)
                yield from finished(done)
    finally:
        if running:
            with contextlib.suppress(Exception):
                sc.cancelJobGroup(group)
        pool.shutdown(wait=False, cancel_futures=True)


# -- compare -----------------------------------------------------------------------------------------

_COMPARE_MAX_PAIRS = 1_000
_COMPARE_MIN_PAIRS = 16
_COMPARE_MAX_BYTES = 512 << 20


def _pair_dir(job: PairJob) -> str:
    side = job.run or job.baseline
    return side[0].rpartition("/")[0] if side else ""


def _pair_bytes(job: PairJob) -> int:
    import numpy as np

    total = 0
    for side in (job.run, job.baseline):
        if side is None:
            continue
        try:
            itemsize = np.dtype(side[2]).itemsize
        except TypeError:
            itemsize = 2  # bfloat16, float8, packed types: the size does not need to be exact
        total += math.prod(side[3]) * itemsize
    return total


def _compare_partition(tasks: Iterable[list[PairJob]]) -> Iterator[list[tuple[int, PairMetrics]]]:
    """Executor side: each task's pairs, compared by the function the local path runs."""
    from ingest.compare_metrics import compare_jobs

    for jobs in tasks:
        yield compare_jobs(jobs)


def compare_on_spark(
    spark: str | SparkSession, jobs: list[PairJob]
) -> Iterator[list[tuple[int, PairMetrics]]]:
    """`compare_jobs` over `jobs` as Spark tasks, one leaf directory (of the run's tensor, or the
    baseline's when the run has none) per task: lists of `(key, metrics)` as tasks end, as
    `catalog.compare` commits them. A master URL starts a session for the call."""
    with spark_session(spark, "dumpcat compare") as session:
        ordered = sorted(jobs, key=_pair_dir)
        sizes = [_pair_bytes(job) for job in ordered]
        items, nbytes = task_bounds(
            len(ordered), sum(sizes), session.sparkContext.defaultParallelism,
            max_items=_COMPARE_MAX_PAIRS, max_bytes=_COMPARE_MAX_BYTES, min_items=_COMPARE_MIN_PAIRS,
        )  # fmt: skip
        groups = []
        start = 0
        for _, members in itertools.groupby(range(len(ordered)), key=lambda i: _pair_dir(ordered[i])):
            end = start + len(list(members))
            groups.append((None, ordered[start:end], sizes[start:end]))
            start = end
        tasks = (
            [job for piece in pieces for job in piece] for _, pieces in pack_tasks(groups, items, nbytes)
        )
        yield from run_tasks(session, _compare_partition, tasks, "dumpcat compare")


# -- statistics --------------------------------------------------------------------------------------


def stats_partition(
    tasks: Iterable[tuple[str, str, bool, bytes]],
) -> Iterator[tuple[str, bytes, bytes | None, int]]:
    """Executor side of `dumpcat stats --spark`: each task is `(run, dump root, md5, tensors rows as
    Arrow IPC)`; yields `(run, tensor_stats rows, ingest_errors rows or None, tensors done)`, the
    rows as Arrow IPC, built by the ingest path's code (`ingest.statistics.rows.computed_stats_rows`)."""
    from ingest.statistics.rows import computed_stats_rows

    for run, root, md5, payload in tasks:
        todo = from_ipc(payload)
        stats, errors = computed_stats_rows(todo, run, root, md5=md5, workers=1)
        yield run, to_ipc(stats), None if errors is None else to_ipc(errors), todo.num_rows


def to_ipc(table: pa.Table) -> bytes:
    """An Arrow table as IPC stream bytes (what tasks ship, both ways)."""
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    import pyarrow as pa

    return pa.ipc.open_stream(data).read_all()
