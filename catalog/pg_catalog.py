"""Enough of PostgreSQL's `pg_catalog` and `information_schema` for clients browsing the catalog.

DuckDB ships a `pg_catalog` of its own, but its OIDs are DuckDB's (`format_type(20)` is not
`bigint`) and it lacks what psql, JDBC and BI tools ask for. The server defines, in schemas
`dumpcat_pg` and `dumpcat_is`, views and macros with PostgreSQL's OIDs that show the catalog's
user views as tables of schema `public` (a real DuckDB schema forwarding to them), and rewrites
each incoming query so that `pg_catalog.x`, bare `pg_x` catalog names, `information_schema.x`,
`'name'::regclass`, `::oid`, `OPERATOR(pg_catalog.~)` and `COLLATE pg_catalog.default` reach
them. The rewrite never touches string literals other than the one cast to regclass/regtype.
"""

from __future__ import annotations

import re

import duckdb

from catalog import pgwire
from catalog.views import USER_VIEWS

PG_VERSION = "14.0"
DATABASE = "dumpcat"
OWNER = "dumpcat"
FIRST_OID = 16384


def view_oids() -> dict[str, int]:
    return {name: FIRST_OID + i for i, name in enumerate(sorted(USER_VIEWS))}


def _settings_case(missing_ok: str = "false") -> str:
    """SQL CASE answering `current_setting(name[, missing_ok])` from the PostgreSQL settings the
    server reports (Grafana asks for server_version_num and search_path); any other name is an
    error, as in PostgreSQL (NULL with missing_ok). DuckDB's own settings are never visible."""
    whens = " ".join(f"WHEN '{k.lower()}' THEN '{v}'" for k, v in SERVER_SETTINGS.items())
    unknown = "error('unrecognized configuration parameter \"' || name || '\"')"
    return f"CASE lower(name) {whens} ELSE CASE WHEN {missing_ok} THEN NULL ELSE {unknown} END END"


def _version_num() -> str:
    """`server_version_num` for PG_VERSION: '14.0' -> '140000'."""
    major, _, minor = PG_VERSION.partition(".")
    return f"{int(major) * 10000 + int(minor or 0)}"


def _values(rows: list[tuple], names: str) -> str:
    def lit(v: object) -> str:
        if v is None:
            return "NULL"
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int):
            return str(v)
        return "'" + str(v).replace("'", "''") + "'"

    body = ", ".join("(" + ", ".join(lit(v) for v in r) + ")" for r in rows)
    return f"(VALUES {body}) AS t({names})"


def _types_rows() -> list[tuple]:
    rows = []
    for oid, name in pgwire.TYPE_NAMES.items():
        elem = 0
        if name.startswith("_"):
            elem = next(o for o, n in pgwire.TYPE_NAMES.items() if n == name[1:])
        array = next((a for e, a in pgwire.ARRAY_OF.items() if e == oid), 0)
        length = pgwire.TYPE_SIZES.get(oid, -1)
        cats = {16: "B", 20: "N", 21: "N", 23: "N", 700: "N", 701: "N", 1700: "N",
                1082: "D", 1114: "D", 1184: "D", 1083: "D", 1186: "T"}  # fmt: skip
        cat = "A" if elem else cats.get(oid, "S")
        rows.append((oid, name, 11, length, length > 0 and length <= 8, "b", cat, elem, array))
    return rows


# PostgreSQL's format_type() spelling per OID.
_FORMAT = {
    16: "boolean", 17: "bytea", 19: "name", 20: "bigint", 21: "smallint", 23: "integer", 25: "text",
    26: "oid", 114: "json", 700: "real", 701: "double precision", 1043: "character varying",
    1082: "date", 1083: "time without time zone", 1114: "timestamp without time zone",
    1184: "timestamp with time zone", 1186: "interval", 1700: "numeric", 2950: "uuid",
    1000: "boolean[]", 1005: "smallint[]", 1007: "integer[]", 1009: "text[]", 1016: "bigint[]",
    1021: "real[]", 1022: "double precision[]",
}  # fmt: skip

_EMPTY_TABLES = {
    "pg_attrdef": "oid BIGINT, adrelid BIGINT, adnum INTEGER, adbin VARCHAR",
    "pg_index": "indexrelid BIGINT, indrelid BIGINT, indnatts INTEGER, indnkeyatts INTEGER, "
    "indisunique BOOLEAN, indisprimary BOOLEAN, indisexclusion BOOLEAN, indimmediate BOOLEAN, "
    "indisclustered BOOLEAN, indisvalid BOOLEAN, indisreplident BOOLEAN, indkey VARCHAR, "
    "indcollation VARCHAR, indclass VARCHAR, indoption VARCHAR, indexprs VARCHAR, indpred VARCHAR, "
    "indnullsnotdistinct BOOLEAN",
    "pg_constraint": "oid BIGINT, conname VARCHAR, connamespace BIGINT, contype VARCHAR, "
    "condeferrable BOOLEAN, condeferred BOOLEAN, convalidated BOOLEAN, conrelid BIGINT, contypid BIGINT, "
    "conindid BIGINT, conparentid BIGINT, confrelid BIGINT, confupdtype VARCHAR, confdeltype VARCHAR, "
    "confmatchtype VARCHAR, conislocal BOOLEAN, coninhcount INTEGER, connoinherit BOOLEAN, "
    "conkey SMALLINT[], confkey SMALLINT[], conbin VARCHAR",
    "pg_description": "objoid BIGINT, classoid BIGINT, objsubid INTEGER, description VARCHAR",
    "pg_inherits": "inhrelid BIGINT, inhparent BIGINT, inhseqno INTEGER, inhdetachpending BOOLEAN",
    "pg_policy": "oid BIGINT, polname VARCHAR, polrelid BIGINT, polcmd VARCHAR, polpermissive BOOLEAN, "
    "polroles BIGINT[], polqual VARCHAR, polwithcheck VARCHAR",
    "pg_statistic_ext": "oid BIGINT, stxrelid BIGINT, stxname VARCHAR, stxnamespace BIGINT, "
    "stxowner BIGINT, stxstattarget INTEGER, stxkeys VARCHAR, stxkind VARCHAR[], stxexprs VARCHAR",
    "pg_publication": "oid BIGINT, pubname VARCHAR, pubowner BIGINT, puballtables BOOLEAN, "
    "pubinsert BOOLEAN, pubupdate BOOLEAN, pubdelete BOOLEAN, pubtruncate BOOLEAN, pubviaroot BOOLEAN",
    "pg_publication_rel": "oid BIGINT, prpubid BIGINT, prrelid BIGINT",
    "pg_publication_namespace": "oid BIGINT, pnpubid BIGINT, pnnspid BIGINT",
    "pg_trigger": "oid BIGINT, tgrelid BIGINT, tgparentid BIGINT, tgname VARCHAR, tgfoid BIGINT, "
    "tgtype INTEGER, tgenabled VARCHAR, tgisinternal BOOLEAN, tgconstraint BIGINT",
    "pg_rewrite": "oid BIGINT, rulename VARCHAR, ev_class BIGINT, ev_type VARCHAR, ev_enabled VARCHAR, "
    "is_instead BOOLEAN",
    "pg_proc": "oid BIGINT, proname VARCHAR, pronamespace BIGINT, proowner BIGINT, prolang BIGINT, "
    "prokind VARCHAR, proretset BOOLEAN, prorettype BIGINT, proargtypes VARCHAR, proargnames VARCHAR[]",
    "pg_extension": "oid BIGINT, extname VARCHAR, extowner BIGINT, extnamespace BIGINT, "
    "extrelocatable BOOLEAN, extversion VARCHAR",
    "pg_partitioned_table": "partrelid BIGINT, partstrat VARCHAR, partnatts INTEGER",
    "pg_foreign_table": "ftrelid BIGINT, ftserver BIGINT, ftoptions VARCHAR[]",
    "pg_sequence": "seqrelid BIGINT, seqtypid BIGINT",
    "pg_enum": "oid BIGINT, enumtypid BIGINT, enumsortorder DOUBLE, enumlabel VARCHAR",
    "pg_depend": "classid BIGINT, objid BIGINT, objsubid INTEGER, refclassid BIGINT, refobjid BIGINT, "
    "refobjsubid INTEGER, deptype VARCHAR",
    "pg_collation": "oid BIGINT, collname VARCHAR, collnamespace BIGINT",
    "pg_matviews": "schemaname VARCHAR, matviewname VARCHAR, matviewowner VARCHAR, definition VARCHAR",
    "pg_indexes": "schemaname VARCHAR, tablename VARCHAR, indexname VARCHAR, tablespace VARCHAR, "
    "indexdef VARCHAR",
    "pg_views": "schemaname VARCHAR, viewname VARCHAR, viewowner VARCHAR, definition VARCHAR",
}


_NULL_FUNCS = [
    "pg_get_statisticsobjdef_columns", "pg_get_partkeydef", "pg_get_triggerdef", "pg_get_ruledef",
    "pg_get_function_arguments", "pg_get_function_result", "pg_get_serial_sequence",
    "pg_get_partition_constraintdef", "pg_get_statisticsobjdef",
]  # fmt: skip


def _relations_sql() -> str:
    return _values([(oid, name) for name, oid in view_oids().items()], "oid, relname")


def setup_sql() -> list[str]:
    """Statements creating schemas public, dumpcat_pg and dumpcat_is on a catalog connection."""
    stmts = ["CREATE SCHEMA IF NOT EXISTS public", "CREATE SCHEMA IF NOT EXISTS dumpcat_pg",
             "CREATE SCHEMA IF NOT EXISTS dumpcat_is"]  # fmt: skip
    for name in USER_VIEWS:
        stmts.append(f"CREATE OR REPLACE VIEW public.{name} AS SELECT * FROM main.{name}")
    pg = "dumpcat_pg"
    type_map = _values([(k, v) for k, v in pgwire.DUCK_TYPE_OIDS.items()], "duck_type, oid")
    stmts += [
        f"CREATE OR REPLACE VIEW {pg}.duck_type_oids AS SELECT * FROM {type_map}",
        f"CREATE OR REPLACE VIEW {pg}.rels AS SELECT * FROM {_relations_sql()}",
        f"""CREATE OR REPLACE VIEW {pg}.cols AS
            SELECT r.oid AS attrelid, c.column_name AS attname, c.column_index AS attnum,
                   coalesce(m.oid, 25) AS atttypid, c.data_type AS duck_type
            FROM duckdb_columns() c JOIN {pg}.rels r ON c.table_name = r.relname
            LEFT JOIN {pg}.duck_type_oids m ON m.duck_type = c.data_type
            WHERE c.schema_name = 'main' AND c.database_name NOT IN ('system', 'temp')""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_namespace AS SELECT * FROM {
            _values(
                [
                    (11, "pg_catalog", 10, None),
                    (2200, "public", 10, None),
                    (13000, "information_schema", 10, None),
                ],
                "oid, nspname, nspowner, nspacl",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_class AS
            SELECT oid, relname, 2200::BIGINT AS relnamespace, 0::BIGINT AS reltype,
              0::BIGINT AS reloftype, 10::BIGINT AS relowner, 2::BIGINT AS relam, oid AS relfilenode,
              0::BIGINT AS reltablespace, 0 AS relpages, -1.0::FLOAT AS reltuples, 0 AS relallvisible,
              0::BIGINT AS reltoastrelid, false AS relhasindex, false AS relisshared,
              'p' AS relpersistence, 'r' AS relkind,
              (SELECT count(*) FROM {pg}.cols c WHERE c.attrelid = r.oid)::SMALLINT AS relnatts,
              0::SMALLINT AS relchecks, false AS relhasrules, false AS relhastriggers,
              false AS relhassubclass, false AS relrowsecurity, false AS relforcerowsecurity,
              true AS relispopulated, 'd' AS relreplident, false AS relispartition,
              0::BIGINT AS relrewrite, 0::BIGINT AS relfrozenxid, 0::BIGINT AS relminmxid,
              NULL::VARCHAR[] AS relacl, NULL::VARCHAR[] AS reloptions, NULL::VARCHAR AS relpartbound,
              false AS relhasoids
            FROM {pg}.rels r""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_type AS
            SELECT oid, typname, typnamespace, 10::BIGINT AS typowner, typlen::SMALLINT AS typlen,
              typbyval, typtype, typcategory, false AS typispreferred, true AS typisdefined,
              ',' AS typdelim, 0::BIGINT AS typrelid, typelem, typarray, typname || 'in' AS typinput,
              typname || 'out' AS typoutput, typname || 'recv' AS typreceive,
              typname || 'send' AS typsend, 0::BIGINT AS typmodin, 0::BIGINT AS typmodout,
              0::BIGINT AS typanalyze, 'd' AS typalign, 'p' AS typstorage, false AS typnotnull,
              0::BIGINT AS typbasetype, -1 AS typtypmod, 0 AS typndims, 0::BIGINT AS typcollation,
              NULL::VARCHAR AS typdefaultbin, NULL::VARCHAR AS typdefault, NULL::VARCHAR[] AS typacl
            FROM {
            _values(
                _types_rows(),
                "oid, typname, typnamespace, typlen, typbyval, typtype, typcategory, typelem, typarray",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_attribute AS
            SELECT attrelid, attname, atttypid, -1 AS attstattarget,
              coalesce(t.typlen, -1)::SMALLINT AS attlen, attnum::SMALLINT AS attnum,
              (CASE WHEN t.typelem <> 0 THEN 1 ELSE 0 END)::INTEGER AS attndims, -1 AS attcacheoff,
              -1 AS atttypmod, coalesce(t.typbyval, false) AS attbyval, 'p' AS attstorage,
              'd' AS attalign, false AS attnotnull, false AS atthasdef, false AS atthasmissing,
              '' AS attidentity, '' AS attgenerated, false AS attisdropped, true AS attislocal,
              0 AS attinhcount, 0::BIGINT AS attcollation, NULL::VARCHAR[] AS attacl,
              NULL::VARCHAR[] AS attoptions, NULL::VARCHAR[] AS attfdwoptions
            FROM {pg}.cols c LEFT JOIN {pg}.pg_type t ON t.oid = c.atttypid""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_database AS SELECT * FROM {
            _values(
                [(16383, DATABASE, 10, 6, "C.UTF-8", "C.UTF-8", False, True, -1, 16383, 0, 0, 1663, None)],
                "oid, datname, datdba, encoding, datcollate, datctype, datistemplate, datallowconn, "
                "datconnlimit, datlastsysoid, datfrozenxid, datminmxid, dattablespace, datacl",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_roles AS SELECT * FROM {
            _values(
                [(10, OWNER, True, False, True, False, True, False, -1, None, False, None)],
                "oid, rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, "
                "rolreplication, rolconnlimit, rolvaliduntil, rolbypassrls, rolconfig",
            )
        }""",
        f"CREATE OR REPLACE VIEW {pg}.pg_authid AS SELECT * FROM {pg}.pg_roles",
        f"""CREATE OR REPLACE VIEW {pg}.pg_user AS SELECT rolname AS usename, oid AS usesysid,
            true AS usecreatedb, true AS usesuper FROM {pg}.pg_roles""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_am AS SELECT * FROM {
            _values([(2, "heap", "t"), (403, "btree", "i")], "oid, amname, amtype")
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_tablespace AS SELECT * FROM {
            _values([(1663, "pg_default", 10)], "oid, spcname, spcowner")
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_settings AS
            SELECT name, value AS setting, NULL AS unit, 'dumpcat' AS category FROM duckdb_settings()
            WHERE false""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_tables AS SELECT 'public' AS schemaname, relname AS tablename,
            '{OWNER}' AS tableowner, NULL AS tablespace, false AS hasindexes, false AS hasrules,
            false AS hastriggers, false AS rowsecurity FROM {pg}.rels""",
    ]
    for name, cols in _EMPTY_TABLES.items():
        casts = ", ".join(f"NULL::{c.split(' ', 1)[1]} AS {c.split(' ', 1)[0]}" for c in cols.split(", "))
        stmts.append(f"CREATE OR REPLACE VIEW {pg}.{name} AS SELECT {casts} WHERE false")
    fmt_cases = " ".join(f"WHEN {k} THEN '{v}'" for k, v in _FORMAT.items())
    stmts += [
        f"CREATE OR REPLACE MACRO {pg}.format_type(t, m) AS CASE t {fmt_cases} ELSE '???' END",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_userbyid(x) AS '{OWNER}'",
        f"CREATE OR REPLACE MACRO {pg}.pg_table_is_visible(x) AS true",
        f"CREATE OR REPLACE MACRO {pg}.pg_relation_is_publishable(x) AS false",
        f"CREATE OR REPLACE MACRO {pg}.pg_type_is_visible(x) AS true",
        f"CREATE OR REPLACE MACRO {pg}.pg_function_is_visible(x) AS true",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_expr(a, b) AS NULL::VARCHAR, (a, b, c) AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.obj_description(a) AS NULL::VARCHAR, (a, b) AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.col_description(a, b) AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.shobj_description(a, b) AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_viewdef(a) AS NULL::VARCHAR, (a, b) AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_indexdef(a) AS NULL::VARCHAR, (a, b, c) AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_constraintdef(a) AS NULL::VARCHAR, (a, b) AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.pg_encoding_to_char(a) AS 'UTF8'",
        *(
            f"CREATE OR REPLACE MACRO {pg}.{f}(a) AS NULL::VARCHAR, (a, b) AS NULL::VARCHAR, "
            "(a, b, c) AS NULL::VARCHAR"
            for f in _NULL_FUNCS
        ),
        f"CREATE OR REPLACE MACRO {pg}.pg_relation_size(a) AS 0::BIGINT",
        f"CREATE OR REPLACE MACRO {pg}.pg_total_relation_size(a) AS 0::BIGINT",
        f"CREATE OR REPLACE MACRO {pg}.has_table_privilege(a, b) AS true, (a, b, c) AS true",
        f"CREATE OR REPLACE MACRO {pg}.has_schema_privilege(a, b) AS true, (a, b, c) AS true",
        f"CREATE OR REPLACE MACRO {pg}.has_database_privilege(a, b) AS true, (a, b, c) AS true",
        f"CREATE OR REPLACE MACRO {pg}.current_database() AS '{DATABASE}'",
        # Settings clients read on connect (Grafana asks for server_version_num and search_path).
        f"CREATE OR REPLACE MACRO {pg}.current_setting(name) AS {_settings_case()}, "
        f"(name, missing_ok) AS {_settings_case('missing_ok')}",
        # parse_ident('a.b') -> ['a', 'b'] (quotes removed), as Grafana's column listing uses it.
        f"""CREATE OR REPLACE MACRO {pg}.parse_ident(x) AS
            list_transform(string_split(x, '.'), lambda part: trim(part, '"'))""",
        f"CREATE OR REPLACE MACRO {pg}.current_schema() AS 'public'",
        f"CREATE OR REPLACE MACRO {pg}.current_schemas(x) AS ['public']",
        f"CREATE OR REPLACE MACRO {pg}.current_user() AS '{OWNER}'",
        f"CREATE OR REPLACE MACRO {pg}.session_user() AS '{OWNER}'",
        f"CREATE OR REPLACE MACRO {pg}.array_lower(a, d) AS CASE WHEN len(a) > 0 THEN 1 END",
        f"CREATE OR REPLACE MACRO {pg}.array_upper(a, d) AS CASE WHEN len(a) > 0 THEN len(a) END",
        f"CREATE OR REPLACE MACRO {pg}.quote_ident(x) AS CASE WHEN regexp_full_match(x, '[a-z_][a-z0-9_]*')"
        " THEN x ELSE '\"' || replace(x, '\"', '\"\"') || '\"' END",
        f"""CREATE OR REPLACE MACRO {pg}.version() AS
            'PostgreSQL {PG_VERSION} (dumpcat, DuckDB '
            || (SELECT library_version FROM pragma_version()) || ')'""",
        f"""CREATE OR REPLACE MACRO {pg}.regclass_of(n) AS
            (SELECT oid FROM {pg}.rels WHERE relname = regexp_replace(lower(n), '^(public|main)\\.', ''))""",
        f"CREATE OR REPLACE MACRO {pg}.regclass_name(o) AS coalesce((SELECT relname FROM {pg}.rels "
        "WHERE oid = o), o::VARCHAR)",
        f"CREATE OR REPLACE MACRO {pg}.regtype_of(n) AS (SELECT oid FROM {pg}.pg_type WHERE typname = n)",
        f"CREATE OR REPLACE MACRO {pg}.regnamespace_name(o) AS (SELECT nspname FROM {pg}.pg_namespace "
        "WHERE oid = o)",
        f"CREATE OR REPLACE MACRO {pg}.regtype_name(o) AS {pg}.format_type(o, NULL)",
    ]
    info = "dumpcat_is"
    stmts += [
        f"""CREATE OR REPLACE VIEW {info}.schemata AS SELECT * FROM {
            _values(
                [
                    (DATABASE, "public", OWNER),
                    (DATABASE, "pg_catalog", OWNER),
                    (DATABASE, "information_schema", OWNER),
                ],
                "catalog_name, schema_name, schema_owner",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {info}.tables AS SELECT '{DATABASE}' AS table_catalog,
            'public' AS table_schema, relname AS table_name, 'BASE TABLE' AS table_type,
            NULL AS self_referencing_column_name, NULL AS reference_generation,
            NULL AS user_defined_type_catalog, NULL AS user_defined_type_schema,
            NULL AS user_defined_type_name, 'NO' AS is_insertable_into, 'NO' AS is_typed,
            NULL AS commit_action FROM {pg}.rels""",
        f"""CREATE OR REPLACE VIEW {info}.columns AS SELECT '{DATABASE}' AS table_catalog,
            'public' AS table_schema, r.relname AS table_name, c.attname AS column_name,
            c.attnum AS ordinal_position, NULL AS column_default, 'YES' AS is_nullable,
            CASE WHEN t.typelem <> 0 THEN 'ARRAY' ELSE {pg}.format_type(c.atttypid, NULL) END AS data_type,
            NULL::INTEGER AS character_maximum_length, NULL::INTEGER AS numeric_precision,
            NULL::INTEGER AS numeric_scale, NULL::INTEGER AS datetime_precision,
            '{DATABASE}' AS udt_catalog, 'pg_catalog' AS udt_schema, t.typname AS udt_name,
            'NO' AS is_identity, 'NEVER' AS is_generated, 'NO' AS is_updatable
            FROM {pg}.cols c JOIN {pg}.rels r ON r.oid = c.attrelid
            LEFT JOIN {pg}.pg_type t ON t.oid = c.atttypid""",
        f"CREATE OR REPLACE VIEW {info}.views AS SELECT NULL::VARCHAR AS table_catalog, "
        "NULL::VARCHAR AS table_schema, NULL::VARCHAR AS table_name, NULL::VARCHAR AS view_definition "
        "WHERE false",
    ]
    return stmts


# What the server reports and SHOW/current_setting() answer (sessions start from a copy).
SERVER_SETTINGS = {
    "server_version": PG_VERSION,
    "server_version_num": _version_num(),
    "server_encoding": "UTF8",
    "client_encoding": "UTF8",
    "DateStyle": "ISO, MDY",
    "IntervalStyle": "postgres",
    "TimeZone": "UTC",
    "integer_datetimes": "on",
    "standard_conforming_strings": "on",
    "is_superuser": "off",
    "application_name": "",
    "search_path": '"$user", public',
    "transaction_isolation": "read committed",
    "default_transaction_isolation": "read committed",
    "transaction_read_only": "on",
    "default_transaction_read_only": "on",
    "max_identifier_length": "63",
    "lc_collate": "C.UTF-8",
    "lc_ctype": "C.UTF-8",
    "extra_float_digits": "1",
    "statement_timeout": "0",
}


def install(con: duckdb.DuckDBPyConnection) -> None:
    for stmt in setup_sql():
        con.execute(stmt)


# -- query rewriting -----------------------------------------------------------------------------

_PG_NAMES = (
    {"pg_namespace", "pg_class", "pg_attribute", "pg_type", "pg_database", "pg_roles", "pg_authid",
     "pg_user", "pg_am", "pg_tablespace", "pg_settings", "pg_tables"}
    | set(_EMPTY_TABLES)
)  # fmt: skip
_PG_FUNCS = {
    "format_type", "pg_get_userbyid", "pg_table_is_visible", "pg_type_is_visible", "pg_function_is_visible",
    "pg_get_expr", "obj_description", "col_description", "shobj_description", "pg_get_viewdef",
    "pg_get_indexdef", "pg_get_constraintdef", "pg_encoding_to_char", "pg_relation_size",
    "pg_total_relation_size", "has_table_privilege", "has_schema_privilege", "has_database_privilege",
    "pg_relation_is_publishable", "current_database", "current_schema", "current_schemas", "version",
    "array_lower", "array_upper",
    "quote_ident", "current_setting", "parse_ident",
}  # fmt: skip
_PG_FUNCS |= set(_NULL_FUNCS)
_INFO_NAMES = {"schemata", "tables", "columns", "views"}
# An emulated function called without `pg_catalog.` (longest names first, so none shadows another).
_BARE_PG_FUNC = re.compile(
    r"(?<![.\w])(" + "|".join(sorted(_PG_FUNCS, key=len, reverse=True)) + r")\s*\(", re.I
)

_LITERAL = re.compile(r"(?:[EeXx]?'(?:[^']|'')*')+|\"(?:[^\"]|\"\")*\"|--[^\n]*|/\*.*?\*/", re.S)
_REG_LITERAL = re.compile(r"('(?:[^']|'')*')\s*::\s*(?:pg_catalog\.)?(regclass|regtype)\b", re.I)
_REG_EXPR = re.compile(
    r"([\w.]+(?:\([^()]*\))?)\s*::\s*(?:pg_catalog\.)?(regclass|regtype|regproc|regnamespace|regrole)\b", re.I
)


def _rewrite_code(code: str) -> str:
    code = re.sub(r"OPERATOR\s*\(\s*pg_catalog\s*\.\s*([^)\s]+)\s*\)", r"\1", code, flags=re.I)
    code = re.sub(r"COLLATE\s+pg_catalog\s*\.\s*\"?default\"?", "", code, flags=re.I)
    code = re.sub(r"COLLATE\s+\"?[Cc]\"?(?=\W|$)", "", code)

    def reg_expr(m: re.Match) -> str:
        kind = m.group(2).lower()
        if kind == "regclass":
            return f"dumpcat_pg.regclass_name({m.group(1)})"
        if kind == "regtype":
            return f"dumpcat_pg.regtype_name({m.group(1)})"
        if kind == "regnamespace":
            return f"dumpcat_pg.regnamespace_name({m.group(1)})"
        if kind == "regrole":
            return f"'{OWNER}'"
        return f"{m.group(1)}::VARCHAR"

    code = _REG_EXPR.sub(reg_expr, code)
    code = re.sub(r"::\s*(?:pg_catalog\.)?(oid|regproc|xid|cid|tid)\b(?!\s*\[)", "::BIGINT", code, flags=re.I)
    code = re.sub(r"::\s*(?:pg_catalog\.)?(name|char)\b(?!\s*\[)", "::VARCHAR", code, flags=re.I)
    code = re.sub(
        r"::\s*(?:pg_catalog\.)?(oid|name|text|int2|int4)\s*\[\s*\]", "::VARCHAR[]", code, flags=re.I
    )
    code = re.sub(r"::\s*pg_catalog\.", "::", code, flags=re.I)

    def qualified(m: re.Match) -> str:
        name = m.group(1)
        low = name.lower()
        if low in _PG_NAMES or low in _PG_FUNCS:
            return f"dumpcat_pg.{low}"
        return name

    code = re.sub(r"\bpg_catalog\s*\.\s*(\w+)", qualified, code, flags=re.I)
    code = re.sub(
        r"\binformation_schema\s*\.\s*(\w+)",
        lambda m: f"dumpcat_is.{m.group(1).lower()}" if m.group(1).lower() in _INFO_NAMES else m.group(0),
        code,
        flags=re.I,
    )

    def bare(m: re.Match) -> str:
        low = m.group(1).lower()
        return f"dumpcat_pg.{low}" if low in _PG_NAMES else m.group(0)

    code = re.sub(r"(?<![.\w])(pg_\w+)\b(?!\s*\()", bare, code)
    code = _BARE_PG_FUNC.sub(lambda m: f"dumpcat_pg.{m.group(1).lower()}(", code)
    code = re.sub(r"(?<![.\w])(current_user|session_user)\b(?!\s*\()", r"dumpcat_pg.\1()", code, flags=re.I)
    code = re.sub(r"\bcurrent_schema\b(?!\s*\()", "dumpcat_pg.current_schema()", code, flags=re.I)
    return code


# Grafana's "schemas on the search path" subquery: PostgreSQL lets a scalar function stand in FROM
# (`string_to_array(...) s`), DuckDB does not. Its answer here is always the one schema, public.
_SEARCH_PATH_SUBQUERY = re.compile(
    r"IN\s*\(\s*SELECT\s+CASE\s+WHEN\s+trim\(\s*s\[i\]\s*\)"
    r".*?string_to_array\(\s*current_setting\(\s*'search_path'\s*\)\s*,\s*','\s*\)\s+(?:AS\s+)?s\s*\)",
    re.I | re.S,
)


def rewrite(query: str) -> str:
    """The query with PostgreSQL catalog references pointed at the emulation."""
    if not re.search(r"pg_|information_schema|regclass|regtype|::|OPERATOR|current_|version|quote_ident"
                     r"|format_type|session_user|array_|parse_ident", query, re.I):  # fmt: skip
        return query
    query = _SEARCH_PATH_SUBQUERY.sub("IN (SELECT 'public')", query)
    query = _REG_LITERAL.sub(
        lambda m: (
            f"dumpcat_pg.{'regclass_of' if m.group(2).lower() == 'regclass' else 'regtype_of'}({m.group(1)})"
        ),
        query,
    )
    out = []
    pos = 0
    for m in _LITERAL.finditer(query):
        out.append(_rewrite_code(query[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_rewrite_code(query[pos:]))
    return "".join(out)
