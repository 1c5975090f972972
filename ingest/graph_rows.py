"""Turn a parsed graph (`ingest.graph_model.ParsedGraph`, from the .pb or the .ir) into rows of
the `ir_nodes`, `edges` and `source_lines` tables."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.graph_model import GRAPH_FILE, ParsedGraph
from ingest.graph_pb import parse_graph_pb_file
from ingest.ir_text import parse_ir_file


def graph_files(names: list[str]) -> dict[int, dict[str, str]]:
    """{graph_id: {'pb': name, 'ir': name}} for the trace-code graph files among `names`."""
    out: dict[int, dict[str, str]] = {}
    for name in names:
        m = GRAPH_FILE.match(name)
        if m:
            out.setdefault(int(m.group(1)), {})[m.group(2)] = name
    return out


def graph_rows(
    run: str, rank: int, graph_id: int, parsed: ParsedGraph
) -> tuple[list[tuple], list[tuple], list[tuple]]:
    """(ir_nodes rows, edges rows, source_lines rows), in the column order of ingest.schema."""
    nodes, edges, frames = [], [], []
    node_keys = {n.node_key for n in parsed.nodes}
    for n in parsed.nodes:
        nodes.append(
            (run, rank, graph_id, parsed.source, n.node_key, n.graph_name, n.op_type, n.full_name,
             n.is_parameter, n.name, json.dumps(n.attributes, ensure_ascii=False) if n.attributes else None,
             list(n.input_types), list(n.output_types), list(n.output_dtypes), list(n.output_shapes),
             list(n.device_formats), list(n.device_dtypes), list(n.device_shapes), n.line)
        )  # fmt: skip
        for index, (producer, kind) in enumerate(n.inputs):
            if producer in node_keys:  # literals and graphs are operands, not nodes
                edges.append((run, rank, graph_id, producer, n.node_key, index, kind))
        for f in parsed.frames.get(n.node_key, ()):
            frames.append(
                (run, rank, graph_id, n.node_key, n.full_name, f.depth, f.file, f.line, f.line_end,
                 f.col_start, f.col_end, f.code, f.is_user_code)
            )  # fmt: skip
    return nodes, edges, frames


def parse_graph(files: dict[str, str], directory: Path) -> tuple[ParsedGraph | None, list[tuple[str, str]]]:
    """Parse the .pb if there is one (MindInsight's choice: the most robust source), else the .ir.

    A .pb with problems (truncated, corrupt) gives way to the .ir when there is one; whatever
    parsed is still used when there is not. Returns the graph and the (file name, reason) of
    every problem met on the way.
    """
    problems: list[tuple[str, str]] = []
    fallback: ParsedGraph | None = None
    for kind, parse in (("pb", parse_graph_pb_file), ("ir", parse_ir_file)):
        name = files.get(kind)
        if name is None:
            continue
        try:
            parsed = parse(directory / name)
        except (ValueError, OverflowError, RecursionError, IndexError) as exc:
            # Content no real graph holds (numbers beyond any index, nesting beyond any type)
            # that a parser did not turn into one of its line errors: the whole file is one error.
            problems.append((name, f"cannot parse: {type(exc).__name__}: {str(exc)[:200]}"))
            continue
        for where, reason in parsed.errors:
            problems.append((f"{name}:{where}" if where not in (None, "") else name, reason))
        has_ops = any(not n.is_parameter for n in parsed.nodes)
        if has_ops and not parsed.errors:
            return parsed, problems
        if not has_ops:
            problems.append((name, "no operator could be read from this graph file"))
        elif fallback is None:
            fallback = parsed
    return fallback, problems
