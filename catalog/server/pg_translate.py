"""PostgreSQL catalog queries translated to the server's DuckDB engine with a real SQL parser.

Drivers, ORMs and BI tools read PostgreSQL's system catalogs (`pg_catalog.pg_class`,
`information_schema.columns`, `'stats'::regclass`, `format_type(...)`, `OPERATOR(pg_catalog.~)`).
The server emulates those catalogs as views and macros in the schemas `dumpcat_pg` and
`dumpcat_is` of its read-only views database (`catalog.server.pg_catalog`). A statement that names any
of them is parsed with sqlglot's PostgreSQL grammar, its syntax tree is rewritten node by node
(table references, function calls, casts, operators, collations) and DuckDB SQL is generated from
the tree. Nothing is done with patterns over the client's text.

Which statements need it is decided from DuckDB's tokenizer: only a statement holding a catalog
word (a `pg_` name, `information_schema`, a `reg*` type, an emulated function ...) is translated;
every other statement, including all of DuckDB's own syntax (lambdas, `FROM x SELECT`, `PIVOT`,
`list_filter`), goes to DuckDB as the client wrote it.

Both steps are linear in the text (the tokenizer in C++, sqlglot's tokenizer and recursive-descent
parser in Python) and translations are cached by text. Statements larger than `MAX_TRANSLATED`
or nested deeper than Python's recursion allows are refused, not translated.
"""

from __future__ import annotations

import collections
import functools
import typing

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import SqlglotError
from sqlglot.tokens import TokenType

from catalog.server import pg_catalog
from catalog.session_commands import _IDENT, _KEYWORD, CommandError, tokens

MAX_TRANSLATED = 64 << 10  # bytes of a catalog query (real clients send < 10 KiB); larger ones are refused

PG = "dumpcat_pg"
IS = "dumpcat_is"


class _Postgres(Postgres):
    """PostgreSQL's grammar with its OID types as type names (sqlglot reads `oid` as a plain
    identifier, so `$1::oid[]` would not parse): unsigned 32-bit integers, as in PostgreSQL."""

    class Tokenizer(Postgres.Tokenizer):
        KEYWORDS: typing.ClassVar = {
            **Postgres.Tokenizer.KEYWORDS,
            **dict.fromkeys(("OID", "XID", "XID8", "CID", "TID"), TokenType.UINT),
        }


class TranslationError(ValueError):
    """A catalog query that cannot be translated; carries a SQLSTATE."""

    def __init__(self, message: str, sqlstate: str = "42601") -> None:
        super().__init__(message)
        self.sqlstate = sqlstate


# Types DuckDB does not have, and what a cast to them becomes.
_OID_TYPES = {"oid", "xid", "xid8", "cid", "tid", "regconfig", "regdictionary", "regcollation", "regoperator",
              "regoper"}  # fmt: skip
_NAME_TYPES = {"name", "char", "bpchar", "pg_node_tree", "aclitem", "int2vector", "oidvector", "anyarray"}
_REG_TYPES = {"regclass", "regtype", "regproc", "regprocedure", "regnamespace", "regrole"}

# Catalog columns of type regproc: an OID that PostgreSQL shows as the function's name.
REGPROC_COLUMNS = {
    "typinput", "typoutput", "typreceive", "typsend", "typmodin", "typmodout", "typanalyze", "typsubscript",
    "aggfnoid", "aggtransfn", "aggfinalfn", "aggcombinefn", "aggserialfn", "aggdeserialfn", "oprcode",
    "oprrest", "oprjoin", "rngcanonical", "rngsubdiff",
}  # fmt: skip

# Words that make a statement a catalog query (the tokenizer's identifiers and keywords).
_TRIGGERS = (
    {"pg_catalog", "information_schema", "operator", "collate", "current_user", "session_user",
     "current_schema", "current_schemas", "current_catalog", "user", "json_build_object",
     "jsonb_build_object"}
    | _REG_TYPES | pg_catalog.FUNCTIONS
)  # fmt: skip
_TYPE_TRIGGERS = _OID_TYPES | _NAME_TYPES | {"regclass"}


def needs_translation(text: str) -> bool:
    """Whether `text` names anything of the emulated PostgreSQL catalogs."""
    try:
        toks = tokens(text)
    except CommandError:
        return False
    previous = ""
    for i, tok in enumerate(toks):
        if tok.kind not in (_IDENT, _KEYWORD):
            previous = tok.text
            continue
        word = tok.word.lower()
        if word in _TRIGGERS or word.startswith("pg_") or word.startswith("_pg_"):
            return True
        if word in _TYPE_TRIGGERS and previous.lower() in ("::", "as"):
            return True
        if word == pg_catalog.DATABASE and i + 1 < len(toks) and toks[i + 1].text == ".":
            return True
        previous = tok.text
    return False


@functools.lru_cache(maxsize=2048)
def translate(text: str) -> str:
    """DuckDB SQL for one PostgreSQL catalog statement (raises TranslationError)."""
    if len(text.encode()) > MAX_TRANSLATED:
        raise TranslationError(
            f"catalog query too large to translate: more than {MAX_TRANSLATED >> 10} KiB", "54000"
        )
    try:
        trees = sqlglot.parse(text, read=_Postgres)
    except RecursionError as exc:
        raise TranslationError("statement too complex: nested too deeply", "54001") from exc
    except SqlglotError as exc:
        raise TranslationError(_first_line(exc)) from exc
    trees = [t for t in trees if t is not None]
    if len(trees) != 1:
        raise TranslationError("one SQL statement at a time")
    tree = trees[0]
    if isinstance(tree, exp.Command):
        raise TranslationError(f'syntax error at or near "{tree.this}"')
    try:
        tree = _rewrite(tree)
        sql = tree.sql(dialect="duckdb")
        _remember_params(sql, tree)
        return sql
    except RecursionError as exc:
        raise TranslationError("statement too complex: nested too deeply", "54001") from exc
    except SqlglotError as exc:
        raise TranslationError(_first_line(exc)) from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# -- the rewrite -----------------------------------------------------------------------------


def _rewrite(tree: exp.Expression) -> exp.Expression:
    """Every node rewritten after its children (reversed pre-order), so a replacement carries
    children that are already rewritten."""
    from sqlglot.optimizer.normalize_identifiers import normalize_identifiers

    tree = normalize_identifiers(tree, dialect="postgres")  # unquoted names fold to lower case
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    output_casts = _output_positions(tree)
    for node in reversed(list(tree.dfs())):
        parent, key, index = node.parent, node.arg_key, node.index
        new = _node(node, ctes, output_casts)
        if new is node:
            continue
        if node is tree:
            tree = new
        elif parent is not None:  # the replacement may hold `node` itself: set it where node was
            parent.set(key, new, index)
    return tree


def _output_positions(tree: exp.Expression) -> set[int]:
    """ids of expressions whose value a client sees (a SELECT list item, or the operand of a cast to
    text): there a regclass/regtype/regproc shows as a name, elsewhere it compares as an oid."""
    seen: set[int] = set()
    for select in tree.find_all(exp.Select):
        for item in select.expressions:
            inner = item.this if isinstance(item, exp.Alias) else item
            seen.add(id(inner))
    for cast in tree.find_all(exp.Cast):
        if _type_name(cast.args.get("to")) in ("text", "varchar", "name", "bpchar", "char", "nvarchar"):
            seen.add(id(cast.this))
    return seen


def _qualified(name: str, args: list[exp.Expression]) -> exp.Expression:
    return exp.Dot(this=exp.to_identifier(PG), expression=exp.Anonymous(this=name, expressions=args))


def _type_name(to: exp.Expression) -> str:
    if isinstance(to, exp.ObjectIdentifier):
        return to.name.lower()
    if isinstance(to, exp.DataType):
        if to.this == exp.DataType.Type.USERDEFINED:
            kind = to.args.get("kind")
            if isinstance(kind, exp.Dot):  # pg_catalog.text
                kind = kind.expression
            return (kind.name if isinstance(kind, exp.Identifier) else str(kind)).lower().split(".")[-1]
        return to.this.value.lower()
    return ""


def _plain_type(to: exp.Expression) -> exp.Expression:
    """A type named with its schema (pg_catalog.int4) as the type itself."""
    if isinstance(to, exp.DataType) and to.this == exp.DataType.Type.USERDEFINED:
        kind = to.args.get("kind")
        pg_schema = isinstance(kind, exp.Dot) and isinstance(kind.this, exp.Identifier)
        if pg_schema and kind.this.name.lower() == "pg_catalog":
            return exp.DataType.build(kind.expression.name, dialect="postgres")
    return to


def _node(node: exp.Expression, ctes: set[str], outputs: set[int]) -> exp.Expression:
    if isinstance(node, exp.Table):
        return _table(node, ctes)
    if isinstance(node, exp.Dot) and isinstance(node.this, exp.Identifier):
        schema = node.this.name.lower()
        if schema in ("pg_catalog", "information_schema", PG) and isinstance(node.expression, exp.Func):
            return _function(node.expression, qualified=True)
        return node
    if isinstance(node, exp.Anonymous):
        if isinstance(node.parent, exp.Dot):
            return node  # handled with its qualifier
        return _function(node, qualified=False)
    if isinstance(node, exp.CurrentUser | exp.SessionUser):
        return exp.Literal.string(pg_catalog.OWNER)
    if isinstance(node, exp.CurrentSchema):
        return exp.Literal.string("public")
    if isinstance(node, exp.CurrentDatabase | exp.CurrentCatalog):
        return exp.Literal.string(pg_catalog.DATABASE)
    if isinstance(node, exp.CurrentSchemas):
        return _qualified("current_schemas", [node.this] if node.this is not None else [exp.false()])
    if isinstance(node, exp.Column) and not node.table and node.name == "user" and not node.this.quoted:
        return exp.Literal.string(pg_catalog.OWNER)  # PostgreSQL's USER is current_user
    if isinstance(node, exp.CurrentVersion):
        return _qualified("version", [])
    if isinstance(node, exp.Cast):
        return _cast(node, outputs)
    if isinstance(node, exp.Column) and isinstance(node.args.get("db"), exp.Identifier):
        schema = node.args["db"].name.lower()  # pg_catalog.pg_namespace.nspname
        if schema in ("pg_catalog", "information_schema"):
            node.set("db", exp.to_identifier(PG if schema == "pg_catalog" else IS))
        if isinstance(node.args.get("catalog"), exp.Identifier):
            node.set("catalog", None)
    if isinstance(node, exp.Column) and id(node) in outputs and node.name.lower() in REGPROC_COLUMNS:
        shown = _qualified("regproc_out", [node.copy()])
        return exp.alias_(shown, node.name, quoted=False) if isinstance(node.parent, exp.Select) else shown
    if isinstance(node, exp.Operator):
        return _operator(node)
    if isinstance(node, exp.Like | exp.ILike) and not isinstance(node.parent, exp.Escape):
        return exp.Escape(this=node, expression=exp.Literal.string("\\"))  # PostgreSQL's default escape
    if isinstance(node, exp.Collate):
        return node.this  # PostgreSQL collations ("C", pg_catalog.default): DuckDB compares bytes
    if isinstance(node, exp.DataType) and node.is_type(*exp.DataType.TEXT_TYPES):
        node.set("expressions", [])  # varchar(30): DuckDB strings have no length
        return node
    return node


# Functions DuckDB can call in FROM; any other function there is a scalar one, which PostgreSQL
# lets stand in FROM as one row of one column named by its alias.
_TABLE_FUNCTIONS = {"unnest", "generate_series", "range", "json_each", "json_tree", "pg_get_keywords",
                    "pg_options_to_table", "generate_subscripts"}  # fmt: skip


def _table(node: exp.Table, ctes: set[str]) -> exp.Expression:
    if isinstance(node.this, exp.Func):
        return _function_in_from(node)
    return _relation(node, ctes)


def _function_in_from(node: exp.Table) -> exp.Expression:
    db = node.args.get("db")
    if isinstance(db, exp.Identifier) and db.name.lower() in ("pg_catalog", "information_schema"):
        node.set("db", None)  # pg_catalog.generate_series(...): DuckDB's own
    fn = node.this
    name = (fn.name if isinstance(fn, exp.Anonymous) else fn.sql_name()).lower()
    alias = node.args.get("alias")
    alias_name = alias.name if isinstance(alias, exp.TableAlias) and alias.name else ""
    has_columns = isinstance(alias, exp.TableAlias) and bool(alias.columns)
    if (
        isinstance(fn, exp.ExplodingGenerateSeries | exp.GenerateSeries | exp.Unnest)
        or name in _TABLE_FUNCTIONS
    ):
        if alias_name and not has_columns and not isinstance(fn, exp.Unnest):
            alias.set("columns", [exp.to_identifier(alias_name)])  # generate_series(...) AS i: column i
        return node
    column = alias_name or name
    inner = exp.select(exp.alias_(fn.copy(), column)).subquery(column)
    return inner
    return node


def _relation(node: exp.Table, ctes: set[str]) -> exp.Expression:
    name = node.name.lower()
    db = node.args.get("db")
    schema = db.name.lower() if isinstance(db, exp.Identifier) else ""
    catalog_ = node.args.get("catalog")
    if isinstance(catalog_, exp.Identifier):
        if catalog_.name.lower() != pg_catalog.DATABASE:
            raise TranslationError(
                f'cross-database references are not implemented: "{node.sql(dialect="postgres")}"', "0A000"
            )
        node.set("catalog", None)
    if schema == "pg_catalog" or (not schema and name not in ctes and name in pg_catalog.RELATIONS):
        if name not in pg_catalog.RELATIONS:
            raise TranslationError(f'relation "pg_catalog.{name}" does not exist', "42P01")
        node.set("db", exp.to_identifier(PG))
        node.set("this", exp.to_identifier(name))
    elif schema == "information_schema":
        if name not in pg_catalog.INFO_RELATIONS:
            raise TranslationError(f'relation "information_schema.{name}" does not exist', "42P01")
        node.set("db", exp.to_identifier(IS))
        node.set("this", exp.to_identifier(name))
    return node


def _function(node: exp.Func, *, qualified: bool) -> exp.Expression:
    name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
    args = (
        list(node.expressions)
        if isinstance(node, exp.Anonymous)
        else [a for a in node.args.values() if isinstance(a, exp.Expression)]
    )
    if name in ("json_build_object", "jsonb_build_object"):
        return exp.Anonymous(this="json_object", expressions=args)
    if name in pg_catalog.FUNCTIONS:
        return _qualified(name, args)
    if qualified:
        return node  # a built-in DuckDB has too (pg_catalog.upper(...)): unqualified
    return node


def _cast(node: exp.Cast, outputs: set[int]) -> exp.Expression:
    target = _type_name(node.args.get("to"))
    value = node.this
    if target in _REG_TYPES:
        kind = {"regprocedure": "regproc"}.get(target, target)
        oid = _qualified(f"{kind}_in", [value])
        if id(node) in outputs:
            return _qualified(f"{kind}_out", [oid])
        return oid
    if target in _OID_TYPES:
        return exp.Cast(this=value, to=exp.DataType.build("UINTEGER", dialect="duckdb"))
    if target in _NAME_TYPES:
        if target in ("int2vector", "oidvector"):
            return exp.Cast(
                this=value,
                to=exp.DataType.build(
                    "SMALLINT[]" if target == "int2vector" else "UINTEGER[]", dialect="duckdb"
                ),
            )
        return exp.Cast(this=value, to=exp.DataType.build("VARCHAR"))
    to = _plain_type(node.args.get("to"))
    node.set("to", to)
    if isinstance(to, exp.DataType) and to.is_type(exp.DataType.Type.ARRAY):
        inner = _type_name(to.expressions[0]) if to.expressions else ""
        if inner in _OID_TYPES or inner in _REG_TYPES:
            return exp.Cast(this=value, to=exp.DataType.build("UINTEGER[]", dialect="duckdb"))
        if inner in _NAME_TYPES:
            return exp.Cast(this=value, to=exp.DataType.build("VARCHAR[]"))
    return node


_OPERATORS = {
    "~": lambda a, b: exp.RegexpLike(this=a, expression=b),
    "~*": lambda a, b: exp.RegexpILike(this=a, expression=b),
    "!~": lambda a, b: exp.Not(this=exp.RegexpLike(this=a, expression=b)),
    "!~*": lambda a, b: exp.Not(this=exp.RegexpILike(this=a, expression=b)),
    "=": lambda a, b: exp.EQ(this=a, expression=b),
    "<>": lambda a, b: exp.NEQ(this=a, expression=b),
    "!=": lambda a, b: exp.NEQ(this=a, expression=b),
    "<": lambda a, b: exp.LT(this=a, expression=b),
    ">": lambda a, b: exp.GT(this=a, expression=b),
    "<=": lambda a, b: exp.LTE(this=a, expression=b),
    ">=": lambda a, b: exp.GTE(this=a, expression=b),
    "~~": lambda a, b: exp.Like(this=a, expression=b),
    "~~*": lambda a, b: exp.ILike(this=a, expression=b),
    "||": lambda a, b: exp.DPipe(this=a, expression=b),
}


def _operator(node: exp.Operator) -> exp.Expression:
    op = str(node.args.get("operator", "")).replace(" ", "")
    schema, _, symbol = op.rpartition(".")
    if schema.lower() not in ("", "pg_catalog") or symbol not in _OPERATORS:
        raise TranslationError(f"operator does not exist: {op}", "42883")
    return _OPERATORS[symbol](node.this, node.expression)


# -- SELECT set_config(...) -------------------------------------------------------------------


def set_config_call(text: str) -> tuple[str, str, str] | None:
    """(name, value, is_local) of a statement that is only `SELECT set_config('name', 'value', b)`:
    the server answers it as a SET (what drivers such as asyncpg use it for). None otherwise."""
    try:
        toks = tokens(text)
    except CommandError:
        return None
    words = [t.word.lower() for t in toks if t.kind in (_IDENT, _KEYWORD)]
    if "set_config" not in words or "from" in words:
        return None
    try:
        tree = sqlglot.parse_one(text, read=_Postgres)
    except (SqlglotError, RecursionError):
        return None
    if not isinstance(tree, exp.Select) or len(tree.expressions) != 1 or tree.args.get("from_"):
        return None
    call = tree.expressions[0]
    call = call.this if isinstance(call, exp.Alias) else call
    if isinstance(call, exp.Dot):
        call = call.expression
    if not isinstance(call, exp.Anonymous) or call.name.lower() != "set_config" or len(call.expressions) != 3:
        return None
    name, value, local = call.expressions
    if not (isinstance(name, exp.Literal) and name.is_string and isinstance(value, exp.Literal)):
        return None
    return name.this, str(value.this), local.sql().lower()


# -- parameter types ----------------------------------------------------------------------------

_COMPARISONS = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.Like, exp.ILike, exp.NullSafeEQ)
TEXT, INT8, FLOAT8, BOOL = 25, 20, 701, 16


# Parameter types found on the trees of translated statements, by their DuckDB text (sqlglot
# cannot always read its own DuckDB output back).
_TRANSLATED_PARAMS: collections.OrderedDict[str, list[exp.Expression]] = collections.OrderedDict()


def _remember_params(sql: str, tree: exp.Expression) -> None:
    params = list(tree.find_all(exp.Placeholder, exp.Parameter))
    if params:
        _TRANSLATED_PARAMS[sql] = params
        while len(_TRANSLATED_PARAMS) > 2048:
            _TRANSLATED_PARAMS.popitem(last=False)


def param_types(query: str, n: int, column_oids: dict[str, int] | None = None) -> list[int]:
    """The PostgreSQL type OID of each $1..$n of a (DuckDB) query, inferred as PostgreSQL infers
    them from where they stand: compared with a column (its type), with a literal, cast to a
    type, in LIMIT/OFFSET (bigint), in `= ANY($n)` (an array of the other side's type). A parameter
    whose type cannot be told is text, as PostgreSQL takes an unknown literal."""
    types = [0] * n
    params = _TRANSLATED_PARAMS.get(query)
    if params is None:
        try:
            params = list(sqlglot.parse_one(query, read="duckdb").find_all(exp.Placeholder, exp.Parameter))
        except (SqlglotError, RecursionError):
            return [TEXT] * n
    columns = column_oids or {}
    for node in params:
        index = _param_index(node)
        if index is None or not 1 <= index <= n or types[index - 1]:
            continue
        types[index - 1] = _param_type(node, columns)
    return [t or TEXT for t in types]


def _param_index(node: exp.Expression) -> int | None:
    name = node.this
    text = name.this if isinstance(name, exp.Expression) else name
    try:
        return int(str(text).lstrip("$"))
    except (TypeError, ValueError):
        return None


def _expression_type(node: exp.Expression, columns: dict[str, int]) -> int:
    if isinstance(node, exp.Column):
        return columns.get(node.name.lower(), 0)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return TEXT
        return INT8 if str(node.this).lstrip("-").isdigit() else FLOAT8
    if isinstance(node, exp.Boolean):
        return BOOL
    if isinstance(node, exp.Cast):
        return _datatype_oid(node.args.get("to"))
    return 0


def _datatype_oid(to: exp.Expression | None) -> int:
    from catalog.server import pgwire

    if not isinstance(to, exp.DataType):
        return 0
    if to.is_type(exp.DataType.Type.ARRAY) and to.expressions:
        inner = _datatype_oid(to.expressions[0])
        return pgwire.ARRAY_OF.get(inner, 0)
    name = to.sql(dialect="duckdb").upper()
    return pgwire.DUCK_TYPE_OIDS.get(name, {"INT": 23, "TEXT": 25, "DECIMAL": 1700}.get(name, 0))


def _param_type(node: exp.Expression, columns: dict[str, int]) -> int:
    from catalog.server import pgwire

    parent = node.parent
    while isinstance(parent, exp.Paren):
        node, parent = parent, parent.parent
    if isinstance(parent, exp.Cast):
        return _datatype_oid(parent.args.get("to"))
    if isinstance(parent, exp.Limit | exp.Offset | exp.Fetch):
        return INT8
    if isinstance(parent, exp.Any | exp.All):
        comparison = parent.parent
        if isinstance(comparison, _COMPARISONS):
            other = comparison.this if comparison.expression is parent else comparison.expression
            # an array of the other side's type; of text where that is not known (PostgreSQL
            # would know it; a text array still compares with anything DuckDB can cast)
            return pgwire.ARRAY_OF.get(_expression_type(other, columns) or TEXT, 0)
    if isinstance(parent, _COMPARISONS):
        other = parent.expression if parent.this is node else parent.this
        return _expression_type(other, columns)
    if isinstance(parent, exp.In):
        return _expression_type(parent.this, columns)
    if isinstance(parent, exp.Between):
        return _expression_type(parent.this, columns)
    return 0
