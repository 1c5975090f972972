"""Turn a parsed graph (`ingest.formats.graph_model.ParsedGraph`, from the .pb or the .ir) into rows of
the `ir_nodes`, `edges` and `source_lines` tables."""

from __future__ import annotations

import json
from pathlib import Path

from ingest.formats.graph_model import GRAPH_FILE, ParsedGraph
from ingest.formats.limits import MetadataCaps, MetadataTooLarge
from ingest.formats.mindspore.ir_text import NO_SUBGRAPH, is_file_level_error, parse_ir_file


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
    """(ir_nodes rows, edges rows, source_lines rows), in the column order of ingest.storage.schema."""
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


# Per graph file, at most this many errors about single lines (or single nodes of a .pb) are
# reported one by one; the rest are counted in one more row.
MAX_LINE_ERRORS = 10


def parse_graph(
    files: dict[str, str], directory: Path, caps: MetadataCaps | None = None
) -> tuple[ParsedGraph | None, list[tuple[str, str]]]:
    """Parse the .pb if there is one (MindInsight's choice: the most robust source), else the .ir.

    A .pb with problems (truncated, corrupt) gives way to the .ir when there is one; whatever
    parsed is still used when there is not. So does a clean .pb that holds call nodes, which
    MindSpore writes there as empty NodeProtos (see `ingest.formats.mindspore.graph_pb`), when the .ir parses
    clean. Returns the graph and the (location, reason) of the problems met on the way, where a
    location is the file name, or `name:line` for an .ir line:

    - a file that yields no operator (random bytes, an empty file, a .pb that does not decode) is
      one problem, saying why and how many of its lines could not be read; so is a file over the
      `graph` cap (`ingest.formats.limits`), which is not read;
    - a file that does yield a graph reports its first `MAX_LINE_ERRORS` bad lines (or .pb nodes)
      one by one, then one "... and N more" problem, plus each error about the whole file
      (truncated, nodes missing against the header's count).
    """
    from ingest.formats.mindspore.graph_pb import (
        parse_graph_pb_file,  # protobuf: imported by dumps with graphs only
    )

    problems: list[tuple[str, str]] = []
    fallback: ParsedGraph | None = None
    for kind, parse in (("pb", parse_graph_pb_file), ("ir", parse_ir_file)):
        name = files.get(kind)
        if name is None:
            continue
        try:
            parsed = parse(directory / name, caps)
        except MetadataTooLarge as exc:
            problems.append((name, str(exc)))
            continue
        except (ValueError, OverflowError, RecursionError, IndexError) as exc:
            # Content no real graph holds (numbers beyond any index, nesting beyond any type)
            # that a parser did not turn into one of its line errors: the whole file is one error.
            problems.append((name, f"cannot parse: {type(exc).__name__}: {str(exc)[:200]}"))
            continue
        if not any(not n.is_parameter for n in parsed.nodes):
            problems.append((name, _unusable(kind, parsed)))
            continue
        problems.extend(_capped(name, kind, parsed.errors))
        if not parsed.errors:
            if kind == "pb" and "ir" in files and any(n.op_type == "call" for n in parsed.nodes):
                # MindSpore writes a call node into the .pb as an empty NodeProto (no callee,
                # operands, full name or trace); the .ir has all of it: take the .ir if it is clean
                fallback = parsed
                continue
            return parsed, problems
        if fallback is None:
            fallback = parsed
    return fallback, problems


def _is_file_level(kind: str, where: int | str, reason: str) -> bool:
    if kind == "ir":
        return is_file_level_error(reason) or not isinstance(where, int)
    return not str(where).startswith("node ")  # the .pb: "file", "graph", "salvage"


def _capped(name: str, kind: str, errors: list[tuple[int | str, str]]) -> list[tuple[str, str]]:
    """A usable file's errors: the first MAX_LINE_ERRORS line (node) errors, a count of the rest,
    and every error about the whole file."""
    line_errors = [(w, r) for w, r in errors if not _is_file_level(kind, w, r)]
    file_errors = [(w, r) for w, r in errors if _is_file_level(kind, w, r)]
    shown = line_errors[:MAX_LINE_ERRORS]
    out = [(f"{name}:{w}" if kind == "ir" else name, r if kind == "ir" else f"{w}: {r}") for w, r in shown]
    rest = line_errors[MAX_LINE_ERRORS:]
    if rest:
        if kind == "ir":
            seen = {w for w, _ in shown}
            more = len({w for w, _ in rest if w not in seen})
            first = f"first at line {rest[0][0]}: {rest[0][1]}"
            out.append((name, f"… and {more:,} more unreadable lines ({first})"))
        else:
            out.append((name, f"… and {len(rest):,} more problems (first: {rest[0][0]}: {rest[0][1]})"))
    out.extend((f"{name}:{w}" if isinstance(w, int) else name, r) for w, r in file_errors)
    return out


def _unusable(kind: str, parsed: ParsedGraph) -> str:
    """One reason for a graph file that yields no operator: why, and how much of it was unreadable."""
    errors = parsed.errors
    if kind == "pb":
        if not errors:
            return "no operator in this .pb (its graph has no node)"
        more = f"; {len(errors) - 1:,} more problems" if len(errors) > 1 else ""
        return f"not a MindSpore graph .pb, no operator could be read: {errors[0][1]}{more}"
    if parsed.lines == 0:
        return "no operator could be read: the .ir is empty"
    bad_lines = sorted({w for w, r in errors if isinstance(w, int) and not is_file_level_error(r)})
    why = "not a MindSpore IR" if any(r == NO_SUBGRAPH for _, r in errors) else "no operator could be read"
    if not bad_lines:
        first = f"; {errors[0][1]}" if errors else ""
        return f"{why}: none of its {parsed.lines:,} non-blank lines is an operator{first}"
    first_at = bad_lines[0]
    first_reason = next(r for w, r in errors if w == first_at and not is_file_level_error(r))
    return (
        f"{why}: {len(bad_lines):,} of {parsed.lines:,} non-blank lines unreadable; "
        f"first at line {first_at}: {first_reason}"
    )
