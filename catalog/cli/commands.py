"""The `dumpcat` command line: a thin shell over the Python API.

Errors the user can act on (missing dump root, unusable catalog, bad SQL, unknown row id) are
one line on stderr and exit status 1; problems inside a dump never fail an ingest, they are
counted and listed in `ingest_errors`.
"""

from __future__ import annotations

import os
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import click

# No command multiplies matrices: without this, numpy's OpenBLAS starts a spinning thread per core at
# import (in every helper process too), which takes CPU from the ingest (~10 ms of a small one).
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

if TYPE_CHECKING:
    import pyarrow as pa

    from catalog.api import Catalog

# Each command imports what it uses: a one-shot `dumpcat ingest` of a small dump is mostly start-up,
# and DuckDB, numpy, pyarrow and the readers are most of that (the `ingest` command starts its
# writer's DuckDB before importing the rest, see ingest.storage.writer_warm_up).

# Options shared by `ingest` and `watch`.
CATALOG_OPTION = click.option(
    "--catalog",
    "-c",
    "catalog_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Catalog directory (created if missing).",
)
RUN_OPTION = click.option("--run", "run", default=None, help="Run name (default: the dump folder's name).")


class _ProducerChoice(click.Choice):
    """The `--producer` values, listed when first asked for (a value given, the help shown): the
    built-in names need no reader import, but the plug-ins' need an entry-point lookup
    (importlib.metadata), which every other command would pay for at start-up."""

    def __init__(self) -> None:
        super().__init__(())

    @property
    def choices(self) -> tuple[str, ...]:
        from ingest.readers.registry import reader_names

        return tuple(reader_names())

    @choices.setter
    def choices(self, value: tuple[str, ...]) -> None:
        pass  # click.Choice.__init__ sets them: they are the registry's


PRODUCER_OPTION = click.option(
    "--producer",
    type=_ProducerChoice(),
    default=None,
    help="Read the dump as this producer's layout instead of detecting it.",
)
WRITER_OPTION = click.option(
    "--writer",
    "writer",
    default=None,
    metavar="NAME",
    help="Write this run's shard NAME (e.g. the host name), so that writers on several hosts ingest "
    "different ranks of one run into one catalog at the same time (default: the catalog's one shard).",
)
FOLLOW_SYMLINKS_OPTION = click.option(
    "--follow-symlinks",
    is_flag=True,
    help="Follow symlinks that lead out of the dump root (default: an ingest_errors row each).",
)


def _metadata_caps(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A mistyped cap is a usage error before any work."""
    from ingest.formats.limits import MetadataCaps

    try:
        MetadataCaps.parse(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    return value


MAX_METADATA_OPTION = click.option(
    "--max-metadata-size",
    "max_metadata_size",
    default=None,
    metavar="SIZE|KIND=SIZE,...",
    envvar="DUMPCAT_MAX_METADATA_SIZE",
    show_envvar=True,
    callback=_metadata_caps,
    help="Largest metadata file read whole; a bigger one is an ingest_errors row, not read. One size for "
    "every kind (1GiB) or per kind: json (config/data_dump/kernel-args/construct json, one dump.json "
    "entry; default 64MiB), csv (mapping.csv, execution order; 64MiB), stack (stack.json; 256MiB), "
    "graph (graphs/*.pb|.ir, GE graphs; 512MiB), dump_json (a dump.json not laid out as msprobe "
    "writes it; 256MiB), e.g. graph=1GiB,json=128MiB.",
)
STATS_OPTION = click.option(
    "--stats/--no-stats",
    "compute_stats",
    default=True,
    help="Compute statistics from tensor data where statistic.csv has none (default: on).",
)


def _spark_master(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A mistyped master URL is an error before any work, even when there is nothing to do."""
    from catalog.spark.jobs import SparkJobError, check_master_url

    try:
        return None if value is None else check_master_url(value)
    except SparkJobError as exc:
        _fail(str(exc))


SPARK_OPTION = click.option(
    "--spark",
    "spark_master",
    default=None,
    metavar="MASTER_URL",
    callback=_spark_master,
    help="Do the work as Spark tasks on this master (local[4], spark://host:7077, ...), one dump directory "
    "each; needs pip install -e '.[spark]', and the executors must see the dump at the same paths.",
)
PROGRESS_OPTION = click.option(
    "--progress/--no-progress",
    default=None,
    help="A progress bar on stderr: total, ETA, phase (default: when stderr is a terminal).",
)
FORMAT_OPTION = click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True
)


def _fail(message: str) -> NoReturn:
    click.echo(f"dumpcat: error: {message}", err=True)
    sys.exit(1)


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    """A CatalogWarning (a shard left out as unreadable) is one line, as errors are."""
    from ingest.storage.store import CatalogWarning

    if issubclass(category, CatalogWarning):
        click.echo(f"dumpcat: warning: {' '.join(str(message).split())}", err=True)
    else:
        _python_show_warning(message, category, filename, lineno, file, line)


_python_show_warning = warnings.showwarning


def _spare_pandas() -> None:
    """The commands that build Arrow tables keep pyarrow from importing pandas, which none of
    them uses (ingest/storage/memory.py `decline_pandas_for_arrow`)."""
    from ingest.storage.memory import decline_pandas_for_arrow

    decline_pandas_for_arrow()


class _Commands(click.Group):
    """Every command's expected failures (a bad query, an unusable catalog or dump, a file that
    cannot be written) become one line on stderr and exit status 1, never a traceback."""

    def invoke(self, ctx: click.Context):
        warnings.showwarning = _show_warning
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # `dumpcat sql ... | head`: the reader has what it wanted
            sys.stderr.close()
            sys.exit(0)
        except click.ClickException:
            raise
        except Exception as exc:
            expected, refused = _expected_errors()
            if isinstance(exc, expected):
                _fail(" ".join(str(exc).split()))
            if isinstance(exc, refused):
                _fail(f"refused: {' '.join(str(exc).split())}")
            if isinstance(exc, OSError):
                where = f": {exc.filename}" if exc.filename else ""
                _fail(f"{exc.strerror or exc}{where}")
            raise


def _expected_errors() -> tuple[tuple[type[Exception], ...], type[Exception]]:
    """The errors a user can act on (one line each), and a refused query's."""
    import duckdb

    from catalog.api import QueryRefused, TensorNotFoundError
    from ingest.errors import DumpRootError
    from ingest.storage.store import CatalogError

    return (CatalogError, DumpRootError, TensorNotFoundError, duckdb.Error), QueryRefused


def _print_table(result: pa.Table, fmt: str) -> None:
    from catalog.cli.output import write_table

    write_table(result, sys.stdout, fmt)


def _open(path: str) -> Catalog:
    """Open a catalog and load its views now, so that a damaged one fails here, in one line."""
    from catalog.api import Catalog

    cat = Catalog.open(path)
    cat.refresh()
    return cat


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option("0.1.0", prog_name="dumpcat")
def main() -> None:
    """dumpcat: a SQL catalog of deep-learning framework dumps."""


@main.command()
@click.argument("dump_dirs", nargs=-1, required=True, type=click.Path(path_type=Path))
@CATALOG_OPTION
@RUN_OPTION
@WRITER_OPTION
@PRODUCER_OPTION
@STATS_OPTION
@click.option("--md5", is_flag=True, help="Also compute the md5 of tensors whose statistics are computed.")
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Processes reading headers and computing statistics (default: one per core, at most 8).",
)
@PROGRESS_OPTION
@FOLLOW_SYMLINKS_OPTION
@MAX_METADATA_OPTION
def ingest(
    dump_dirs: tuple[Path, ...],
    catalog_path: Path,
    run: str | None,
    writer: str | None,
    producer: str | None,
    compute_stats: bool,
    md5: bool,
    workers: int | None,
    progress: bool | None,
    follow_symlinks: bool,
    max_metadata_size: str | None,
) -> None:
    """Catalog one or more dump trees (DUMP_DIR: the dump `path`; its producer is detected)."""
    _spare_pandas()
    from ingest.storage.flat import open_writer_connection
    from ingest.storage.writer_warm_up import warm_up_writer

    # the writer's DuckDB gets ready while the rest is imported and the dump scanned
    warm_up_writer(open_writer_connection)
    from catalog.api import Catalog
    from catalog.cli.progress import ProgressBar, show_progress
    from ingest.pipeline import default_run_name, detect_dump
    from ingest.progress import count_files
    from ingest.storage.store import check_writer_name

    if run is not None and len(dump_dirs) > 1:
        _fail("--run names a single dump; give one DUMP_DIR per run or leave --run out")
    if writer is not None:
        check_writer_name(writer)
    detections = [detect_dump(d, producer) for d in dump_dirs]  # all readable before a catalog is made
    cat = Catalog.open(catalog_path, create=True)
    show_bar = show_progress(progress)
    for dump_dir, detection in zip(dump_dirs, detections, strict=True):
        click.echo(f"{dump_dir}: {detection.description}")
        # labelled with the run's name in the catalog (ingest_dump names it so)
        label = f"ingest run {run or default_run_name(detection.root)!r}"
        with ProgressBar(label, "files", enabled=show_bar) as bar:
            if show_bar:  # a quick count first: the bar gets a total and an ETA (docs/cli.md)
                bar.phase("counting files")
                bar.total(count_files(dump_dir))
            s = cat.ingest(
                dump_dir, run, producer=detection.reader.name, compute_stats=compute_stats, md5=md5,
                workers=workers, on_progress=bar.on_progress, writer=writer,
                follow_symlinks=follow_symlinks, max_metadata_size=max_metadata_size, detection=detection,
            )  # fmt: skip
        rate = s.files_seen / s.seconds if s.seconds > 0 else 0.0
        click.echo(
            f"run {s.run!r} ({s.dump_root}): {s.files_seen} files seen, {s.tensors} new tensors, "
            f"{s.stat_rows} statistic rows, {s.computed_stats} computed stats, {s.ops} ops, "
            f"{s.errors} errors in {s.seconds:.2f} s ({rate:,.0f} files/s)"
        )
        if s.errors:
            click.echo(f'  see: dumpcat sql {catalog_path} "SELECT * FROM ingest_errors"')


@main.command()
@click.argument("catalog_path", metavar="CAT")
@click.argument("query")
@FORMAT_OPTION
def sql(catalog_path: str, query: str, fmt: str) -> None:
    """Run a SQL QUERY against the catalog's views (stats, tensors, ops, ...)."""
    cat = _open(catalog_path)
    result = cat.sql(query)
    _print_table(result, fmt)


@main.command()
@click.argument("catalog_path", metavar="CAT")
@click.argument("row_id", type=int)
@click.option(
    "--out",
    "-o",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the tensor to this .npy file.",
)
@click.option(
    "--device-layout",
    is_flag=True,
    help="A raw Ascend slot in its dumped device layout (NC1HWC0, FRACTAL_NZ, ...), not the host layout.",
)
def tensor(catalog_path: str, row_id: int, out: Path | None, device_layout: bool) -> None:
    """Fetch the tensor with ROW_ID: print it, or save it with --out."""
    import numpy as np

    cat = _open(catalog_path)
    path, _ = cat.locate(row_id)
    try:
        array = cat.tensor(row_id, layout="device" if device_layout else "host")
    except ValueError as exc:  # the file changed since it was cataloged
        _fail(f"cannot read tensor {row_id}: {exc}")
    if out is not None:
        np.save(out, np.asarray(array))
        click.echo(f"wrote {out} (shape {tuple(array.shape)}, {array.dtype})")
        return
    click.echo(f"# {path}")
    click.echo(f"# shape {tuple(array.shape)}, dtype {array.dtype}")
    with np.printoptions(threshold=200, edgeitems=3):
        click.echo(np.array2string(np.asarray(array)))


@main.command()
@click.argument("dump_dir", type=click.Path(path_type=Path))
@CATALOG_OPTION
@RUN_OPTION
@WRITER_OPTION
@PRODUCER_OPTION
@click.option("--poll", is_flag=True, help="Poll the file system instead of inotify (network file systems).")
@click.option(
    "--interval",
    type=float,
    default=0.5,
    show_default=True,
    help="Seconds between flushes: new tensors are queryable about this long after they are complete.",
)
@click.option(
    "--reconcile",
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds between full reconciliation scans (catch events the OS dropped).",
)
@click.option(
    "--grace",
    type=float,
    default=10.0,
    show_default=True,
    help="Seconds a file may stay incomplete before it is judged (and, if bad, reported).",
)
@STATS_OPTION
@FOLLOW_SYMLINKS_OPTION
@MAX_METADATA_OPTION
def watch(
    dump_dir: Path,
    catalog_path: Path,
    run: str | None,
    writer: str | None,
    producer: str | None,
    poll: bool,
    interval: float,
    reconcile: float,
    grace: float,
    compute_stats: bool,
    follow_symlinks: bool,
    max_metadata_size: str | None,
) -> None:
    """Keep the catalog current while training writes DUMP_DIR (until Ctrl-C or SIGTERM)."""
    _spare_pandas()
    import signal

    from ingest.watch import Watcher

    watcher = Watcher(
        catalog_path,
        dump_dir,
        run,
        poll=poll,
        interval=interval,
        reconcile_every=reconcile,
        grace=grace,
        compute_stats=compute_stats,
        producer=producer,
        writer=writer,
        follow_symlinks=follow_symlinks,
        max_metadata_size=max_metadata_size,
    )

    def _stop(signum, frame):
        watcher.request_stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    click.echo(
        f"watching {watcher.root} as run {watcher.run!r} into {catalog_path} (Ctrl-C to stop); "
        f"producer: {watcher.detected}",
        err=True,
    )
    watcher.start()
    last = time.monotonic()
    while watcher.running():
        time.sleep(0.2)
        if time.monotonic() - last >= 10 and watcher.running():
            st = watcher.status()
            click.echo(
                f"{st['tensors']} tensors, {st['pending']} pending, {st['errors']} errors, "
                f"lag {st['lag_seconds']:.1f} s, {st['mode']}",
                err=True,
            )
            last = time.monotonic()
    watcher.stop()
    st = watcher.status()
    click.echo(f"stopped: {st['tensors']} tensors, {st['pending']} pending, {st['errors']} errors", err=True)


def _watchers_text(merged: dict) -> str:
    """The `watcher` column of `dumpcat status`: the run's watcher, or each writer's."""
    if not merged:
        return "none"

    def one(w: dict) -> str:
        return f"{w.get('mode')} (pid {w.get('pid')})" if w.get("alive") else "stopped"

    watchers = merged.get("watchers", [merged])
    if len(watchers) == 1 and not watchers[0].get("writer"):
        return one(watchers[0])
    return ", ".join(f"{w.get('writer') or 'default'}: {one(w)}" for w in watchers)


@main.command()
@click.argument("catalog_path", metavar="CAT")
@FORMAT_OPTION
def status(catalog_path: str, fmt: str) -> None:
    """Per run: files ingested, pending and in error, and the watcher's lag."""
    import pyarrow as pa

    from catalog.views import query_text
    from ingest.watch import read_status

    cat = _open(catalog_path)
    watchers = read_status(catalog_path)
    rows = []
    for c in cat.sql(query_text("status")).to_pylist():
        w = watchers.get(c["run"], {})
        alive = w.get("alive", False)
        pending = w.get("pending", 0) if alive else 0
        rows.append({
            "run": c["run"],
            "files_seen": c["ingested"] + c["errors"] + pending,
            "ingested": c["ingested"],
            "tensors": c["tensors"],
            "pending": pending,
            "errors": c["errors"],
            "watcher": _watchers_text(w),
            "lag_seconds": w.get("lag_seconds") if alive else None,
            "last_flush": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(w["last_flush"])) if w else None,
        })  # fmt: skip
    empty = pa.table({"run": pa.array([], pa.string())})
    _print_table(pa.Table.from_pylist(rows) if rows else empty, fmt)


@main.command()
@click.argument("catalog_path", metavar="CAT")
@click.option(
    "--line",
    "line_spec",
    default=None,
    metavar="FILE:LINE",
    help="A source line, e.g. train.py:58 (the file may be a path or its tail).",
)
@click.option("--code", default=None, help='A fragment of a source line, e.g. "self.conv3(".')
@FORMAT_OPTION
def where(catalog_path: str, line_spec: str | None, code: str | None, fmt: str) -> None:
    """List the operators a source line created and their tensors' row ids per iteration."""
    if (line_spec is None) == (code is None):
        _fail("give exactly one of --line FILE:LINE or --code TEXT")
    file = line = None
    if line_spec is not None:
        file, sep, number = line_spec.rpartition(":")
        if not sep or not file or not number.isdigit():
            _fail(f"--line wants FILE:LINE, e.g. train.py:58; got {line_spec!r}")
        line = int(number)
    cat = _open(catalog_path)
    result = cat.where(file=file, line=line, code=code)
    if result.num_rows == 0:
        click.echo(
            "no operator was created by that line (is the graph IR in the dump? see `ir_nodes`)", err=True
        )
    _print_table(result, fmt)


@main.command()
@click.argument("catalog_path", metavar="CAT")
@click.option("--run", default=None, help="Only this run.")
@click.option(
    "--by-graph",
    is_flag=True,
    help="Each kernel graph's own first anomaly (several per step with control flow), not the step's.",
)
@click.option(
    "--by-rank",
    is_flag=True,
    help="Only the per-rank rows: no origin table first on a multi-rank run.",
)
@FORMAT_OPTION
def anomalies(catalog_path: str, run: str | None, by_graph: bool, by_rank: bool, fmt: str) -> None:
    """The first output that holds NaN or Inf in each step (run, rank, iteration), in the order the
    step executed across all its kernel graphs, with the source line that made it. On a multi-rank
    run the table prints which rank started it first (`nan_origin`): the origin rank's operator and
    line, and the collectives through which the other ranks received it."""
    cat = _open(catalog_path)
    if fmt == "table" and not by_rank and not by_graph:
        from catalog.views import query_text

        origins = cat.sql(query_text("anomalies_origin"), {"run": run})
        if origins.num_rows:
            click.echo("Which rank started it (nan_origin):")
            _print_table(origins, fmt)
            click.echo("\nFirst anomaly of each rank (first_anomaly):")
    result = cat.anomalies(run, by_graph=by_graph)
    _print_table(result, fmt)
    if fmt == "table" and result.num_rows:
        _note_dtype_mismatches(cat, run, by_graph)
    if not by_graph and fmt == "table" and result.num_rows:
        spread = (
            cat.sql(
                "SELECT max(anomalous_graphs) FROM first_anomaly WHERE $run IS NULL OR run = $run",
                {"run": run},
            )
            .column(0)[0]
            .as_py()
        )
        if spread > 1:
            click.echo(
                f"(NaN/Inf reached up to {spread} kernel graphs in one step; "
                "`dumpcat anomalies --by-graph` lists the first anomaly of each graph)",
                err=True,
            )


def _note_dtype_mismatches(cat: Catalog, run: str | None, by_graph: bool) -> None:
    """Say when an answer's tensor file holds data of another dtype than its name says."""
    from catalog.cli.output import printable

    view = "first_anomaly_by_graph" if by_graph else "first_anomaly"
    rows = cat.sql(
        f"SELECT a.op_name, a.iteration FROM {view} a JOIN stats s ON s.row_id = a.row_id "
        "WHERE s.mismatch = 'dtype' AND ($run IS NULL OR a.run = $run) ORDER BY a.iteration",
        {"run": run},
    ).to_pylist()
    for row in rows:
        click.echo(
            f"(iteration {row['iteration']}, {printable(row['op_name'])}: the file is named float16 but "
            "holds float32 data, a float32 kernel's buffer MindSpore dumped as float16; its statistics "
            "are of the float32 data, stats.mismatch = 'dtype')",
            err=True,
        )


def _int_list(text: str | None) -> list[int] | None:
    """`0,2,5-7` -> [0, 2, 5, 6, 7]."""
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            out.extend(range(int(lo), int(hi) + 1) if hi else [int(lo)])
        except ValueError:
            raise click.BadParameter(f"{part!r} is not a number or a range like 2-5") from None
    return out


@main.command()
@click.argument("catalog_path", metavar="CAT")
@click.argument("run")
@click.argument("baseline")
@click.option("--iterations", default=None, help="Only these iterations, e.g. 0,3,10-12.")
@click.option("--ranks", default=None, help="Only these ranks, e.g. 0-7.")
@click.option(
    "--mapping",
    type=click.Path(path_type=Path),
    default=None,
    help="CSV with columns op_name,baseline_op_name for operators whose names differ between the runs.",
)
@click.option(
    "--workers", type=int, default=None, help="Processes computing metrics (default: one per core)."
)
@SPARK_OPTION
@PROGRESS_OPTION
@FORMAT_OPTION
def compare(
    catalog_path: str, run: str, baseline: str, iterations: str | None, ranks: str | None,
    mapping: Path | None, workers: int | None, spark_master: str | None, progress: bool | None, fmt: str,
) -> None:  # fmt: skip
    """Compare the tensors of RUN with those of BASELINE (two runs of one catalog): cosine, errors,
    KL divergence and more per pair, stored in `comparisons`; then print each step's first divergence."""
    _spare_pandas()
    from catalog.cli.progress import ProgressBar, show_progress
    from catalog.compare import CompareError
    from catalog.spark.jobs import SparkJobError

    if spark_master is not None and workers is not None:
        raise click.UsageError("--workers is for local processes; with --spark every executor core works")
    cat = _open(catalog_path)
    try:
        label = f"compare {run!r} with {baseline!r}"
        with ProgressBar(label, "pairs", enabled=show_progress(progress)) as bar:
            summary = cat.compare(
                run, baseline, iterations=_int_list(iterations), ranks=_int_list(ranks), mapping=mapping,
                workers=workers, spark=spark_master, on_progress=bar.on_progress,
            )  # fmt: skip
    except (CompareError, SparkJobError) as exc:
        _fail(" ".join(str(exc).split()))
    click.echo(summary.line(), err=True)
    result = cat.sql(
        "SELECT rank, iteration, op_name, io, slot, reason, cosine, max_abs_err, source_line, source_code "
        "FROM first_divergence() WHERE run = $run AND baseline_run = $baseline ORDER BY rank, iteration",
        {"run": run, "baseline": baseline},
    )
    _print_table(result, fmt)
    if result.num_rows == 0 and fmt == "table":
        _say_first_difference(cat, run, baseline)


def _say_first_difference(cat: Catalog, run: str, baseline: str) -> None:
    """An empty first_divergence is the usual fp16/bf16 drift below the tolerances: say so, and
    where the runs first differ at all, rather than leave the user with `(0 rows)`."""
    from catalog.cli.output import printable
    from catalog.views import query_text

    rows = cat.sql(query_text("first_difference"), {"run": run, "baseline": baseline}).to_pylist()
    if not rows:
        return
    r = rows[0]
    head = "(no output breaks the tolerances (cosine < 0.99, max_abs_err > 0.001)"
    if r["op_name"] is None:
        click.echo(f"{head}: the {r['compared']:,} compared outputs are identical)", err=True)
        return
    cosine = "NULL" if r["cosine"] is None else f"{r['cosine']:.6g}"
    click.echo(
        f"{head}; {r['differing']:,} of {r['compared']:,} compared outputs differ, the first in "
        f"execution order: {printable(r['op_name'])} output {r['slot']} (rank {r['rank']}, "
        f"iteration {r['iteration']}), "
        f"max_abs_err {r['max_abs_err']:.6g}, cosine {cosine}. "
        "`SELECT * FROM first_divergence(max_abs := 0)` gives each step's first difference)",
        err=True,
    )


@main.command()
@click.argument("catalog_path", metavar="CAT")
@click.option("--run", default=None, help="Only this run (default: every run).")
@SPARK_OPTION
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    default=None,
    help="Local processes computing statistics (default: one per core, at most 8).",
)
@click.option("--md5", is_flag=True, help="Also compute the md5 of each tensor's bytes.")
@PROGRESS_OPTION
def stats(
    catalog_path: str, run: str | None, spark_master: str | None, workers: int | None, md5: bool,
    progress: bool | None,
) -> None:  # fmt: skip
    """Compute statistics from tensor data for every cataloged tensor that has none yet (a run ingested
    with --no-stats) and commit them, as `ingest --stats` would have; a re-run does what is left."""
    _spare_pandas()
    from catalog.cli.progress import ProgressBar, show_progress
    from catalog.missing_stats import StatsError
    from catalog.spark.jobs import SparkJobError

    if spark_master is not None and workers is not None:
        raise click.UsageError("--workers is for local processes; with --spark every executor core works")
    cat = _open(catalog_path)
    label = "stats" if run is None else f"stats of run {run!r}"
    try:
        with ProgressBar(label, "tensors", enabled=show_progress(progress)) as bar:
            summary = cat.compute_stats(
                run, spark=spark_master, workers=workers, md5=md5, on_progress=bar.on_progress
            )
    except (StatsError, SparkJobError) as exc:
        _fail(" ".join(str(exc).split()))
    for line in summary.lines():
        click.echo(line)
    click.echo(summary.line(), err=True)


@main.command()
@click.argument("catalog_path", metavar="CAT")
@click.option("--run", default=None, help="The run to report (default: the catalog's only run).")
@click.option(
    "--against",
    "baseline",
    default=None,
    metavar="BASELINE",
    help="Also show the comparison with this run (after `dumpcat compare CAT RUN BASELINE`).",
)
@click.option(
    "--out",
    "-o",
    "out",
    required=True,
    type=click.Path(path_type=Path),
    help="The HTML file to write (self-contained: opens offline).",
)
def report(catalog_path: str, run: str | None, baseline: str | None, out: Path) -> None:
    """Write a self-contained HTML report of a run: first anomaly of every step, a heat map of
    NaN/Inf by operator and iteration, trend lines, ingest errors, and the comparison with a
    baseline."""
    from catalog.report import ReportError

    cat = _open(catalog_path)
    try:
        summary = cat.report(out, run, against=baseline)
    except ReportError as exc:
        _fail(str(exc))
    click.echo(summary.line())


@main.command()
@click.argument("catalog_path", metavar="CAT")
def views(catalog_path: str) -> None:
    """List the views and their columns."""
    from catalog.views import USER_VIEWS

    cat = _open(catalog_path)
    for name, description in USER_VIEWS.items():
        cols = cat.sql(f"DESCRIBE {name}")
        click.echo(f"{name}: {description}")
        for col, typ in zip(
            cols.column("column_name").to_pylist(), cols.column("column_type").to_pylist(), strict=True
        ):
            click.echo(f"    {col} {typ}")


@main.command("export-duckdb")
@click.argument("catalog_path", metavar="CAT")
@click.argument("out_path", metavar="OUT.duckdb", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--materialize",
    is_flag=True,
    help="Copy the rows into tables (self-contained file) instead of views over the parquet files.",
)
@click.option(
    "--storage-version",
    default="v1.0.0",  # catalog.export.DEFAULT_STORAGE_VERSION (tests/catalog/cli/test_cli.py checks)
    show_default=True,
    help="DuckDB storage format; v1.0.0 opens in DuckDB 1.0+, 'latest' only in DuckDB 2.",
)
def export_duckdb_cmd(catalog_path: str, out_path: Path, materialize: bool, storage_version: str) -> None:
    """Write the catalog's views to a DuckDB database file (for SQLAlchemy tools and DuckDB clients)."""
    from catalog.export import export_duckdb

    summary = export_duckdb(
        catalog_path,
        out_path,
        materialize=materialize,
        storage_version=None if storage_version == "latest" else storage_version,
    )
    click.echo(summary.line())


@main.command()
@click.argument("catalog_path", metavar="CAT")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port", default=5433, show_default=True, type=click.IntRange(0, 65535), help="Port (0: any free one)."
)
@click.option(
    "--watch",
    "watch_dir",
    default=None,
    type=click.Path(exists=True, file_okay=False),
    help="Also keep this dump root's run current while serving.",
)
@click.option("--run", default=None, help="Run name for --watch (default: the folder's name).")
@click.option(
    "--user",
    default=None,
    envvar="DUMPCAT_USER",
    show_envvar=True,
    help="Require this user name (with --password); without it only loopback clients are served.",
)
@click.option(
    "--password",
    default=None,
    envvar="DUMPCAT_PASSWORD",
    show_envvar=True,
    help="Password for --user. On the command line it is visible to `ps`: prefer the variable or "
    "--password-file.",
)
@click.option(
    "--password-file",
    default=None,
    envvar="DUMPCAT_PASSWORD_FILE",
    show_envvar=True,
    metavar="FILE",
    help="Read the password for --user from FILE (one line; a Docker or Kubernetes secret).",
)
@click.option(
    "--auth",
    type=click.Choice(["scram-sha-256", "md5"]),
    default="scram-sha-256",
    show_default=True,
    help="How clients prove the password.",
)
@click.option(
    "--tls-cert",
    default=None,
    envvar="DUMPCAT_TLS_CERT",
    show_envvar=True,
    type=click.Path(exists=True, dir_okay=False),
    help="PEM certificate: serve TLS to clients that ask (with --tls-key).",
)
@click.option(
    "--tls-key",
    default=None,
    envvar="DUMPCAT_TLS_KEY",
    show_envvar=True,
    type=click.Path(exists=True, dir_okay=False),
    help="PEM key of --tls-cert.",
)
@click.option(
    "--query-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds each statement may run, every protocol phase included (error 57014).",
)
@click.option(
    "--max-rows",
    default=100_000,
    show_default=True,
    type=click.IntRange(min=1),
    help="Rows per result; more is an error (54000: add a LIMIT).",
)
@click.option(
    "--max-result-bytes",
    default="256MiB",
    show_default=True,
    help="Largest result sent to a client (DataRow bytes); more is an error.",
)
@click.option(
    "--max-concurrent",
    default=4,
    show_default=True,
    type=click.IntRange(min=1),
    help="Statement worker processes: statements running at once.",
)
@click.option(
    "--memory-limit",
    default="1GB",
    show_default=True,
    help="Per statement: DuckDB's memory limit and each worker's address-space budget.",
)
@click.option(
    "--idle-timeout",
    default=600.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a session may stay idle before it is closed.",
)
@click.option(
    "--send-timeout",
    default=30.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a client may take to read what was sent to it; then its session is closed.",
)
@click.option(
    "--max-connections",
    default=128,
    show_default=True,
    type=click.IntRange(min=1),
    help="Logged-in sessions at once; idle ones (or ones blocked on a client) make room when full.",
)
@click.option(
    "--max-pending",
    default=64,
    show_default=True,
    type=click.IntRange(min=1),
    help="Connections still logging in, apart from --max-connections; the oldest is closed when full.",
)
@click.option(
    "--session-memory",
    default="16MiB",
    show_default=True,
    help="Bytes one session may hold in prepared statements, settings and temporary views.",
)
@click.option(
    "--buffer-memory",
    default="512MiB",
    show_default=True,
    help="Bytes the server's main process may hold for all sessions together: their texts, rows "
    "buffered for row-limited portals and cursors, large protocol messages (53200 beyond).",
)
@click.option(
    "--login-timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds a connection may take to start up and authenticate.",
)
@click.option(
    "--reads",
    type=click.Choice(["auto", "arrow"]),
    default="auto",
    show_default=True,
    help="How the workers read the catalog: auto = DuckDB reads its parquet files itself where the "
    "kernel can make each worker unable to write any file (Linux Landlock), else through Arrow "
    "datasets; arrow = always through Arrow datasets (about 2x slower per query).",
)
@FOLLOW_SYMLINKS_OPTION
@MAX_METADATA_OPTION
def serve(
    catalog_path: str,
    host: str,
    port: int,
    watch_dir: str | None,
    run: str | None,
    user: str | None,
    password: str | None,
    password_file: str | None,
    auth: str,
    tls_cert: str | None,
    tls_key: str | None,
    query_timeout: float,
    max_rows: int,
    max_result_bytes: str,
    max_concurrent: int,
    memory_limit: str,
    idle_timeout: float,
    send_timeout: float,
    max_connections: int,
    max_pending: int,
    session_memory: str,
    buffer_memory: str,
    login_timeout: float,
    reads: str,
    follow_symlinks: bool,
    max_metadata_size: str | None,
) -> None:
    """Serve the catalog, read-only, over the PostgreSQL wire protocol (psql, JDBC, ODBC, BI tools).

    Client SQL runs in contained worker processes: queries over the catalog's views only, no file
    access, every phase under --query-timeout, memory capped per statement.
    """
    from catalog.server.credentials import PASSWORD_ENV, CredentialsError, resolve_password
    from catalog.server.server import Limits, parse_users
    from catalog.server.server import serve as run_server
    from catalog.server.statement_worker import parse_size
    from catalog.server.worker_pool import WorkerStartError

    if (tls_cert is None) != (tls_key is None):
        _fail("--tls-cert and --tls-key go together")
    try:
        password = resolve_password(password, password_file)
    except CredentialsError as exc:
        _fail(str(exc))
    # The statement workers (which run client SQL) and the watcher inherit this environment.
    os.environ.pop(PASSWORD_ENV, None)
    try:
        limits = Limits(
            query_timeout=query_timeout, max_rows=max_rows, max_result_bytes=parse_size(max_result_bytes),
            max_concurrent=max_concurrent, memory_limit=memory_limit, idle_timeout=idle_timeout,
            max_connections=max_connections, send_timeout=send_timeout, max_pending=max_pending,
            login_timeout=login_timeout, session_memory=parse_size(session_memory),
            buffer_memory=parse_size(buffer_memory),
        )  # fmt: skip
        limits.validate()
        run_server(
            catalog_path,
            host,
            port,
            parse_users(user, password),
            (tls_cert, tls_key) if tls_cert else None,
            watch_dir,
            run=run,
            auth=auth,
            limits=limits,
            watch_options={"follow_symlinks": follow_symlinks, "max_metadata_size": max_metadata_size},
            reads=reads,
        )
    except (ValueError, WorkerStartError) as exc:  # bad options; workers that cannot start
        _fail(str(exc))


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address of the server.")
@click.option("--port", default=5433, show_default=True, type=click.IntRange(1, 65535), help="Its port.")
@click.option("--user", default=None, envvar="DUMPCAT_USER", show_envvar=True, help="User to log in as.")
@click.option(
    "--password-file",
    default=None,
    envvar="DUMPCAT_PASSWORD_FILE",
    show_envvar=True,
    metavar="FILE",
    help="Read the password from FILE (else from DUMPCAT_PASSWORD; there is no --password, which "
    "would put it on the command line).",
)
@click.option(
    "--timeout",
    default=10.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Seconds for the whole check.",
)
def healthcheck(host: str, port: int, user: str | None, password_file: str | None, timeout: float) -> None:
    """Exit 0 if a running `dumpcat serve` logs in and answers a query over the catalog, else 1 with
    the reason (the Docker image's HEALTHCHECK)."""
    from catalog.server.credentials import PASSWORD_ENV, CredentialsError, resolve_password
    from catalog.server.healthcheck import HealthcheckError, check

    try:
        password = resolve_password(os.environ.get(PASSWORD_ENV) or None, password_file)
        runs = check(host, port, user, password, timeout)
    except (CredentialsError, HealthcheckError) as exc:
        _fail(f"unhealthy: {exc}")
    click.echo(f"healthy: {host}:{port} answered a query over the catalog (runs: {runs})")


if __name__ == "__main__":
    main()
