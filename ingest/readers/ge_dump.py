"""GE graph-mode dumps: TorchAir/GE (`worldsize{W}_global_rank{R}/`), msprobe's TorchAir wrappers,
and ATC offline-model (om) dumps.

Layouts (reference msprobe-cann-formats.md §2.1, §2.3, §2.4):
- GE / TorchAir `dump_config`: `{dump_path}/worldsize{W}_global_rank{R}/{time}/{device}/{model_name}/
  {model_id}/{step}/` holding raw dump files (the Ascend raw decoder; read on every core as for the
  rank layout) and, with `dump_data: "stats"`, one CANN statistics CSV per operator execution
  (`{op_type}.{op_name}.{task}.{stream}.{timestamp}.csv`);
- msprobe `set_ge_dump_config`: the same under `{dump_path}/msprobe_ge_dump/` (the last level is a
  token, read as the iteration), with the GE graphs TorchAir wrote (`dynamo_original_*.txt`,
  `dynamo_optimized_*.txt`, protobuf text) whose `_fx_tensor_name` attributes map GE ops to FX
  tensors; msprobe `set_fx_dump_config`: `{dump_path}/msprobe_fx_dump/worldsize{W}_global_rank{R}/
  {model_name}/{token}/{node}-{aten op}.{INPUT|OUTPUT}.{i}.{timestamp}.npy` (TorchAir eager FX);
- ATC/om offline model: `{time}/{device}/{om_model_name}/{model_id}/{data_index}/` (`OmDumpReader`).

Rows: rank is the global rank (om: the device id), net the model name, graph_id the model id,
iteration the step (or token, or data index). A CANN statistics CSV row becomes a `stat_rows` row
with stat_source 'cann_stats_csv' and stat_semantics 'cann' (max/min skip NaN; see sql/40_stats.sql);
it points at the raw dump's slot when the raw file is beside it. FX npy files are `tensors` rows
(producer 'torchair-fx'); `_fx_tensor_name` links become `fx_links` rows.
"""

from __future__ import annotations

import datetime as dt
import os
import re
from pathlib import Path

import numpy as np
import pyarrow as pa

from ingest.files import size_or_none
from ingest.formats.ascend.cann_stats_csv import CannStatsError, parse_stats_csv_name, read_cann_stats_csv
from ingest.formats.ascend.ge_graph import GeGraphError, read_ge_graph
from ingest.formats.ascend.raw_dump import RawName
from ingest.formats.mindspore.npy_name import without_op_index
from ingest.formats.npy_header import NpyHeaderError, read_npy_header
from ingest.formats.numbers import INT32_MAX, parse_uint
from ingest.formats.tensor_data import FORTRAN_ORDER
from ingest.ids import stat_row_ids
from ingest.readers.ascend_raw import RawFiles, RawLeafFiles, is_raw_name, slot_row_id
from ingest.readers.base import Detection, Place, Reader, first_file, list_dir
from ingest.readers.mindspore_npy import LeafEngine
from ingest.readers.rank_layout import IngestLeaf
from ingest.readers.sink import IngestSink
from ingest.storage.schema import TABLES, conform

_RANK_ROOT = re.compile(r"^worldsize(\d+)_global_rank(\d+)$")
_TIME_DIR = re.compile(r"^\d{14}$")
_NUMBER = re.compile(r"^\d+$")
_GE_GRAPH = re.compile(r"^dynamo_(original|optimized)_.*\.txt$")
_GRAPH_RANK = re.compile(r"_rank_(\d+)_")
_FX_FILE = re.compile(
    r"^(?P<node>[^-]+)-(?P<target>.+)\.(?P<io>INPUT|OUTPUT)\.(?P<idx>\d+)\.(?P<ts>\d+)\.npy$"
)
GE_DUMP_DIR = "msprobe_ge_dump"
FX_DUMP_DIR = "msprobe_fx_dump"


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False


def _is_leaf_file(name: str) -> bool:
    return is_raw_name(name) or parse_stats_csv_name(name) is not None


def _fx_timestamp_us(text: str) -> int | None:
    """FX dump timestamps are YYYYMMDDHHMMSS plus microseconds: as µs since the epoch (UTC)."""
    if len(text) != 20:
        return None
    try:
        when = dt.datetime.strptime(text[:14], "%Y%m%d%H%M%S").replace(tzinfo=dt.UTC)
    except ValueError:
        return None
    return int(when.timestamp()) * 1_000_000 + int(text[14:])


_DECODERS = (
    "ingest.formats.ascend.cann_stats_csv",
    "ingest.formats.ascend.ge_graph",
)


class CannStatsCsvFiles:
    """Catalogs CANN statistics CSVs (`dump_data: "stats"`), one per operator execution, found in
    the leaf directories of GE and om dumps beside the raw files."""

    def __init__(self, sink: IngestSink) -> None:
        self.sink = sink

    def handle(self, place: Place, entry: os.DirEntry) -> bool:
        """Catalog `entry` if it is a CANN statistics CSV; True when it was."""
        name = parse_stats_csv_name(entry.name) if entry.name.endswith(".csv") else None
        if name is None:
            return False
        self._read(place, entry, name)
        return True

    def _read(self, place: Place, entry: os.DirEntry, name: RawName) -> None:
        sink = self.sink
        rel = sink.rel(entry.path)
        size = size_or_none(entry) or 0
        if sink.is_unchanged(rel, size):
            return
        try:
            rows, problems = read_cann_stats_csv(entry.path, sink.options.caps)
        except (CannStatsError, OSError, UnicodeDecodeError) as exc:
            if not sink.still_written(entry, rel):
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                sink.file_error(rel, "cann_stats_csv", "cann_stats_csv", reason, size)
            return
        if problems and sink.still_written(entry, rel):
            return  # a short last line may still be being written
        for line_no, reason in problems:
            sink.error(f"{rel}:{line_no}", "cann_stats_csv", reason, size)
        raw_name = entry.name[: -len(".csv")]
        rel_dir = rel.rsplit("/", 1)[0]
        raw_beside = os.path.exists(os.path.join(os.path.dirname(entry.path), raw_name))
        n = len(rows)
        if n:
            # stat_rows column <- CannStatRow field
            fields = {
                "line_no": "line_no", "io": "io", "slot": "index", "data_size": "data_size",
                "data_type": "data_type", "format": "format", "max": "max", "min": "min", "avg": "avg",
                "count": "count", "nan_count": "nan_count", "neg_inf_count": "neg_inf_count",
                "pos_inf_count": "pos_inf_count", "l2norm": "l2norm", "md5": "md5",
            }  # fmt: skip
            cols: dict[str, list] = {column: [getattr(r, f) for r in rows] for column, f in fields.items()}
            cols["shape"] = [None if r.shape is None else list(r.shape) for r in rows]
            row_id_of = sink.options.row_id_of
            cols["row_id"] = [
                slot_row_id(row_id_of, f"{rel_dir}/{raw_name}", r.io, r.index) if raw_beside else None
                for r in rows
            ]
            schema = TABLES["stat_rows"]
            arrays = {k: pa.array(v, schema.field(k).type) for k, v in cols.items()}
            arrays["stat_id"] = pa.array(
                stat_row_ids(sink.options.run, rel, np.asarray(cols["line_no"])), pa.int64()
            )
            constants = (
                ("run", sink.options.run), ("rank", place.rank), ("net", place.net),
                ("graph_id", place.graph_id), ("iteration", place.iteration), ("csv_path", rel),
                ("op_type", name.op_type),
                ("file_op_name", name.op_name), ("file_op_base", without_op_index(name.op_name)),
                ("task_id", name.task_id), ("stream_id", name.stream_id), ("timestamp_us", name.timestamp_us),
                ("stat_source", "cann_stats_csv"), ("stat_semantics", "cann"),
            )  # fmt: skip
            for column, value in constants:
                arrays[column] = pa.array([value] * n, schema.field(column).type)
            sink.add_stat_chunk(conform(pa.table(arrays), schema))
        sink.judged(rel)
        sink.record(rel, "cann_stats_csv", size, size, len(rows), "ok")
        sink.flush_if_full()


class GeTree:
    """Walks GE / TorchAir trees: the `{time}/{device}/{model}/{model_id}/{step}/` leaves (given to
    `ingest_leaf`, the reader's), msprobe's FX dumps and the GE graphs. Both GE readers use it: a GE
    dump walks from its rank roots (`walk`), an om dump from its time folders (`time_tree`)."""

    def __init__(self, sink: IngestSink, root: Path, ingest_leaf: IngestLeaf) -> None:
        self.sink = sink
        self.root = root
        self.ingest_leaf = ingest_leaf

    def walk(self) -> None:
        """A GE rank root, or the folders of a GE / msprobe dump path."""
        root = str(self.root)
        m = _RANK_ROOT.match(os.path.basename(root))
        if m:
            self.time_tree(root, int(m.group(2)), ge_rank=True)
            return
        for entry in self.sink.scandir(root) or []:
            m = _RANK_ROOT.match(entry.name)
            if m and _is_dir(entry):
                self.time_tree(entry.path, int(m.group(2)), ge_rank=True)
            elif entry.name == GE_DUMP_DIR and _is_dir(entry):
                for inner in self.sink.scandir(entry.path) or []:
                    m = _RANK_ROOT.match(inner.name)
                    if m and _is_dir(inner):
                        self.time_tree(inner.path, int(m.group(2)), ge_rank=True)
                    else:
                        self._unexpected(inner, "expected worldsize{W}_global_rank{R}/")
            elif entry.name == FX_DUMP_DIR and _is_dir(entry):
                self._fx_tree(entry.path)
            elif _GE_GRAPH.match(entry.name) and not _is_dir(entry):
                self._ge_graph(entry)
            else:
                self._unexpected(entry, "not part of a GE, msprobe_ge_dump or msprobe_fx_dump tree")

    def _unexpected(self, entry: os.DirEntry, why: str) -> None:
        self.sink.saw_files(1)
        self.sink.file_error(self.sink.rel(entry.path), "unknown", "walk", why)

    def _dirs(self, path: str, pattern: re.Pattern | None, what: str) -> list[os.DirEntry]:
        out = []
        for entry in self.sink.scandir(path) or []:
            if _is_dir(entry) and (pattern is None or pattern.match(entry.name)):
                out.append(entry)
            else:
                self._unexpected(entry, f"expected {what}")
        return out

    def time_tree(self, path: str, rank: int | None, *, ge_rank: bool) -> None:
        """{time}/{device}/{model}/{model_id}/{step}/ below a rank root (om: below the dump path,
        and the device is the rank)."""
        for time_dir in self._dirs(path, _TIME_DIR, "a {YYYYMMDDHHMMSS} folder"):
            for device in self._dirs(time_dir.path, _NUMBER, "a device folder"):
                device_rank = rank if ge_rank else parse_uint(device.name, INT32_MAX)
                for model in self._dirs(device.path, None, "a model folder"):
                    for model_id in self._dirs(model.path, _NUMBER, "a model id folder"):
                        graph_id = parse_uint(model_id.name, INT32_MAX)
                        for step in self._dirs(model_id.path, _NUMBER, "a step folder"):
                            self.ingest_leaf(
                                device_rank, model.name, graph_id, int(step.name), "iteration", step.path
                            )

    # -- TorchAir FX eager dumps -----------------------------------------------------------------

    def _fx_tree(self, path: str) -> None:
        for rank_dir in self._dirs(path, _RANK_ROOT, "worldsize{W}_global_rank{R}/"):
            rank = int(_RANK_ROOT.match(rank_dir.name).group(2))
            for model in self._dirs(rank_dir.path, None, "a model folder"):
                for token in self._dirs(model.path, _NUMBER, "a token folder"):
                    self._fx_leaf(rank, model.name, int(token.name), token.path)

    def _fx_leaf(self, rank: int, model: str, token: int, path: str) -> None:
        sink = self.sink
        entries = sink.scandir(path) or []
        sink.saw_files(len(entries), progress=True)
        rows: list[tuple] = []
        for entry in entries:
            rel = sink.rel(entry.path)
            m = _FX_FILE.match(entry.name)
            if m is None:
                why = "not an FX dump file {node}-{op}.{INPUT|OUTPUT}.{i}.{ts}.npy"
                sink.file_error(rel, "unknown", "walk", why)
                continue
            row_id = sink.options.row_id_of(rel)
            if sink.is_known(row_id):
                continue
            try:
                header, size = read_npy_header(entry.path)
            except (NpyHeaderError, OSError) as exc:
                if not sink.still_written(entry, rel):
                    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                    sink.file_error(rel, "tensor", "tensor", reason, size_or_none(entry))
                continue
            node, target = m.group("node"), m.group("target")
            io, slot, ts = m.group("io").lower(), int(m.group("idx")), _fx_timestamp_us(m.group("ts"))
            sink.judged(rel)
            fmt = FORTRAN_ORDER if header.fortran_order else None
            rows.append(
                (
                    row_id, sink.options.run, rank, model, None, token, "iteration", rel, entry.name, None,
                    target, node, node, None, None, ts, io, slot, fmt, header.dtype_name, header.dtype_name,
                    list(header.shape), header.data_offset, header.nbytes, size, "torchair-fx", "torchair-fx",
                    None, f"{node}-{target}", None,
                )
            )  # fmt: skip
        if rows:
            columns = list(zip(*rows, strict=True))
            schema = TABLES["tensors"]
            arrays = [pa.array(c, f.type) for c, f in zip(columns, schema, strict=True)]
            sink.add_tensor_table(pa.Table.from_arrays(arrays, schema=schema), new_files=len(rows))
        sink.flush_if_full()

    # -- GE graphs (the FX link) -----------------------------------------------------------------

    def _ge_graph(self, entry: os.DirEntry) -> None:
        sink = self.sink
        rel = sink.rel(entry.path)
        size = size_or_none(entry) or 0
        sink.saw_files(1)
        if sink.is_unchanged(rel, size):
            return
        try:
            graph = read_ge_graph(entry.path, sink.options.caps)
        except (GeGraphError, OSError, UnicodeDecodeError) as exc:
            if not sink.still_written(entry, rel):
                sink.file_error(rel, "ge_graph", "ge_graph", str(exc), size)
            return
        m = _GRAPH_RANK.search(entry.name)
        rank = int(m.group(1)) if m else None
        for op in graph.ops:
            for output_index, fx_name in op.fx_tensor_names:
                sink.add(
                    "fx_links",
                    (sink.options.run, rank, rel, graph.name, op.name, op.type, output_index, fx_name),
                )
        sink.record(rel, "ge_graph", size, size, 0, "ok")


def _ge_parts(sink: IngestSink, root: Path) -> tuple[LeafEngine, GeTree]:
    """The components a GE or om reader reads with: the leaf engine, whose policy reads raw files
    and CANN statistics CSVs, and the GE tree walker that hands it the leaves."""
    stats_csv = CannStatsCsvFiles(sink)
    leaves = LeafEngine(sink, RawLeafFiles(sink, RawFiles(sink), handlers=(stats_csv.handle,)))
    return leaves, GeTree(sink, root, leaves.ingest_leaf)


class GeDumpReader(Reader):
    """GE / TorchAir graph dumps, msprobe's GE and FX wrappers."""

    name = "ge"
    producer = "GE / TorchAir graph dump (CANN raw and stats CSV), msprobe TorchAir dumps"
    layout = "worldsize{W}_global_rank{R}/{time}/{device}/{model}/{model_id}/{step}/"
    looked_for = (
        "worldsize{W}_global_rank{R}/{time}/{device}/{model}/{model_id}/{step}/ (GE/TorchAir), "
        "msprobe_ge_dump/ or msprobe_fx_dump/"
    )
    # The docs/producers.md table (tests/producers_table.py renders it from these):
    dumped_by = (
        "GE / TorchAir graph mode (`dump_config`, acl.json), msprobe's `set_ge_dump_config` / "
        "`set_fx_dump_config`"
    )
    tree = (
        "`worldsize{W}_global_rank{R}/{time}/{device}/{model}/{model_id}/{step}/` raw files and "
        "`{op_type}.{op_name}.{task}.{stream}.{timestamp}.csv` stats (also under `msprobe_ge_dump/`); "
        "`msprobe_fx_dump/worldsize{W}_global_rank{R}/{model}/{token}/{node}-{aten "
        "op}.{INPUT|OUTPUT}.{i}.{ts}.npy`; `dynamo_*.txt` GE graphs"
    )
    cataloged = (
        "raw files as for `ascend-raw` (rank: the global rank, net: the model, graph id: the model "
        "id, iteration: the step); a `stats` row per CANN stats CSV row (`stat_semantics = 'cann'`); "
        "FX npy files as tensors; `_fx_tensor_name` links as `fx_links`"
    )
    decoders = _DECODERS

    def __init__(self, sink: IngestSink, detection: Detection) -> None:
        super().__init__(sink, detection)
        self.leaves, self.tree = _ge_parts(sink, self.root)

    @classmethod
    def detect(cls, path: Path) -> Detection | None:
        path = Path(path)
        for where, prefix in ((path, ""), (path / GE_DUMP_DIR, f"{GE_DUMP_DIR}/")):
            for rank in [e for e in list_dir(where, 4096) if _RANK_ROOT.match(e.name) and _is_dir(e)][:4]:
                hit = first_file(rank.path, 5, _is_leaf_file)
                if hit is not None:
                    return Detection(cls, path, f"{prefix}{rank.name}/{hit.rsplit('/', 1)[0]}/", ())
        if _RANK_ROOT.match(path.name):
            hit = first_file(path, 5, _is_leaf_file)
            if hit is not None:
                return Detection(cls, path, f"{path.name}/{hit.rsplit('/', 1)[0]}/", ())
        for rank in [e for e in list_dir(path / FX_DUMP_DIR, 64) if _RANK_ROOT.match(e.name)][:4]:
            hit = first_file(rank.path, 2, lambda n: _FX_FILE.match(n) is not None)
            if hit is not None:
                return Detection(cls, path, f"{FX_DUMP_DIR}/{rank.name}/{hit.rsplit('/', 1)[0]}/", ())
        return None

    def walk(self) -> None:
        self.tree.walk()

    def scan_path(self, path: str) -> None:
        """The whole tree (unchanged files are skipped by the manifest and known row ids)."""
        self.walk()

    def finish(self) -> None:
        self.leaves.finish()


class OmDumpReader(Reader):
    """ATC offline-model dumps: `{time}/{device}/{om_model_name}/{model_id}/{data_index}/`. Read with
    the GE reader's components: only the detection and where the walk starts differ."""

    name = "atc-om"
    producer = "ATC offline-model (om) dump (CANN raw)"
    layout = "{time}/{device}/{om_model}/{model_id}/{data_index}/"
    looked_for = "{YYYYMMDDHHMMSS}/{device}/{om_model}/{model_id}/{data_index}/ raw files (ATC om dump)"
    # The docs/producers.md table (tests/producers_table.py renders it from these):
    dumped_by = "ATC offline-model (om) dumps"
    tree = "`{time}/{device}/{om_model}/{model_id}/{data_index}/{op_type}.{op_name}.{task}.{timestamp}`"
    cataloged = "raw files as for `ascend-raw` (rank: the device id; iteration: the data index)"
    decoders = _DECODERS  # the GE reader's list: the same leaf policy reads CANN statistics CSVs

    def __init__(self, sink: IngestSink, detection: Detection) -> None:
        super().__init__(sink, detection)
        self.leaves, self.tree = _ge_parts(sink, self.root)

    @classmethod
    def detect(cls, path: Path) -> Detection | None:
        for time_dir in [e for e in list_dir(path, 256) if _TIME_DIR.match(e.name) and _is_dir(e)][:4]:
            hit = first_file(time_dir.path, 4, _is_leaf_file)
            parts = hit.split("/") if hit else []
            if len(parts) == 5 and parts[0].isdigit() and parts[2].isdigit() and parts[3].isdigit():
                return Detection(cls, Path(path), f"{time_dir.name}/{hit.rsplit('/', 1)[0]}/", ())
        return None

    def walk(self) -> None:
        self.tree.time_tree(str(self.root), None, ge_rank=False)

    def scan_path(self, path: str) -> None:
        """The whole tree (unchanged files are skipped by the manifest and known row ids)."""
        self.walk()

    def finish(self) -> None:
        self.leaves.finish()
