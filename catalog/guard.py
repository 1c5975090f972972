"""Statement policy: which SQL a client may run against the catalog, decided by DuckDB's parser.

This is the second wall. The first is the engine the server runs client SQL on
(`catalog.server.sandbox`): no file system access, a read-only catalog, a locked configuration, and a
process with a memory limit. The guard turns what the engine would refuse anyway into clear
errors and refuses what is harmless to the engine but not meant for clients (settings,
file-reading table functions that would only fail later).

Every decision comes from a parser, never from patterns over the text:

- statements are split and typed by DuckDB's `extract_statements`;
- a query's parse tree (`json_serialize_sql`) is walked for table functions, file-like table
  names and forbidden functions; names are the parser's, so quoting, casing, comments or a schema
  prefix change nothing;
- `EXPLAIN [ANALYZE]` is read with DuckDB's tokenizer and the statement after it is classified on
  its own; what runs is rebuilt from the parts that were checked.

Parsing happens on a private DuckDB connection per thread that never executes client SQL. The
PostgreSQL commands drivers send (SET, SHOW, RESET, BEGIN/COMMIT/ROLLBACK, SAVEPOINT, DISCARD,
DEALLOCATE, LISTEN, DECLARE/FETCH, COPY ... TO STDOUT) are read from DuckDB's tokenizer by
`catalog.session_commands` and answered by the server itself; they never reach DuckDB as written.
"""

from __future__ import annotations

import functools
import json
import re
import threading
from dataclasses import dataclass

import duckdb

from catalog import session_commands
from catalog.views import definitions_connection

SQLSTATE_PRIVILEGE = "42501"  # insufficient_privilege: reads of files, writes, settings, extensions
SQLSTATE_UNSUPPORTED = "0A000"  # feature_not_supported
SQLSTATE_SYNTAX = "42601"
SQLSTATE_TOO_COMPLEX = "54001"  # statement_too_complex

MAX_EXPRESSION_DEPTH = 250


class Refused(Exception):
    """A statement the catalog will not run; carries the SQLSTATE a server sends."""

    def __init__(self, message: str, sqlstate: str = SQLSTATE_PRIVILEGE) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


# Table functions a query may use in FROM: generators and DuckDB's own metadata (not
# duckdb_databases(), duckdb_settings() or duckdb_extensions(): they show the server's paths).
ALLOWED_TABLE_FUNCTIONS = {
    "range", "generate_series", "unnest", "json_each", "json_tree", "repeat", "generate_subscripts",
    "duckdb_tables", "duckdb_views", "duckdb_columns", "duckdb_schemas", "duckdb_types",
    "duckdb_functions", "duckdb_constraints", "duckdb_indexes", "duckdb_keywords",
    "pragma_table_info", "pragma_show", "pragma_version", "pragma_platform", "test_all_types",
    "summary", "show", "describe", "show_tables", "show_databases",
}  # fmt: skip


@functools.cache
def dumpcat_table_macros() -> frozenset[str]:
    """Names of the table macros dumpcat's own sql/*.sql define (watch_*, first_divergence, ...).

    Computed on first use (it costs about half a second), not at import: every `dumpcat` command
    imports this module, and most never check a table function.

    Found by DuckDB itself: the view files run once on a scratch connection over empty tables and
    `duckdb_functions()` lists the table macros they created. Names DuckDB already has as table
    functions are left out, so a macro can never make a built-in (a file reader) callable."""
    config = {
        "enable_external_access": "false",
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
    }
    listing = "SELECT function_name FROM duckdb_functions() WHERE function_type "
    builtin_sql = listing + "IN ('table', 'table_macro')"
    with duckdb.connect(":memory:", config=config) as fresh:
        builtin = {str(r[0]).lower() for r in fresh.execute(builtin_sql).fetchall()}
    with definitions_connection(config) as scratch:
        rows = scratch.execute(listing + "= 'table_macro' AND NOT internal").fetchall()
    return frozenset(str(r[0]).lower() for r in rows) - builtin


# Scalar functions that touch the outside world or the engine's configuration, and those that
# parse, plan or run SQL held in a string (a statement the guard never sees: the engine's own wall,
# catalog.api.wall_in and the server's sandbox, is what stops it; these are the second wall).
FORBIDDEN_FUNCTIONS = {
    "getenv", "query", "query_table", "current_setting", "current_setting_all", "load_extension",
    "install_extension", "checkpoint", "force_checkpoint", "write_log", "enable_logging",
    "disable_logging", "truncate_duckdb_logs", "set_variable", "which_secret",
    "json_serialize_sql", "json_serialize_plan", "json_deserialize_sql", "json_execute_serialized_sql",
}  # fmt: skip
# DuckDB's own views (and table functions named without parentheses) that show its settings, its
# databases' paths, extensions or secrets: refused by any spelling (the parse tree has the name
# unquoted). PostgreSQL's pg_settings is answered by the emulation (dumpcat_pg.pg_settings, a fixed
# list); a reference the translation left alone would reach DuckDB's own pg_catalog.pg_settings.
SYSTEM_RELATIONS = {
    "pg_settings", "duckdb_settings", "duckdb_databases", "duckdb_extensions", "duckdb_secrets",
    "duckdb_temporary_files", "duckdb_memory", "duckdb_logs", "duckdb_log_contexts",
    "duckdb_external_file_cache", "duckdb_variables",
}  # fmt: skip
# The server's PostgreSQL emulation (catalog.server.pg_catalog) lives in these schemas: its macros,
# `current_setting` among them, answer from fixed values and are always allowed.
EMULATION_SCHEMAS = {"dumpcat_pg", "dumpcat_is"}

# A table name DuckDB would read as a file (replacement scan): a path, a glob, an extension.
_FILE_LIKE = re.compile(r"[/\\:*?~]|\.[A-Za-z0-9]{1,8}$")

# What to say about statement types that are not queries.
_REFUSALS = {
    "COPY": "COPY is not allowed: the catalog is read-only and has no file access",
    "EXPORT": "EXPORT DATABASE is not allowed: the catalog is read-only",
    "ATTACH": "ATTACH is not allowed: only the catalog's views can be queried",
    "DETACH": "DETACH is not allowed",
    "LOAD": "INSTALL and LOAD are not allowed: no extensions",
    "PRAGMA": "PRAGMA is not allowed",
    "CALL": "CALL is not allowed: query table functions with SELECT",
    "SET": "SET of DuckDB settings is not allowed: the configuration is fixed",
    "PREPARE": "PREPARE is not supported: use the protocol's prepared statements",
    "EXECUTE": "EXECUTE is not supported: use the protocol's prepared statements",
}


# DuckDB runs a PIVOT without an IN list as several statements: a first pass over the data to find
# the pivot's values (it creates an ENUM type of them), then the query. The guard allows one read,
# and a statement that creates types is not one.
_PIVOT_WITHOUT_IN = (
    "PIVOT without an IN list is not supported: DuckDB needs a first pass over the data (it creates "
    "a type of the values) that a read-only query cannot make; write the values: "
    "PIVOT ... ON col IN ('a', 'b') USING ..."
)


def _has_keyword(text: str, word: str) -> bool:
    """Does DuckDB's tokenizer read `word` as a keyword of `text` (not in a string or a comment)?"""
    try:
        tokens = duckdb.tokenize(text)
    except (duckdb.Error, RuntimeError):
        return False
    return any(
        kind == duckdb.token_type.keyword and text[offset:].split(None, 1)[0][: len(word)].upper() == word
        for offset, kind in tokens
    )


@dataclass(frozen=True)
class Statement:
    """A statement the policy allows: kind `query` (text is what to run) or a session command."""

    kind: str  # query | set | set_time_zone | set_noop | reset | show | begin | commit | ...
    text: str
    args: tuple[str, ...] = ()


_local = threading.local()


def _parser() -> duckdb.DuckDBPyConnection:
    """This thread's private parsing connection: no data, no file access, never runs client SQL."""
    con = getattr(_local, "con", None)
    if con is None:
        con = duckdb.connect(
            ":memory:",
            config={
                "enable_external_access": "false",
                "autoinstall_known_extensions": "false",
                "autoload_known_extensions": "false",
                "max_expression_depth": str(MAX_EXPRESSION_DEPTH),
                "lock_configuration": "true",
            },
        )
        _local.con = con
    return con


def parser_connection() -> duckdb.DuckDBPyConnection:
    """The calling thread's parser connection (a worker interrupts it when a statement times out)."""
    return _parser()


def session_statement(text: str) -> Statement | None:
    """A PostgreSQL command the server answers itself (SET, SHOW, BEGIN, DECLARE, COPY ... read
    from DuckDB's tokenizer by catalog.session_commands), or None for anything else."""
    try:
        cmd = session_commands.command(text)
    except session_commands.CommandError as exc:
        raise Refused(str(exc), exc.sqlstate) from exc
    return None if cmd is None else Statement(cmd.kind, text, cmd.args)


_TOO_DEEP = f"statement too complex: expressions nest deeper than {MAX_EXPRESSION_DEPTH} levels"


def _parser_error(exc: duckdb.Error) -> Refused:
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if "expression depth" in message or "too deep" in message.lower():
        return Refused(_TOO_DEEP, SQLSTATE_TOO_COMPLEX)
    return Refused(message, SQLSTATE_SYNTAX)


def split(sql: str) -> list[str]:
    """The statements of a query string, split by DuckDB's parser.

    A string the parser cannot read comes back whole (it may be a session command DuckDB does not
    know, such as DISCARD ALL; `classify` then refuses it if it is not).
    """
    if not sql.strip().strip(";").strip():
        return []
    try:
        parts = [s.query.strip() for s in _parser().extract_statements(sql)]
    except duckdb.Error:
        return [sql]
    except RecursionError:
        return [sql]
    return [p for p in parts if p.strip().strip(";").strip()]


def _walk(tree: object) -> None:
    """Refuse a parse tree that reads files or calls what clients may not call (iterative: a deep
    tree cannot exhaust the Python stack)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            stack.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        kind = node.get("type")
        if kind == "TABLE_FUNCTION":
            fn = node.get("function") or {}
            name = str(fn.get("function_name", "")).lower()
            schema = str(fn.get("schema", "")).lower()
            # table macros of dumpcat's sql/*.sql are callable in FROM like the functions above
            allowed = name in ALLOWED_TABLE_FUNCTIONS or name in dumpcat_table_macros()
            if not allowed and schema not in EMULATION_SCHEMAS:
                raise Refused(f"table function {name}() is not allowed: query the catalog's views")
        elif kind == "BASE_TABLE":
            name = str(node.get("table_name", ""))
            if _FILE_LIKE.search(name):
                raise Refused(f"reading files is not allowed: {name!r}; query the catalog's views")
            low, schema = name.lower(), str(node.get("schema_name", "")).lower()
            system = low in SYSTEM_RELATIONS or (
                low.startswith("pragma_") and low not in ALLOWED_TABLE_FUNCTIONS
            )
            if system and schema not in EMULATION_SCHEMAS:
                raise Refused(f"{name} is not available: it shows the engine's settings or paths")
        if node.get("class") == "FUNCTION":
            name = str(node.get("function_name", "")).lower()
            schema = str(node.get("schema", "")).lower()
            if name in FORBIDDEN_FUNCTIONS and schema not in EMULATION_SCHEMAS:
                hint = ": SHOW name answers PostgreSQL settings" if "setting" in name else ""
                raise Refused(f"function {name}() is not allowed{hint}")
        stack.extend(v for v in node.values() if isinstance(v, dict | list))


def check_query(text: str) -> None:
    """Refuse a SELECT whose parse tree reads files or calls forbidden functions."""
    try:
        rows = _parser().execute("SELECT json_serialize_sql($1::VARCHAR)", [text]).fetchall()
        tree = json.loads(rows[0][0])
    except duckdb.InterruptException:
        raise
    except RecursionError as exc:
        raise Refused("statement too complex: nested too deeply", SQLSTATE_TOO_COMPLEX) from exc
    except duckdb.Error as exc:
        raise _parser_error(exc) from exc
    if tree.get("error"):
        message = str(tree.get("error_message", "cannot parse statement"))
        if "expression depth" in message:
            raise Refused(_TOO_DEEP, SQLSTATE_TOO_COMPLEX)
        raise Refused(message, SQLSTATE_SYNTAX)
    _walk(tree.get("statements", []))


def _explained(text: str) -> Statement:
    """`EXPLAIN [ANALYZE] query`: the query is classified on its own; option lists are refused."""
    try:
        tokens = duckdb.tokenize(text)
    except (duckdb.Error, RuntimeError) as exc:
        raise Refused(str(exc), SQLSTATE_SYNTAX) from exc
    tokens = [t for t in tokens if t[1] != duckdb.token_type.comment]
    words = [(offset, text[offset:].split(None, 1)[0].rstrip("(").upper()) for offset, _ in tokens[:3]]
    if not words or words[0][1] != "EXPLAIN" or len(words) < 2:
        raise Refused("cannot read this EXPLAIN statement", SQLSTATE_SYNTAX)
    prefix, rest = "EXPLAIN", words[1][0]
    if words[1][1] in ("ANALYZE", "ANALYSE") and len(words) > 2:
        prefix, rest = "EXPLAIN ANALYZE", words[2][0]
    if text[rest:].startswith("("):
        raise Refused(
            "EXPLAIN options are not supported: use EXPLAIN or EXPLAIN ANALYZE", SQLSTATE_UNSUPPORTED
        )
    inner = classify(text[rest:])
    if inner.kind != "query" or inner.text.upper().startswith("EXPLAIN"):
        raise Refused("only EXPLAIN of a query is allowed", SQLSTATE_UNSUPPORTED)
    return Statement("query", f"{prefix} {inner.text}")


def classify(text: str) -> Statement:
    """Type one statement and refuse anything that is not a harmless read (raises Refused)."""
    session = session_statement(text)
    if session is not None:
        return session
    try:
        stmts = _parser().extract_statements(text)
    except duckdb.InterruptException:
        raise
    except duckdb.Error as exc:
        raise _parser_error(exc) from exc
    except RecursionError as exc:
        raise Refused("statement too complex: nested too deeply", SQLSTATE_TOO_COMPLEX) from exc
    if not stmts:
        raise Refused("empty statement", SQLSTATE_SYNTAX)
    if len(stmts) != 1:
        raise Refused("one SQL statement at a time", SQLSTATE_SYNTAX)
    try:
        stype = stmts[0].type.name
    except ValueError as exc:  # a statement type the Python API has no name for (UPDATE EXTENSIONS)
        raise Refused("this statement is not allowed: the catalog is read-only", SQLSTATE_PRIVILEGE) from exc
    if stype == "EXPLAIN":
        return _explained(text.strip())
    if stype == "SELECT":
        check_query(text)
        return Statement("query", text)
    if stype == "MULTI" and _has_keyword(text, "PIVOT"):
        raise Refused(_PIVOT_WITHOUT_IN, SQLSTATE_UNSUPPORTED)
    if stype in _REFUSALS:
        sqlstate = SQLSTATE_UNSUPPORTED if stype in ("PREPARE", "EXECUTE") else SQLSTATE_PRIVILEGE
        raise Refused(_REFUSALS[stype], sqlstate)
    raise Refused(f"{stype} statements are not allowed: the catalog is read-only", SQLSTATE_PRIVILEGE)


@functools.lru_cache(maxsize=1024)
def classify_query(text: str) -> str:
    """The text to run for a statement that must be a query (Catalog.sql, `dumpcat sql`).

    Cached by text (a refusal is not cached, it raises): a dashboard or a notebook loop sends the
    same texts again and again, and parsing one costs milliseconds."""
    if not text.strip().strip(";").strip():
        raise Refused("empty statement: give one SQL query", SQLSTATE_SYNTAX)
    st = classify(text)
    if st.kind in ("create_view", "drop_view"):  # the server keeps temporary views per session
        word = st.text.split()[0].upper()
        raise Refused(f"{word} statements are not allowed: the catalog is read-only", SQLSTATE_PRIVILEGE)
    if st.kind != "query":
        word = st.text.split()[0].upper() if st.text.split() else st.kind
        raise Refused(
            f"{word} is a session command for the server; here only queries run", SQLSTATE_UNSUPPORTED
        )
    return st.text
