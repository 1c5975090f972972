"""MindSpore's rank layout, v1.3 onwards: `{path}/rank_N/{net}/{graph_id}/{iteration}/`.

Every MindSpore dump since v1.3 (npy files, and the raw `bin` files of async/O2 dumps) shares this
tree and its rank-level folders: `.dump_metadata/`, `execution_order/` and `graphs/`. This module
walks the tree and reads those folders (`RankLayoutWalker`); what a leaf directory (an iteration or
`constants/`) holds differs by producer, so the reader that uses the walker gives it the function
that reads one (`ingest_leaf`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from ingest.files import now
from ingest.files import size_or_none as _size_or_none
from ingest.formats.limits import MetadataTooLarge
from ingest.formats.mindspore import execution_order, metadata
from ingest.formats.mindspore.npy_name import op_type_of, sanitize_v23, short_name, without_op_index
from ingest.formats.numbers import INT32_MAX, parse_uint
from ingest.readers import graph_rows as graph_rows_mod
from ingest.readers.base import Detection
from ingest.readers.sink import IngestSink

RANK_DIR = re.compile(r"^rank_(\d+)$")
RANK_LAYOUT = "rank_N/{net}/{graph}/{iteration}/"  # the `layout` of the readers that walk it

# Reads one leaf directory: (rank, net, graph_id, iteration or None, dir_kind, path), dir_kind being
# 'iteration' or 'constants' (whose iteration is None).
IngestLeaf = Callable[[int, str, int, int | None, str, str], None]


def rank_dirs(root: Path) -> list[Path]:
    """The rank_N folders of a dump root, in rank order (empty when unreadable)."""
    try:
        found = [Path(e.path) for e in os.scandir(root) if e.is_dir() and RANK_DIR.match(e.name)]
    except OSError:
        return []
    return sorted(found, key=lambda q: int(RANK_DIR.match(q.name).group(1)))


def rank_root(path: Path) -> tuple[Path, list[Path], bool] | None:
    """(dump root, rank folders, single rank given) when `path` is a rank-layout root or one of
    its rank_N folders, else None."""
    if RANK_DIR.match(path.name):
        return path.parent, [path], True
    ranks = rank_dirs(path)
    return (path, ranks, False) if ranks else None


def read_execution_order_dir(sink: IngestSink, rank: int, path: str) -> None:
    """An `execution_order/` folder: `ms_execution_order_graph_{g}.csv` as `ops` rows and
    `ms_global_execution_order_graph_{g}.csv` as `graph_runs` rows, each read from where the last
    ingest stopped. Shared by every layout that has one (the rank layout, 1.0-1.2 sync dumps)."""
    for entry in sink.scandir(path) or []:
        sink.saw_files(1)
        rel = sink.rel(entry.path)
        m_exec = execution_order.EXEC_ORDER_FILE.match(entry.name)
        m_glob = execution_order.GLOBAL_ORDER_FILE.match(entry.name)
        graph_id = None if not (m_exec or m_glob) else parse_uint((m_exec or m_glob).group(1), INT32_MAX)
        if graph_id is None:
            sink.file_error(rel, "unknown", "execution_order", "unrecognised file in execution_order/")
            continue
        size = _size_or_none(entry) or 0
        prev = sink.previous(rel)
        start_offset, start_line = (prev[1], prev[2]) if prev else (0, 0)
        if size <= start_offset:
            continue
        parse = execution_order.parse_exec_order if m_exec else execution_order.parse_global_order
        try:
            result = parse(entry.path, start_offset, start_line, sink.options.caps)
        except MetadataTooLarge as exc:
            sink.file_error(
                rel, "exec_order" if m_exec else "global_order", "execution_order", str(exc), size
            )
            continue
        except OSError as exc:
            sink.error(rel, "execution_order", f"unreadable: {exc.strerror}", size)
            continue
        for line_no, reason in result.errors:
            sink.error(f"{rel}:{line_no}", "execution_order", reason, size)
        for index, text in result.values:
            if m_exec:
                key = sanitize_v23(text)
                sink.add(
                    "ops",
                    (sink.options.run, rank, graph_id, index, text, key, short_name(text), op_type_of(text),
                     without_op_index(key)),
                )  # fmt: skip
            else:
                sink.add("graph_runs", (sink.options.run, rank, graph_id, index, int(text)))
        kind = "exec_order" if m_exec else "global_order"
        sink.record(rel, kind, size, result.end_offset, result.end_line, "ok")


def read_graphs_dir(sink: IngestSink, rank: int, path: str) -> None:
    """graphs/ms_output_trace_code_graph_{g}.pb|.ir: nodes, edges and source frames. Shared by
    every layout that has a `graphs/` folder (the rank layout, the 1.0-1.2 layouts).

    A graph is (re)read when any of its files is new or changed size; its rows are written
    once, from the .pb when it parses, else from the .ir.
    """
    entries = sink.scandir(path) or []
    sink.saw_files(len(entries))
    sizes = {e.name: _size_or_none(e) or 0 for e in entries}
    per_graph = graph_rows_mod.graph_files(list(sizes))
    for entry in entries:
        if entry.name not in {n for files in per_graph.values() for n in files.values()}:
            sink.file_error(sink.rel(entry.path), "unknown", "graph", "unrecognised file in graphs/")
    for graph_id, files in sorted(per_graph.items()):
        rels = {name: sink.rel(os.path.join(path, name)) for name in files.values()}
        if all(sink.is_unchanged(rel, sizes[name]) for name, rel in rels.items()):
            continue
        by_name = {e.name: e for e in entries}
        if any(sink.still_written(by_name[name], rel, sink.options.settle) for name, rel in rels.items()):
            continue  # parse the graph once its files have stopped changing
        sink.judged(*rels.values())
        parsed, problems = graph_rows_mod.parse_graph(files, Path(path), sink.options.caps)
        for where, reason in problems:
            sink.error(sink.rel(os.path.join(path, where)), "graph", reason, sizes.get(where))
        if parsed is not None:
            nodes, edges, frames = graph_rows_mod.graph_rows(sink.options.run, rank, graph_id, parsed)
            sink.add_rows("ir_nodes", nodes)  # (counted in the summary)
            sink.add_rows("edges", edges)
            sink.add_rows("source_lines", frames)
        for name, rel in rels.items():
            status = "ok" if parsed is not None else "error"
            sink.record(rel, "graph_" + name.rsplit(".", 1)[1], sizes[name], sizes[name], 0, status)


class RankLayoutWalker:
    """Walks `rank_N/{net}/{graph_id}/{iteration}/` and reads the rank-level folders; each leaf
    directory (an iteration or constants/) goes to `ingest_leaf`, the reader's."""

    def __init__(self, sink: IngestSink, detection: Detection, ingest_leaf: IngestLeaf) -> None:
        self.sink = sink
        self.detection = detection
        self.root = detection.root
        self.ranks: list[Path] = list(detection.units)
        self.ingest_leaf = ingest_leaf

    def walk(self) -> None:
        """Walk every rank folder; rank folders that appeared since the last walk are included
        (unless a single rank folder was given)."""
        if not self.detection.fixed:
            self.ranks = rank_dirs(self.root)
        for rank_dir in self.ranks:
            self._ingest_rank(rank_dir)

    def scan_path(self, path: str) -> None:
        """Re-scan what a change at `path` (a UTF-8 directory inside the root, as the pipeline
        checked) can affect."""
        parts = self.sink.rel(path).split("/")
        m = RANK_DIR.match(parts[0])
        if not m or not os.path.isdir(path):
            return
        rank = int(m.group(1))
        rank_path = os.path.join(self.root, parts[0])
        if len(parts) == 1:
            self._ingest_rank(Path(rank_path))
        elif parts[1] == ".dump_metadata":
            self._ingest_metadata(rank, os.path.join(rank_path, parts[1]))
        elif parts[1] == "execution_order":
            self._ingest_execution_order(rank, os.path.join(rank_path, parts[1]))
        elif parts[1] == "graphs":
            self._ingest_graphs(rank, os.path.join(rank_path, parts[1]))
        elif len(parts) == 2:
            self._ingest_net(rank, parts[1], path)
        elif not parts[2].isdigit():
            self._ingest_net(rank, parts[1], os.path.join(rank_path, parts[1]))
        elif len(parts) == 3:
            self._ingest_graph_dir(rank, parts[1], int(parts[2]), path)
        else:
            leaf = os.path.join(rank_path, *parts[1:4])
            self._ingest_iteration_dir(rank, parts[1], int(parts[2]), parts[3], leaf)

    def _ingest_rank(self, rank_dir: Path) -> None:
        rank = int(RANK_DIR.match(rank_dir.name).group(1))
        entries = self.sink.scandir(str(rank_dir))
        if entries is None:
            return
        # The operator files first (names sort "Net" before "execution_order"): a rank's tensors
        # then commit with the operators they resolve against, not before them (which would make
        # the flat files of ingest/storage/flat.py be resolved twice).
        first = (".dump_metadata", "execution_order", "graphs")
        entries = sorted(
            entries, key=lambda e: (e.name not in first, first.index(e.name) if e.name in first else 0)
        )
        for entry in entries:
            if entry.name == ".dump_metadata" and entry.is_dir():
                self._ingest_metadata(rank, entry.path)
            elif entry.name == "execution_order" and entry.is_dir():
                self._ingest_execution_order(rank, entry.path)
            elif entry.name == "graphs" and entry.is_dir():
                self._ingest_graphs(rank, entry.path)
            elif entry.is_dir():
                self._ingest_net(rank, entry.name, entry.path)
            else:
                self.sink.saw_files(1)
                self.sink.file_error(
                    self.sink.rel(entry.path), "unknown", "walk", "unexpected file at rank level"
                )

    def _ingest_net(self, rank: int, net: str, net_path: str) -> None:
        for gentry in self.sink.scandir(net_path) or []:
            if not (gentry.is_dir() and gentry.name.isdigit()):
                self.sink.file_error(
                    self.sink.rel(gentry.path), "unknown", "walk", "expected a graph-id directory (digits)"
                )
                continue
            self._ingest_graph_dir(rank, net, int(gentry.name), gentry.path)

    def _ingest_graph_dir(self, rank: int, net: str, graph_id: int, path: str) -> None:
        for ientry in self.sink.scandir(path) or []:
            self._ingest_iteration_dir(rank, net, graph_id, ientry.name, ientry.path, ientry.is_dir())

    def _ingest_iteration_dir(
        self, rank: int, net: str, graph_id: int, name: str, path: str, is_dir: bool = True
    ) -> None:
        if is_dir and name.isdigit():
            self.ingest_leaf(rank, net, graph_id, int(name), "iteration", path)
        elif is_dir and name == "constants":
            self.ingest_leaf(rank, net, graph_id, None, "constants", path)
        else:
            self.sink.file_error(
                self.sink.rel(path),
                "unknown",
                "walk",
                "expected an iteration directory (digits) or constants/",
            )

    # -- rank-level folders ----------------------------------------------------------------

    def _ingest_metadata(self, rank: int, path: str) -> None:
        values: dict[str, str | None] = {
            "device_target": None,
            "ms_version": None,
            "dump": None,
            "hccl": None,
        }
        changed = False
        entries = self.sink.scandir(path) or []
        if any(self.sink.still_written(e, self.sink.rel(e.path), self.sink.options.settle) for e in entries):
            return  # read the rank's metadata as a whole, once it has stopped changing
        for entry in entries:
            self.sink.judged(self.sink.rel(entry.path))
            self.sink.saw_files(1)
            rel = self.sink.rel(entry.path)
            size = _size_or_none(entry) or 0
            changed |= not self.sink.is_unchanged(rel, size)
            try:
                caps = self.sink.options.caps
                if entry.name == "config.json":
                    values.update(metadata.read_config_json(entry.path, caps))
                elif entry.name == "data_dump.json":
                    values["dump"] = metadata.read_json_text(entry.path, caps)
                elif entry.name == "hccl.json":
                    values["hccl"] = metadata.read_json_text(entry.path, caps)
                else:
                    continue
            except (metadata.MetadataError, OSError, UnicodeDecodeError) as exc:
                self.sink.file_error(rel, "metadata", "metadata", str(exc), size)
                continue
            if not self.sink.is_unchanged(rel, size):
                self.sink.record(rel, "metadata", size, size, 0, "ok")
        if changed:
            self.sink.add(
                "rank_meta",
                (self.sink.options.run, rank, str(self.root), values["device_target"], values["ms_version"],
                 values["dump"], values["hccl"], now()),
            )  # fmt: skip

    def _ingest_execution_order(self, rank: int, path: str) -> None:
        read_execution_order_dir(self.sink, rank, path)

    def _ingest_graphs(self, rank: int, path: str) -> None:
        read_graphs_dir(self.sink, rank, path)
