"""Spark SQL over a dumpcat catalog: the views of sql/*.sql as temporary views of a SparkSession.

    from catalog.spark.spark_sql import register_views
    register_views(spark, "path/to/cat")
    spark.sql("SELECT op_name FROM stats WHERE nan_count > 0").show()

There is one source of truth for what a view means: sql/*.sql, written for DuckDB. Each statement is
translated to Spark SQL with sqlglot when the views are registered, so a view changed or added there
is the same view in Spark without touching this module. Where sqlglot gives Spark SQL that is wrong
or that Spark lacks, a small rewrite of the syntax tree below (`_FIXUPS`, each documented) supplies
the DuckDB meaning; tests/catalog/spark/test_spark.py runs every view in both engines and compares the rows.

The `raw_<table>` views read exactly the parquet files the catalog's snapshot commits (the union of
every writer's shard), with the table's full schema from ingest/storage/schema.py (a column older files
lack reads as NULL, as in DuckDB); `tensors` and `stats` read the flat files when the catalog has
them, and resolve names at query time otherwise.

DuckDB macros have no Spark equivalent. They are expanded here instead: a table macro becomes a
subquery with its parameters replaced by values (`macro_sql`, `table_macro`), and every table macro
DuckDB accepts with no arguments (its defaults) is also registered as a view of the same name.
"""

from __future__ import annotations

import decimal
import functools
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel
from sqlglot.tokens import TokenType

from ingest.storage.flat_columns import FLAT_ONLY_COLUMNS, FLAT_VIEWS
from ingest.storage.schema import TABLES
from ingest.storage.sql_views import view_sql_files
from ingest.storage.store import CatalogStore

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Spark's reading of the flat files' stored columns (ingest/storage/flat_columns.py has DuckDB's):
# Spark has no parse_filename; this regular expression gives the same text (test_flat.py).
SPARK_FILE_NAME_OF_REL_PATH = "regexp_extract(rel_path, '([^/]*)$', 1)"
SPARK_FLAT_READ_FILE_NAME = f"coalesce(file_name, {SPARK_FILE_NAME_OF_REL_PATH})"
SPARK_FLAT_READ_PATH = "coalesce(path, concat(dump_root, '/', rel_path))"

__all__ = ["FORMAT_G", "macro_names", "macro_sql", "register_views", "spark_sql", "table_macro"]

_SOURCE = "duckdb"
_TARGET = "spark"


# -- sql/*.sql as statements --------------------------------------------------------------------


@dataclass(frozen=True)
class Macro:
    """A DuckDB macro of sql/*.sql: parameters (with their defaults) and body, both as DuckDB SQL."""

    name: str
    params: tuple[str, ...]
    defaults: dict[str, exp.Expression]
    body: exp.Expression
    table: bool


@dataclass(frozen=True)
class _Sources:
    views: list[tuple[str, exp.Expression]]  # (name, query) in the order sql/*.sql defines them
    macros: dict[str, Macro]


def _split(text: str) -> list[list[Any]]:
    """The statements of a SQL file as token lists (the tokenizer knows strings and comments)."""
    statements: list[list[Any]] = [[]]
    for token in sqlglot.Dialect.get_or_raise(_SOURCE).tokenize(text):
        if token.token_type == TokenType.SEMICOLON:
            statements.append([])
        else:
            statements[-1].append(token)
    return [s for s in statements if s]


def _parse_macro(text: str, tokens: list[Any]) -> Macro:
    """`CREATE OR REPLACE MACRO name(p, q := default, ...) AS [TABLE] body`: sqlglot does not parse
    DuckDB's `:=` parameter defaults, so the header is read from the tokens and the rest parsed."""
    name = tokens[4].text.lower()
    depth, i, params, current = 0, 5, [], []
    while True:
        tok = tokens[i]
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
            if depth > 1:
                current.append(tok)
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
            if depth == 0:
                break
            current.append(tok)
        elif tok.token_type == TokenType.COMMA and depth == 1:
            params.append(current)
            current = []
        else:
            current.append(tok)
        i += 1
    if current:
        params.append(current)
    names, defaults = [], {}
    for param in params:
        pname = param[0].text.lower()
        names.append(pname)
        if len(param) > 1:
            assert param[1].token_type == TokenType.COLON_EQ, f"macro {name}: cannot read parameter {pname}"
            defaults[pname] = sqlglot.parse_one(text[param[2].start : param[-1].end + 1], read=_SOURCE)
    i += 2  # ')' 'AS'
    table = tokens[i].token_type == TokenType.TABLE
    body_start = tokens[i + 1].start if table else tokens[i].start
    body = sqlglot.parse_one(text[body_start : tokens[-1].end + 1], read=_SOURCE)
    return Macro(name, tuple(names), defaults, body, table)


@functools.cache
def _sources() -> _Sources:
    views: list[tuple[str, exp.Expression]] = []
    macros: dict[str, Macro] = {}
    for _file, text in view_sql_files():
        for tokens in _split(text):
            words = [t.text.upper() for t in tokens[:4]]
            statement = text[tokens[0].start : tokens[-1].end + 1]
            if words == ["CREATE", "OR", "REPLACE", "MACRO"]:
                offset = tokens[0].start
                macro = _parse_macro(statement, [_shift(t, offset) for t in tokens])
                macros[macro.name] = macro
                continue
            create = sqlglot.parse_one(statement, read=_SOURCE)
            assert isinstance(create, exp.Create) and create.kind == "VIEW", statement[:80]
            views.append((create.this.name.lower(), create.expression))
    return _Sources(views, macros)


def _shift(token: Any, offset: int) -> Any:
    """`token` with its offsets relative to its statement's text."""
    token.start -= offset
    token.end -= offset
    return token


# -- macro expansion -----------------------------------------------------------------------------


def _literal(value: Any) -> exp.Expression:
    """A Python value as a SQL literal; a float as the exact decimal of its repr (`0.99`, as DuckDB
    reads the macros' own defaults), or a DOUBLE when that would not fit a DECIMAL(38)."""
    if isinstance(value, exp.Expression):
        return value
    if value is None:
        return exp.null()
    if isinstance(value, bool):
        return exp.true() if value else exp.false()
    if isinstance(value, int):
        return exp.Literal.number(value)
    if isinstance(value, float):
        plain = format(decimal.Decimal(repr(value)), "f") if math.isfinite(value) else ""
        if not plain or len(plain.replace("-", "").replace(".", "").lstrip("0")) > 38 or len(plain) > 40:
            return exp.cast(exp.Literal.string(repr(value)), "DOUBLE")
        return exp.Literal.number(plain)
    if isinstance(value, str):
        return exp.Literal.string(value)
    raise TypeError(f"cannot pass {type(value).__name__} to a macro: use None, bool, int, float or str")


def _bind(macro: Macro, args: list[exp.Expression], kwargs: dict[str, exp.Expression]) -> dict:
    values: dict[str, exp.Expression] = {}
    positional = [p for p in macro.params if p not in macro.defaults]
    if len(args) > len(positional):
        raise TypeError(f"{macro.name}() takes {len(positional)} positional arguments, got {len(args)}")
    values.update(zip(positional, args, strict=False))
    for key, value in kwargs.items():
        if key not in macro.params:
            raise TypeError(
                f"{macro.name}() has no parameter {key!r} (parameters: {', '.join(macro.params)})"
            )
        values[key] = value
    missing = [p for p in positional if p not in values]
    if missing:
        raise TypeError(f"{macro.name}() needs {', '.join(missing)}")
    for key, default in macro.defaults.items():
        values.setdefault(key, default)
    return values


def _substitute(body: exp.Expression, values: dict[str, exp.Expression]) -> exp.Expression:
    """`body` with each unqualified column named like a parameter replaced by its value."""

    def replace(node: exp.Expression) -> exp.Expression:
        if isinstance(node, exp.Column) and not node.table and node.name.lower() in values:
            value = values[node.name.lower()].copy()
            return (
                value
                if isinstance(value, (exp.Literal, exp.Column, exp.Null, exp.Boolean))
                else exp.paren(value)
            )
        return node

    return body.copy().transform(replace, copy=False)


def _call_args(node: exp.Expression) -> tuple[list[exp.Expression], dict[str, exp.Expression]]:
    args, kwargs = [], {}
    for arg in node.expressions:
        if isinstance(arg, (exp.PropertyEQ, exp.Kwarg)):
            kwargs[arg.this.name.lower()] = arg.expression
        else:
            args.append(arg)
    return args, kwargs


def _expand(tree: exp.Expression, macros: dict[str, Macro]) -> exp.Expression:
    """Inline every macro call of `tree`: scalar macros as expressions, table macros (in FROM) as
    subqueries; repeated until none is left (macros call macros)."""
    inlined = 0

    def macro_of(node: exp.Expression) -> Macro | None:
        return macros.get(node.name.lower()) if isinstance(node, exp.Anonymous) else None

    def inline(node: exp.Expression) -> exp.Expression:
        nonlocal inlined
        if isinstance(node, exp.Table) and (macro := macro_of(node.this)) is not None:
            inlined += 1
            query = _substitute(macro.body, _bind(macro, *_call_args(node.this)))
            alias = node.args.get("alias") or exp.TableAlias(this=exp.to_identifier(macro.name))
            return exp.Subquery(this=query, alias=alias)
        if (macro := macro_of(node)) is not None and not macro.table:
            inlined += 1
            return exp.paren(_substitute(macro.body, _bind(macro, *_call_args(node))))
        return node

    for _ in range(32):
        inlined = 0
        tree = tree.transform(inline, copy=False)  # the caller's own copy: no copy per round
        if not inlined:
            return tree
    raise RecursionError("macros nest deeper than 32 levels")


# -- DuckDB -> Spark fix-ups ----------------------------------------------------------------------
#
# Each fix-up maps one DuckDB construct whose sqlglot translation Spark rejects or reads differently.

_INF = "CAST('Infinity' AS DOUBLE)"


def _spark(text: str) -> exp.Expression:
    return sqlglot.parse_one(text, read=_TARGET)


def _fix_ieee(node: exp.Expression) -> exp.Expression:
    """isnan / isinf / isfinite: Spark has only isnan, and its isnan(NULL) is false where DuckDB's is
    NULL. Both engines order NaN above every number and take NaN = NaN as true, so comparisons with
    the constants give DuckDB's answers, NULL included."""
    if isinstance(node, exp.IsNan):
        return exp.EQ(this=node.this, expression=_spark("CAST('NaN' AS DOUBLE)"))
    if isinstance(node, exp.IsInf):
        return exp.EQ(this=exp.Abs(this=node.this), expression=_spark(_INF))
    if isinstance(node, exp.Anonymous) and node.name.lower() == "isfinite":
        return exp.LT(this=exp.Abs(this=node.expressions[0]), expression=_spark(_INF))
    return node


def _collected(arg: exp.Expression) -> exp.Expression:
    """The Spark array an aggregate `list`/`string_agg` argument ([DISTINCT] x [ORDER BY k, ...])
    collects: structs of the sort keys (NULL keys last, DuckDB's default) and the value, sorted,
    unwrapped; collect_set for DISTINCT. Struct elements also keep NULL values, which
    collect_list drops and DuckDB's list keeps."""
    value, keys = arg, []
    if isinstance(value, exp.Order):
        keys = value.expressions
        value = value.this
    distinct = isinstance(value, exp.Distinct)
    if distinct:
        if len(value.expressions) != 1:
            raise NotImplementedError("an aggregate of DISTINCT a, b has no Spark translation here")
        value = value.expressions[0]
    fields: list[exp.Expression] = []
    for i, key in enumerate(keys):
        if key.args.get("desc"):
            raise NotImplementedError("an aggregate's ORDER BY ... DESC has no Spark translation here")
        null_flag = exp.Is(this=key.this.copy(), expression=exp.null())
        fields += [
            exp.Literal.string(f"n{i}"),
            null_flag if not key.args.get("nulls_first") else exp.not_(null_flag),
        ]
        fields += [exp.Literal.string(f"k{i}"), key.this]
    fields += [exp.Literal.string("v"), value]
    collected = exp.Anonymous(
        this="COLLECT_SET" if distinct else "COLLECT_LIST",
        expressions=[exp.Anonymous(this="NAMED_STRUCT", expressions=fields)],
    )
    ordered = exp.Anonymous(this="ARRAY_SORT", expressions=[collected]) if keys else collected
    unwrap = exp.Lambda(this=exp.column("v", table="e"), expressions=[exp.to_identifier("e")])
    return exp.Anonymous(this="TRANSFORM", expressions=[ordered, unwrap])


def _fix_aggregate_lists(node: exp.Expression) -> exp.Expression:
    """list(...) and string_agg(...) with DISTINCT or ORDER BY: sqlglot drops the ORDER BY of a list
    (collect_list has none), and Spark's listagg ... WITHIN GROUP fails beside other DISTINCT
    aggregates (the `runs` view). Both become `_collected` arrays; string_agg joins its non-NULL
    values, and is NULL without any, as in DuckDB."""
    if isinstance(node, exp.ArrayAgg):
        return _collected(node.this)
    if isinstance(node, exp.GroupConcat):
        separator = (node.args.get("separator") or exp.Literal.string(",")).sql(_TARGET)
        values = f"FILTER({_collected(node.this).sql(_TARGET)}, s -> s IS NOT NULL)"
        # no value (or only NULLs): NULL, not the empty string array_join gives
        return _spark(f"IF(SIZE({values}) = 0, NULL, ARRAY_JOIN({values}, {separator}))")
    return node


def _fix_error(node: exp.Expression) -> exp.Expression:
    """error(message) is Spark's raise_error(message)."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "error":
        return exp.Anonymous(this="RAISE_ERROR", expressions=node.expressions)
    return node


def _fix_list_product(node: exp.Expression) -> exp.Expression:
    """list_product(list): a DOUBLE product of the elements (Spark: aggregate over the array)."""
    if isinstance(node, exp.Anonymous) and node.name.lower() == "list_product":
        arg = node.expressions[0].sql(_TARGET)
        return _spark(f"AGGREGATE({arg}, CAST(1 AS DOUBLE), (acc, e) -> acc * e)")
    return node


def _fix_division(node: exp.Expression) -> exp.Expression:
    """`/` is always a DOUBLE division in DuckDB; Spark divides DECIMALs (`100.0 * n / m`) as
    DECIMAL, rounding to a few digits. The dividend is cast to DOUBLE."""
    if isinstance(node, exp.Div):
        node.set("this", exp.cast(node.this, "DOUBLE"))
    return node


# C's %g (6 significant digits, correctly rounded from the binary value, trailing zeros stripped:
# `1.39062`, `1e-05`, `nan`) is Python's %g; Java's Formatter, behind Spark's format_string, rounds
# half up from a shortened decimal and keeps the zeros. A Python UDF registered by `register_views`.
FORMAT_G = "dumpcat_format_g"


_PRINTF_SPEC = re.compile(r"%(%|[-+ 0#]*\d*(?:\.\d+)?[a-zA-Z])")


def _fix_printf(node: exp.Expression) -> exp.Expression:
    """printf(format, ...) (DuckDB: C formats, NULL if an argument is NULL): Spark's format_string
    is Java's Formatter, whose %g differs from C's and which prints NULL as 'null'. The format is
    taken apart here: %g by FORMAT_G, %d, %x and %s through Spark, joined with concat (NULL in,
    NULL out)."""
    if not (isinstance(node, exp.Anonymous) and node.name.lower() in ("printf", "format_string")):
        return node
    fmt, *args = node.expressions
    if not (isinstance(fmt, exp.Literal) and fmt.is_string):
        raise NotImplementedError("printf with a format that is not a literal has no Spark translation here")
    parts: list[str] = []
    pos, argi = 0, 0
    text = fmt.this
    for match in _PRINTF_SPEC.finditer(text):
        if match.start() > pos:
            parts.append(exp.Literal.string(text[pos : match.start()]).sql(_TARGET))
        spec = match.group(1)
        if spec == "%":
            parts.append("'%'")
        else:
            arg = args[argi].sql(_TARGET)
            argi += 1
            if spec == "g":
                parts.append(f"{FORMAT_G}(CAST({arg} AS DOUBLE))")
            elif spec in ("d", "x"):
                parts.append(f"IF({arg} IS NULL, NULL, FORMAT_STRING('%{spec}', {arg}))")
            elif spec == "s":
                parts.append(f"CAST({arg} AS STRING)")
            else:
                raise NotImplementedError(f"printf format %{spec} has no Spark translation here")
        pos = match.end()
    if pos < len(text):
        parts.append(exp.Literal.string(text[pos:]).sql(_TARGET))
    return _spark(f"CONCAT({', '.join(parts) or repr('')})")


def _fix_union_by_name(node: exp.Expression) -> exp.Expression:
    """`a UNION ALL BY NAME b` where b's columns are a subset of a's (how the watch macros raise a
    parameter error): b padded with NULL columns in a's order."""
    if not (isinstance(node, exp.Union) and node.args.get("by_name")):
        return node
    left, right = node.this, node.expression
    names = [c.alias_or_name for c in left.selects]
    if "*" in names or not isinstance(right, exp.Select):
        raise NotImplementedError("UNION BY NAME with a * on its left has no Spark translation here")
    given = {c.alias_or_name: c for c in right.selects}
    right = right.copy()
    right.set("expressions", [given.get(n) or exp.alias_(exp.null(), n) for n in names])
    union = node.copy()
    union.set("expression", right)
    union.set("by_name", None)
    return union


def _fix_materialized(node: exp.Expression) -> exp.Expression:
    """`WITH x AS MATERIALIZED (...)`: DuckDB's hint to compute a CTE read twice once (nan_origin);
    Spark has no such syntax, and plans its CTEs itself."""
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)
    return node


_FIXUPS = (
    _fix_materialized,
    _fix_ieee,
    _fix_aggregate_lists,
    _fix_error,
    _fix_list_product,
    _fix_division,
    _fix_printf,
    _fix_union_by_name,
)


def _to_spark(tree: exp.Expression) -> str:
    # One copy of the source tree, changed in place from then on (sqlglot copies the whole tree
    # for each transform and for the generator by default: most of the translation's time).
    tree = _expand(tree.copy(), _sources().macros)
    for fix in _FIXUPS:
        tree = tree.transform(fix, copy=False)
    return tree.sql(
        dialect=_TARGET, identify=True, comments=False, unsupported_level=ErrorLevel.RAISE, copy=False
    )


@functools.cache
def spark_sql(view: str) -> str:
    """The Spark SQL of a view of sql/*.sql (its query, as `register_views` defines it)."""
    for name, query in _sources().views:
        if name == view:
            return _to_spark(query)
    raise KeyError(view)


# -- macros in Spark -------------------------------------------------------------------------------


def macro_names() -> list[str]:
    """The table macros of sql/*.sql."""
    return sorted(name for name, m in _sources().macros.items() if m.table)


def macro_sql(name: str, *args: Any, **kwargs: Any) -> str:
    """Spark SQL of the table macro `name` called with these arguments (Python values; unnamed ones
    fill the parameters that have no default, in order), e.g.
    `macro_sql("watch_tensor_too_large", max_gt=1e4)`."""
    macros = _sources().macros
    if name not in macros or not macros[name].table:
        raise KeyError(f"no table macro {name!r} (table macros: {', '.join(macro_names())})")
    call = exp.Anonymous(
        this=name,
        expressions=[_literal(a) for a in args]
        + [exp.PropertyEQ(this=exp.to_identifier(k), expression=_literal(v)) for k, v in kwargs.items()],
    )
    return _to_spark(exp.select("*").from_(exp.Table(this=call)))


def table_macro(spark: SparkSession, name: str, *args: Any, **kwargs: Any) -> DataFrame:
    """The rows of the table macro `name` as a DataFrame (the views `register_views` defined must be
    there), e.g. `table_macro(spark, "compare_stats", "fp16", "fp32")`."""
    return spark.sql(macro_sql(name, *args, **kwargs))


@functools.cache
def _default_macro_sql(name: str) -> str:
    return macro_sql(name)


@functools.cache
def _default_callable() -> tuple[str, ...]:
    """Table macros DuckDB runs with no arguments (every parameter has a usable default): probed on
    an empty in-memory catalog, so a macro that demands a threshold is left out."""
    import duckdb

    from catalog.views import definitions_connection

    con = definitions_connection()
    ok = []
    for name in macro_names():
        if _sources().macros[name].params and len(_sources().macros[name].defaults) < len(
            _sources().macros[name].params
        ):
            continue
        try:
            con.execute(f"SELECT * FROM {name}()").fetchall()
        except duckdb.Error:
            continue
        ok.append(name)
    con.close()
    return tuple(ok)


# -- registration ----------------------------------------------------------------------------------


_SPARK_TYPES = {
    pa.int64(): "BIGINT",
    pa.int32(): "INT",
    pa.string(): "STRING",
    pa.float64(): "DOUBLE",
    pa.bool_(): "BOOLEAN",
    pa.timestamp("us", tz="UTC"): "TIMESTAMP",
}


def _spark_type(t: pa.DataType) -> str:
    if pa.types.is_list(t):
        return f"ARRAY<{_spark_type(t.value_type)}>"
    return _SPARK_TYPES[t]


def _ddl(schema: pa.Schema) -> str:
    return ", ".join(f"`{f.name}` {_spark_type(f.type)}" for f in schema)


def _glob_safe(path: str) -> str:
    """Spark expands glob characters in paths it reads; a catalog path may hold them."""
    return re.sub(r"([\\{}\[\]*?])", r"\\\1", path)


def _read_raw(spark: SparkSession, table: str, files: list[str]) -> DataFrame:
    """A table's committed files, read with its current schema: columns a file written by an older
    dumpcat lacks read as NULL (DuckDB's union_by_name plus the NULL columns of views.py)."""
    reader = spark.read.schema(_ddl(TABLES[table]))
    if files:
        return reader.parquet(*[_glob_safe(f) for f in files])
    return spark.createDataFrame([], _ddl(TABLES[table]))


def _read_flat(spark: SparkSession, files: list[str]) -> DataFrame:
    """Flat files as DuckDB wrote them, `file_name` and `path` put back (views.flat_select_list); matched by
    column name only when two dumpcat versions' files differ (as views.flat_view_sql does)."""
    merge = len({tuple(pq.read_schema(f).names) for f in files}) > 1
    frame = spark.read.option("mergeSchema", str(merge).lower()).parquet(*[_glob_safe(f) for f in files])
    if "file_name" not in frame.columns:  # a stats file
        return frame
    from pyspark.sql.functions import expr

    frame = frame.withColumn("file_name", expr(SPARK_FLAT_READ_FILE_NAME))
    if "dump_root" in frame.columns:
        frame = frame.withColumn("path", expr(SPARK_FLAT_READ_PATH)).drop(*FLAT_ONLY_COLUMNS)
    return frame


@functools.cache
def _reads() -> dict[str, frozenset[str]]:
    """Each view's (and default-callable macro's) name -> the names its query reads (raw tables,
    views), its macros expanded."""
    queries = [*_sources().views]
    queries += [
        (name, exp.select("*").from_(exp.Table(this=exp.Anonymous(this=name))))
        for name in _default_callable()
    ]
    return {
        name: frozenset(t.name.lower() for t in _expand(query.copy(), _sources().macros).find_all(exp.Table))
        for name, query in queries
    }


def _closure(views: list[str], flat: set[str]) -> set[str]:
    """`views` and every view and raw table they read, directly or through other views (a view
    read from flat files reads nothing else)."""
    reads = _reads()
    unknown = [v for v in views if v not in reads and v.removeprefix("raw_") not in TABLES]
    if unknown:
        raise KeyError(f"no dumpcat view {', '.join(unknown)}")
    wanted: set[str] = set()
    todo = list(views)
    while todo:
        name = todo.pop()
        if name not in wanted:
            wanted.add(name)
            if name not in flat:
                todo += [r for r in reads.get(name, ()) if r in reads or r.removeprefix("raw_") in TABLES]
    return wanted


def register_views(
    spark: SparkSession, catalog_path: str | Path, views: list[str] | None = None
) -> list[str]:
    """Register every dumpcat view of the catalog at `catalog_path` as a temporary view of `spark`
    (raw tables, the views of sql/*.sql, and the table macros that run with their defaults);
    returns their names in the order they were defined. Call it again to see later commits.
    `views` (names): only those and what they read (each view takes Spark a moment to analyse)."""
    store = CatalogStore(catalog_path)
    snap = store.union_snapshot()  # the default shard and every writer's (docs/scale-out.md)
    table_files = store.table_files(snap)
    flat_files = store.flat_files(snap)
    flat = {name for name in FLAT_VIEWS if flat_files is not None and flat_files.get(name)}
    wanted = None if views is None else _closure(views, flat)
    # by value (a lambda), so that executors need not have dumpcat installed
    spark.udf.register(FORMAT_G, lambda v: None if v is None else format(v, "g"), "string")
    names: list[str] = []
    for table in TABLES:
        if wanted is None or f"raw_{table}" in wanted:
            _read_raw(spark, table, table_files.get(table, [])).createOrReplaceTempView(f"raw_{table}")
            names.append(f"raw_{table}")
    for name, _query in _sources().views:
        if wanted is not None and name not in wanted:
            continue
        if name in flat:
            _read_flat(spark, flat_files[name]).createOrReplaceTempView(name)
        else:
            _define(spark, name, spark_sql)
        names.append(name)
    for name in _default_callable():
        if wanted is None or name in wanted:
            _define(spark, name, _default_macro_sql)
            names.append(name)
    return names


def _define(spark: SparkSession, name: str, translate: Callable[[str], str]) -> None:
    """A temporary view holding its analysed plan (views over views are not analysed again on each
    use, as SQL-text views are: registration took 3x longer); an error names the view."""
    try:
        spark.sql(translate(name)).createOrReplaceTempView(name)
    except Exception as exc:
        raise RuntimeError(f"view {name} of sql/*.sql could not be defined in Spark: {exc}") from exc
