"""Query containment for the server: only reads of the catalog get through.

Statements are split and typed by DuckDB's own parser (`duckdb.extract_statements`); SELECT
statements (and the SELECT under EXPLAIN) are parsed again into DuckDB's parse tree
(`json_serialize_sql`) and every table reference and function call is checked: table functions
must be on an allow-list (no `read_csv`, `read_parquet`, `glob`, `query`...), a few scalar
functions are forbidden (`getenv`, `query`...), and a table name that looks like a file path
(DuckDB's replacement scans would read it) is refused. PostgreSQL session statements (SET, SHOW,
RESET, BEGIN/COMMIT/ROLLBACK, DISCARD, DEALLOCATE) are recognised here and answered by the server
without ever reaching DuckDB. DuckDB itself runs with `enable_external_access=false` limited to the
catalog's data directory and a locked configuration (see `catalog.server`), as a second wall.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

import duckdb

SQLSTATE_READ_ONLY = "25006"  # read_only_sql_transaction
SQLSTATE_PRIVILEGE = "42501"  # insufficient_privilege
SQLSTATE_SYNTAX = "42601"


class Refused(Exception):
    """A statement the server will not run; carries the SQLSTATE to send."""

    def __init__(self, message: str, sqlstate: str = SQLSTATE_PRIVILEGE) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


ALLOWED_TABLE_FUNCTIONS = {
    "range", "generate_series", "unnest", "json_each", "json_tree", "repeat", "generate_subscripts",
    "duckdb_tables", "duckdb_views", "duckdb_columns", "duckdb_schemas", "duckdb_types",
    "duckdb_functions", "duckdb_databases", "duckdb_constraints", "duckdb_indexes", "duckdb_keywords",
    "pragma_table_info", "pragma_show", "pragma_version", "pragma_platform", "test_all_types",
    "summary", "show", "describe",
}  # fmt: skip

FORBIDDEN_FUNCTIONS = {
    "getenv", "query", "query_table", "read_text", "read_blob", "read_csv", "read_csv_auto",
    "read_parquet", "parquet_scan", "read_json", "read_json_auto", "read_ndjson", "read_ndjson_auto",
    "read_json_objects", "read_ndjson_objects", "glob", "sniff_csv", "current_setting_all",
    "load_extension", "install_extension", "checkpoint", "force_checkpoint", "sqlite_scan",
    "postgres_scan", "iceberg_scan", "delta_scan", "duckdb_secrets", "duckdb_logs", "write_log",
}  # fmt: skip

_FILE_LIKE = re.compile(r"[/\\:*?~]|\.[A-Za-z0-9]{1,8}$")

_SESSION = [
    ("set", re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?(?!SESSION\s+CHARACTERISTICS)"
                       r"(?!TRANSACTION\b)([\w.]+)\s*(?:=|\bTO\b)\s*(.*?)\s*;?\s*$", re.I | re.S)),
    ("set_time_zone", re.compile(r"^\s*SET\s+(?:SESSION\s+|LOCAL\s+)?TIME\s+ZONE\s+(.*?)\s*;?\s*$",
                                 re.I | re.S)),
    ("set_noop", re.compile(r"^\s*SET\s+(?:SESSION\s+CHARACTERISTICS|TRANSACTION|NAMES)\b.*$", re.I | re.S)),
    ("reset", re.compile(r"^\s*RESET\s+([\w.]+|ALL)\s*;?\s*$", re.I)),
    ("show", re.compile(r"^\s*SHOW\s+(?!TABLES\b|ALL\s+TABLES\b)([\w.]+)\s*;?\s*$", re.I)),
    ("begin", re.compile(r"^\s*(BEGIN|START\s+TRANSACTION)\b.*$", re.I | re.S)),
    ("commit", re.compile(r"^\s*(COMMIT|END)\b.*$", re.I | re.S)),
    ("rollback", re.compile(r"^\s*(ROLLBACK|ABORT)\b.*$", re.I | re.S)),
    ("discard", re.compile(r"^\s*DISCARD\s+\w+\s*;?\s*$", re.I)),
    ("deallocate", re.compile(r"^\s*DEALLOCATE\s+(?:PREPARE\s+)?(\w+)\s*;?\s*$", re.I)),
    ("noop", re.compile(r"^\s*(UNLISTEN|LISTEN|CLOSE)\b.*$", re.I | re.S)),
]  # fmt: skip


@dataclass
class Statement:
    kind: str  # select | set | set_time_zone | set_noop | reset | show | begin | commit | ...
    text: str
    args: tuple[str, ...] = ()


def session_statement(text: str) -> Statement | None:
    for kind, rx in _SESSION:
        m = rx.match(text)
        if m:
            return Statement(kind, text, tuple(g for g in m.groups() if g is not None))
    return None


def split(sql: str) -> list[str]:
    """The statements of a query string, split by DuckDB's parser (one string if it cannot parse)."""
    if not sql.strip().strip(";").strip():
        return []
    try:
        parts = [s.query.strip() for s in duckdb.extract_statements(sql)]
    except duckdb.Error:
        return [sql]
    return [p for p in parts if p.strip().strip(";").strip()]


def _walk(node: object) -> None:
    if isinstance(node, list):
        for x in node:
            _walk(x)
        return
    if not isinstance(node, dict):
        return
    t = node.get("type")
    if t == "TABLE_FUNCTION":
        fn = node.get("function") or {}
        name = str(fn.get("function_name", "")).lower()
        if name not in ALLOWED_TABLE_FUNCTIONS:
            raise Refused(f"table function {name}() is not allowed here: query the catalog's views")
    elif t == "BASE_TABLE":
        name = str(node.get("table_name", ""))
        if _FILE_LIKE.search(name):
            raise Refused(f"reading files is not allowed here: {name!r}; query the catalog's views")
    if node.get("class") == "FUNCTION":
        name = str(node.get("function_name", "")).lower()
        if name in FORBIDDEN_FUNCTIONS:
            raise Refused(f"function {name}() is not allowed here")
    for v in node.values():
        if isinstance(v, dict | list):
            _walk(v)


_EXPLAIN = re.compile(r"^\s*EXPLAIN\s+(?:ANALY[SZ]E\s+|\([^)]*\)\s*)?", re.I)


def check_select(text: str, con: duckdb.DuckDBPyConnection) -> None:
    """Refuse a SELECT whose parse tree reads files or calls forbidden functions."""
    rows = con.sql("SELECT json_serialize_sql($1::VARCHAR)", params=[text]).fetchall()
    tree = json.loads(rows[0][0])
    if tree.get("error"):
        msg = tree.get("error_message", "cannot parse statement")
        if "Only SELECT" in msg:
            raise Refused("only queries (SELECT) are allowed: the catalog is read-only", SQLSTATE_READ_ONLY)
        raise Refused(msg, SQLSTATE_SYNTAX)
    _walk(tree.get("statements", []))


_READ_TYPES = {"SELECT"}
_WRITE_MESSAGES = {
    "COPY": "COPY is not allowed: the catalog is read-only",
    "ATTACH": "ATTACH is not allowed",
    "DETACH": "DETACH is not allowed",
    "LOAD": "INSTALL and LOAD are not allowed",
    "PRAGMA": "PRAGMA is not allowed",
    "CALL": "CALL is not allowed",
    "EXPORT": "EXPORT is not allowed",
}


def classify(text: str, con: duckdb.DuckDBPyConnection) -> Statement:
    """Type one statement and refuse anything that is not a harmless read (raises Refused)."""
    session = session_statement(text)
    if session is not None:
        return session
    try:
        stmts = duckdb.extract_statements(text)
    except duckdb.Error as exc:
        raise Refused(str(exc).splitlines()[0], SQLSTATE_SYNTAX) from exc
    if len(stmts) != 1:
        raise Refused("one statement at a time here", SQLSTATE_SYNTAX)
    stype = stmts[0].type.name
    if stype == "EXPLAIN":
        inner = _EXPLAIN.sub("", text, count=1)
        if inner == text or classify(inner, con).kind != "select":
            raise Refused("only EXPLAIN of a query is allowed", SQLSTATE_READ_ONLY)
        return Statement("select", text)
    if stype in _READ_TYPES:
        check_select(text, con)
        return Statement("select", text)
    if stype in _WRITE_MESSAGES:
        raise Refused(_WRITE_MESSAGES[stype], SQLSTATE_PRIVILEGE)
    raise Refused(f"{stype} statements are not allowed: the catalog is read-only", SQLSTATE_READ_ONLY)
