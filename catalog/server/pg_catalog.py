"""PostgreSQL 14's system catalogs, as data, for clients of `dumpcat serve`.

Drivers, ORMs and BI tools learn what a database holds from `pg_catalog` and
`information_schema`. DuckDB ships a `pg_catalog` of its own, but with DuckDB's OIDs and without
most of what clients read, so the server defines its own, in the schemas `dumpcat_pg` and
`dumpcat_is` of its read-only views database, and `catalog.server.pg_translate` points client queries at
them. Everything here is data: tables of rows (types, functions, access methods, collations,
settings) written out as `VALUES`, views over DuckDB's own metadata for the relations and columns,
and macros for the functions clients call.

What a client sees:

- the catalog's user views (`catalog.views.USER_VIEWS`) in schema `public`, as views
  (`relkind = 'v'`), with their descriptions and their columns' in `pg_description`; internal
  helper views are not listed;
- the emulated catalog relations themselves in `pg_catalog` / `information_schema`, with PostgreSQL's
  OIDs where PostgreSQL fixes them (types, catalog tables) and stable ones derived from names
  elsewhere;
- PostgreSQL 14.0 (`server_version`), one database `dumpcat`, one role `dumpcat`, a fixed list of
  settings (`SERVER_SETTINGS`): no server path, no engine setting.
"""

from __future__ import annotations

import zlib

import duckdb

from catalog.server import pgwire
from catalog.views import USER_VIEWS

PG_VERSION = "14.0"
DATABASE = "dumpcat"
OWNER = "dumpcat"
OWNER_OID = 10
PG_NS, PUBLIC_NS, INFO_NS, TEMP_NS = 11, 2200, 13000, 16386
DATABASE_OID = 16383
PG = "dumpcat_pg"
IS = "dumpcat_is"


def stable_oid(kind: str, name: str) -> int:
    """An OID for an object PostgreSQL gives no fixed OID: the same for the same name on every
    server and version (above PostgreSQL's fixed OIDs, below 2^31 so it fits int4 clients)."""
    return 100_000 + zlib.crc32(f"{kind}:{name}".encode()) % 1_000_000_000


def view_oids() -> dict[str, int]:
    """OID of each user view (relation OIDs of schema public)."""
    oids = {name: stable_oid("view", name) for name in sorted(USER_VIEWS)}
    assert len(set(oids.values())) == len(oids), "user view OIDs collide: rename or change stable_oid"
    return oids


def _version_num() -> str:
    major, _, minor = PG_VERSION.partition(".")
    return f"{int(major) * 10000 + int(minor or 0)}"


# What the server reports, and what SHOW, current_setting() and pg_settings answer: a fixed list.
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
    "transaction_deferrable": "off",
    "default_transaction_deferrable": "off",
    "max_identifier_length": "63",
    "max_index_keys": "32",
    "max_function_args": "100",
    "block_size": "8192",
    "lc_collate": "C.UTF-8",
    "lc_ctype": "C.UTF-8",
    "lc_messages": "C.UTF-8",
    "lc_monetary": "C.UTF-8",
    "lc_numeric": "C.UTF-8",
    "lc_time": "C.UTF-8",
    "extra_float_digits": "1",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    "idle_session_timeout": "0",
    "client_min_messages": "notice",
    "bytea_output": "hex",
    "escape_string_warning": "on",
    "backslash_quote": "safe_encoding",
    "row_security": "on",
    "work_mem": "4MB",
    "jit": "off",
    "synchronous_commit": "on",
    "default_tablespace": "",
    "temp_tablespaces": "",
    "session_authorization": OWNER,
    "role": "none",
    "max_connections": "128",
    "port": "5432",
    "ssl": "off",
    "in_hot_standby": "off",
    "data_checksums": "off",
    "wal_level": "replica",
    "default_text_search_config": "pg_catalog.english",
    "cursor_tuple_fraction": "0.1",
    "geqo": "on",
    "enable_seqscan": "on",
    "array_nulls": "on",
    "quote_all_identifiers": "off",
    "xmlbinary": "base64",
    "xmloption": "content",
    "gin_fuzzy_search_limit": "0",
    "timezone_abbreviations": "Default",
    "check_function_bodies": "on",
    "plan_cache_mode": "auto",
}
# The settings a client may SET (the others are read-only, as a non-superuser sees them in
# PostgreSQL); names with a dot are custom settings, as in PostgreSQL.
SESSION_SETTABLE = {name.lower() for name in SERVER_SETTINGS} - {
    "server_version", "server_version_num", "server_encoding", "integer_datetimes", "is_superuser",
    "max_identifier_length", "max_index_keys", "max_function_args", "block_size", "lc_collate", "lc_ctype",
    "transaction_read_only", "max_connections", "port", "ssl", "in_hot_standby", "data_checksums",
    "wal_level", "session_authorization",
} | {"transaction_read_only"}  # fmt: skip


def setting_vartype(value: str) -> str:
    if value in ("on", "off"):
        return "bool"
    if value.lstrip("-").isdigit():
        return "integer"
    return "string"


# -- types ---------------------------------------------------------------------------------------

# oid, name, len, category, element oid, array oid, input/output/receive/send function stem, typtype
_TYPES: list[tuple[int, str, int, str, int, int, str, str]] = [
    (16, "bool", 1, "B", 0, 1000, "bool", "b"),
    (17, "bytea", -1, "U", 0, 1001, "bytea", "b"),
    (18, "char", 1, "Z", 0, 1002, "char", "b"),
    (19, "name", 64, "S", 18, 1003, "name", "b"),
    (20, "int8", 8, "N", 0, 1016, "int8", "b"),
    (21, "int2", 2, "N", 0, 1005, "int2", "b"),
    (22, "int2vector", -1, "A", 21, 1006, "int2vector", "b"),
    (23, "int4", 4, "N", 0, 1007, "int4", "b"),
    (24, "regproc", 4, "N", 0, 1008, "regproc", "b"),
    (25, "text", -1, "S", 0, 1009, "text", "b"),
    (26, "oid", 4, "N", 0, 1028, "oid", "b"),
    (27, "tid", 6, "U", 0, 1010, "tid", "b"),
    (28, "xid", 4, "U", 0, 1011, "xid", "b"),
    (29, "cid", 4, "U", 0, 1012, "cid", "b"),
    (30, "oidvector", -1, "A", 26, 1013, "oidvector", "b"),
    (114, "json", -1, "U", 0, 199, "json_", "b"),
    (142, "xml", -1, "U", 0, 143, "xml_", "b"),
    (194, "pg_node_tree", -1, "Z", 0, 0, "pg_node_tree_", "b"),
    (700, "float4", 4, "N", 0, 1021, "float4", "b"),
    (701, "float8", 8, "N", 0, 1022, "float8", "b"),
    (705, "unknown", -2, "X", 0, 0, "unknown", "p"),
    (869, "inet", -1, "I", 0, 1041, "inet_", "b"),
    (1033, "aclitem", 12, "U", 0, 1034, "aclitem", "b"),
    (1042, "bpchar", -1, "S", 0, 1014, "bpchar", "b"),
    (1043, "varchar", -1, "S", 0, 1015, "varchar", "b"),
    (1082, "date", 4, "D", 0, 1182, "date_", "b"),
    (1083, "time", 8, "D", 0, 1183, "time_", "b"),
    (1114, "timestamp", 8, "D", 0, 1115, "timestamp_", "b"),
    (1184, "timestamptz", 8, "D", 0, 1185, "timestamptz_", "b"),
    (1186, "interval", 16, "T", 0, 1187, "interval_", "b"),
    (1266, "timetz", 12, "D", 0, 1270, "timetz_", "b"),
    (1560, "bit", -1, "V", 0, 1561, "bit_", "b"),
    (1562, "varbit", -1, "V", 0, 1563, "varbit_", "b"),
    (1700, "numeric", -1, "N", 0, 1231, "numeric_", "b"),
    (2202, "regprocedure", 4, "N", 0, 2207, "regprocedure", "b"),
    (2205, "regclass", 4, "N", 0, 2210, "regclass", "b"),
    (2206, "regtype", 4, "N", 0, 2211, "regtype", "b"),
    (2249, "record", -1, "P", 0, 2287, "record_", "p"),
    (2275, "cstring", -2, "P", 0, 1263, "cstring_", "p"),
    (2276, "any", 4, "P", 0, 0, "any_", "p"),
    (2277, "anyarray", -1, "P", 0, 0, "anyarray_", "p"),
    (2278, "void", 4, "P", 0, 0, "void_", "p"),
    (2279, "trigger", 4, "P", 0, 0, "trigger_", "p"),
    (2283, "anyelement", 4, "P", 0, 0, "anyelement_", "p"),
    (2950, "uuid", 16, "U", 0, 2951, "uuid_", "b"),
    (3802, "jsonb", -1, "U", 0, 3807, "jsonb_", "b"),
    (4089, "regnamespace", 4, "N", 0, 4090, "regnamespace", "b"),
    (4096, "regrole", 4, "N", 0, 4097, "regrole", "b"),
]
_NO_RECEIVE = {"aclitem", "pg_node_tree", "unknown", "any", "trigger"}


def _io_names(stem: str) -> tuple[str, str, str, str]:
    """PostgreSQL's I/O function names: int4in/int4out/int4recv/int4send, date_in/date_out/..."""
    if stem.endswith("_"):
        return stem + "in", stem + "out", stem + "recv", stem + "send"
    return stem + "in", stem + "out", stem + "recv", stem + "send"


def types_rows() -> list[tuple]:
    """(oid, typname, typlen, typbyval, typtype, typcategory, typelem, typarray, in, out, recv, send,
    typalign) for every base type and its array type."""
    rows = []
    for oid, name, length, cat, elem, array, stem, typtype in _TYPES:
        i, o, r, s = _io_names(stem)
        if name in _NO_RECEIVE:
            r = s = ""
        byval = 0 < length <= 8 and name not in ("name", "tid", "aclitem", "interval", "timetz", "uuid")
        align = "d" if length == 8 or name in ("interval", "timestamp", "timestamptz") else "i"
        if length == 1 or name == "name":
            align = "c"
        if length == 2:
            align = "s"
        rows.append((oid, name, length, byval, typtype, cat, elem, array, i, o, r, s, align))
        if array:
            rows.append((array, "_" + name, -1, False, "b", "A", oid, 0,
                         "array_in", "array_out", "array_recv", "array_send", "d" if length == 8 else "i"))  # fmt: skip
    return rows


# PostgreSQL's format_type() text per type OID.
FORMAT_TYPE = {
    16: "boolean", 17: "bytea", 18: '"char"', 19: "name", 20: "bigint", 21: "smallint", 22: "int2vector",
    23: "integer", 24: "regproc", 25: "text", 26: "oid", 27: "tid", 28: "xid", 29: "cid", 30: "oidvector",
    114: "json", 142: "xml", 194: "pg_node_tree", 700: "real", 701: "double precision", 705: "unknown",
    869: "inet", 1033: "aclitem", 1042: "character", 1043: "character varying", 1082: "date",
    1083: "time without time zone", 1114: "timestamp without time zone", 1184: "timestamp with time zone",
    1186: "interval", 1266: "time with time zone", 1560: "bit", 1562: "bit varying", 1700: "numeric",
    2202: "regprocedure", 2205: "regclass", 2206: "regtype", 2249: "record", 2275: "cstring", 2276: '"any"',
    2277: "anyarray", 2278: "void", 2279: "trigger", 2283: "anyelement", 2950: "uuid", 3802: "jsonb",
    4089: "regnamespace", 4096: "regrole",
}  # fmt: skip


def format_type_rows() -> list[tuple[int, str]]:
    rows = dict(FORMAT_TYPE)
    for oid, _name, _l, _c, _e, array, _s, _t in _TYPES:
        if array:
            rows[array] = FORMAT_TYPE.get(oid, _name) + "[]"
    return sorted(rows.items())


# -- functions -----------------------------------------------------------------------------------

# Functions the emulation answers (macros in dumpcat_pg); the translator qualifies calls to them.
FUNCTIONS = {
    "format_type", "pg_get_userbyid", "pg_table_is_visible", "pg_type_is_visible", "pg_function_is_visible",
    "pg_get_expr", "obj_description", "col_description", "shobj_description", "pg_get_viewdef",
    "pg_get_indexdef", "pg_get_constraintdef", "pg_encoding_to_char", "pg_char_to_encoding",
    "pg_relation_size", "pg_total_relation_size", "pg_table_size", "pg_indexes_size", "pg_database_size",
    "has_table_privilege", "has_schema_privilege", "has_database_privilege", "has_column_privilege",
    "has_function_privilege", "has_sequence_privilege", "has_any_column_privilege", "pg_has_role",
    "pg_relation_is_publishable", "current_database", "current_schemas", "version",
    "array_lower", "array_upper", "quote_ident", "current_setting", "set_config", "parse_ident",
    "pg_backend_pid", "pg_get_function_arguments", "pg_get_function_result",
    "pg_get_function_identity_arguments", "pg_get_serial_sequence", "pg_get_partkeydef",
    "pg_get_triggerdef", "pg_get_ruledef", "pg_get_partition_constraintdef", "pg_get_statisticsobjdef",
    "pg_get_statisticsobjdef_columns", "pg_get_functiondef", "pg_postmaster_start_time",
    "pg_is_in_recovery", "txid_current", "pg_current_xact_id", "pg_tablespace_location",
    "to_regclass", "to_regtype", "to_regproc", "to_regnamespace", "pg_size_pretty",
    "regclass_in", "regclass_out", "regtype_in", "regtype_out", "regproc_in", "regproc_out",
    "regnamespace_in", "regnamespace_out", "regrole_in", "regrole_out", "_pg_expandarray",
    "pg_get_keywords", "pg_options_to_table", "pg_is_other_temp_schema", "pg_my_temp_schema",
    "pg_conversion_is_visible", "pg_collation_is_visible", "pg_opclass_is_visible", "pg_ts_config_is_visible",
    "pg_jit_available", "inet_server_addr", "inet_server_port", "pg_column_is_updatable", "pg_relation_is_updatable", "_pg_truetypid", "_pg_truetypmod",
    "_pg_char_max_length", "_pg_numeric_precision", "_pg_numeric_scale", "_pg_datetime_precision",
    "array_to_string_compat", "current_query", "pg_listening_channels", "pg_stat_get_numscans", "pg_current_wal_lsn", "pg_last_wal_receive_lsn",
}  # fmt: skip


def procs_rows() -> list[tuple]:
    """(oid, proname, prorettype, nargs) of the functions clients may look up: the types' I/O
    functions (what typinput/typreceive point at) and the emulated functions."""
    names: dict[str, tuple[int, int]] = {}
    for row in types_rows():
        rettype = row[0]
        for k, fn in enumerate(row[8:12]):
            if fn:
                names.setdefault(fn, (rettype if k in (0, 2) else (2275 if k == 1 else 17), 1))
    for fn in sorted(FUNCTIONS):
        names.setdefault(fn, (25, 1))
    rows = [(stable_oid("proc", n), n, ret, nargs) for n, (ret, nargs) in sorted(names.items())]
    assert len({r[0] for r in rows}) == len(rows), "function OIDs collide"
    return rows


# -- relations -----------------------------------------------------------------------------------

# Column lists of the catalog relations (PostgreSQL 14's columns; PostgreSQL types as DuckDB types:
# oid and reg* as BIGINT, name/char as VARCHAR, int2vector/oidvector as arrays).
_B, _V, _I, _S, _F, _BOOL = "BIGINT", "VARCHAR", "INTEGER", "SMALLINT", "FLOAT", "BOOLEAN"
# Catalog tables with PostgreSQL's fixed OIDs; the views get stable ones.
CATALOG_TABLE_OIDS = {
    "pg_type": 1247, "pg_attribute": 1249, "pg_proc": 1255, "pg_class": 1259, "pg_authid": 1260,
    "pg_auth_members": 1261, "pg_database": 1262, "pg_tablespace": 1213, "pg_aggregate": 2600,
    "pg_am": 2601, "pg_attrdef": 2604, "pg_cast": 2605, "pg_constraint": 2606, "pg_conversion": 2607,
    "pg_depend": 2608, "pg_description": 2609, "pg_index": 2610, "pg_inherits": 2611, "pg_language": 2612,
    "pg_namespace": 2615, "pg_opclass": 2616, "pg_operator": 2617, "pg_rewrite": 2618, "pg_trigger": 2620,
    "pg_shdescription": 2396, "pg_collation": 3456, "pg_extension": 3079, "pg_enum": 3501, "pg_range": 3541,
    "pg_policy": 3256, "pg_publication": 6104, "pg_publication_rel": 6106, "pg_statistic_ext": 3381,
    "pg_sequence": 2224, "pg_partitioned_table": 3350, "pg_foreign_table": 3118,
    "pg_foreign_server": 1417, "pg_foreign_data_wrapper": 2328, "pg_event_trigger": 3466,
    "pg_init_privs": 3394, "pg_default_acl": 826, "pg_seclabel": 3596, "pg_transform": 3576,
    "pg_user_mapping": 1418, "pg_ts_config": 3602, "pg_largeobject_metadata": 2995, "pg_opfamily": 2753,
    "pg_amop": 2602, "pg_amproc": 2603, "pg_statistic": 2619, "pg_subscription": 6100,
}  # fmt: skip

# Relations with no rows here (a catalog of read-only views has no indexes, constraints, triggers ...).
EMPTY_RELATIONS = {
    "pg_attrdef": "oid B, adrelid B, adnum S, adbin V",
    "pg_index": "indexrelid B, indrelid B, indnatts S, indnkeyatts S, indisunique BOOL, indisprimary BOOL, "
    "indisexclusion BOOL, indimmediate BOOL, indisclustered BOOL, indisvalid BOOL, indcheckxmin BOOL, "
    "indisready BOOL, indislive BOOL, indisreplident BOOL, indkey S[], indcollation B[], indclass B[], "
    "indoption S[], indexprs V, indpred V",
    "pg_constraint": "oid B, conname V, connamespace B, contype V, condeferrable BOOL, condeferred BOOL, "
    "convalidated BOOL, conrelid B, contypid B, conindid B, conparentid B, confrelid B, confupdtype V, "
    "confdeltype V, confmatchtype V, conislocal BOOL, coninhcount I, connoinherit BOOL, conkey S[], "
    "confkey S[], conpfeqop B[], conppeqop B[], conffeqop B[], conexclop B[], conbin V",
    "pg_inherits": "inhrelid B, inhparent B, inhseqno I, inhdetachpending BOOL",
    "pg_policy": "oid B, polname V, polrelid B, polcmd V, polpermissive BOOL, polroles B[], polqual V, "
    "polwithcheck V",
    "pg_statistic_ext": "oid B, stxrelid B, stxname V, stxnamespace B, stxowner B, stxstattarget I, "
    "stxkeys S[], stxkind V[], stxexprs V",
    "pg_publication": "oid B, pubname V, pubowner B, puballtables BOOL, pubinsert BOOL, pubupdate BOOL, "
    "pubdelete BOOL, pubtruncate BOOL, pubviaroot BOOL",
    "pg_publication_rel": "oid B, prpubid B, prrelid B",
    "pg_trigger": "oid B, tgrelid B, tgparentid B, tgname V, tgfoid B, tgtype S, tgenabled V, "
    "tgisinternal BOOL, tgconstrrelid B, tgconstrindid B, tgconstraint B, tgdeferrable BOOL, "
    "tginitdeferred BOOL, tgnargs S, tgattr S[], tgargs V, tgqual V, tgoldtable V, tgnewtable V",
    "pg_rewrite": "oid B, rulename V, ev_class B, ev_type V, ev_enabled V, is_instead BOOL, ev_qual V, "
    "ev_action V",
    "pg_extension": "oid B, extname V, extowner B, extnamespace B, extrelocatable BOOL, extversion V, "
    "extconfig B[], extcondition V[]",
    "pg_partitioned_table": "partrelid B, partstrat V, partnatts S, partdefid B, partattrs S[], "
    "partclass B[], partcollation B[], partexprs V",
    "pg_foreign_table": "ftrelid B, ftserver B, ftoptions V[]",
    "pg_foreign_server": "oid B, srvname V, srvowner B, srvfdw B, srvtype V, srvversion V, srvacl V[], "
    "srvoptions V[]",
    "pg_foreign_data_wrapper": "oid B, fdwname V, fdwowner B, fdwhandler B, fdwvalidator B, fdwacl V[], "
    "fdwoptions V[]",
    "pg_sequence": "seqrelid B, seqtypid B, seqstart B, seqincrement B, seqmax B, seqmin B, seqcache B, "
    "seqcycle BOOL",
    "pg_sequences": "schemaname V, sequencename V, sequenceowner V, data_type V, start_value B, "
    "min_value B, max_value B, increment_by B, cycle BOOL, cache_size B, last_value B",
    "pg_enum": "oid B, enumtypid B, enumsortorder F, enumlabel V",
    "pg_range": "rngtypid B, rngsubtype B, rngmultitypid B, rngcollation B, rngsubopc B, rngcanonical B, "
    "rngsubdiff B",
    "pg_depend": "classid B, objid B, objsubid I, refclassid B, refobjid B, refobjsubid I, deptype V",
    "pg_shdescription": "objoid B, classoid B, description V",
    "pg_matviews": "schemaname V, matviewname V, matviewowner V, tablespace V, hasindexes BOOL, "
    "ispopulated BOOL, definition V",
    "pg_indexes": "schemaname V, tablename V, indexname V, tablespace V, indexdef V",
    "pg_tables": "schemaname V, tablename V, tableowner V, tablespace V, hasindexes BOOL, hasrules BOOL, "
    "hastriggers BOOL, rowsecurity BOOL",
    "pg_operator": "oid B, oprname V, oprnamespace B, oprowner B, oprkind V, oprcanmerge BOOL, "
    "oprcanhash BOOL, oprleft B, oprright B, oprresult B, oprcom B, oprnegate B, oprcode B, oprrest B, "
    "oprjoin B",
    "pg_cast": "oid B, castsource B, casttarget B, castfunc B, castcontext V, castmethod V",
    "pg_aggregate": "aggfnoid B, aggkind V, aggnumdirectargs S, aggtransfn B, aggfinalfn B, "
    "aggcombinefn B, aggserialfn B, aggdeserialfn B, aggmtransfn B, aggminvtransfn B, aggmfinalfn B, "
    "aggfinalextra BOOL, aggmfinalextra BOOL, aggfinalmodify V, aggmfinalmodify V, aggsortop B, "
    "aggtranstype B, aggtransspace I, aggmtranstype B, aggmtransspace I, agginitval V, aggminitval V",
    "pg_event_trigger": "oid B, evtname V, evtevent V, evtowner B, evtfoid B, evtenabled V, evttags V[]",
    "pg_init_privs": "objoid B, classoid B, objsubid I, privtype V, initprivs V[]",
    "pg_default_acl": "oid B, defaclrole B, defaclnamespace B, defaclobjtype V, defaclacl V[]",
    "pg_seclabel": "objoid B, classoid B, objsubid I, provider V, label V",
    "pg_transform": "oid B, trftype B, trflang B, trffromsql B, trftosql B",
    "pg_user_mapping": "oid B, umuser B, umserver B, umoptions V[]",
    "pg_ts_config": "oid B, cfgname V, cfgnamespace B, cfgowner B, cfgparser B",
    "pg_largeobject_metadata": "oid B, lomowner B, lomacl V[]",
    "pg_auth_members": "roleid B, member B, grantor B, admin_option BOOL",
    "pg_conversion": "oid B, conname V, connamespace B, conowner B, conforencoding I, contoencoding I, "
    "conproc B, condefault BOOL",
    "pg_opfamily": "oid B, opfmethod B, opfname V, opfnamespace B, opfowner B",
    "pg_amop": "oid B, amopfamily B, amoplefttype B, amoprighttype B, amopstrategy S, amoppurpose V, "
    "amopopr B, amopmethod B, amopsortfamily B",
    "pg_amproc": "oid B, amprocfamily B, amproclefttype B, amprocrighttype B, amprocnum S, amproc B",
    "pg_statistic": "starelid B, staattnum S, stainherit BOOL, stanullfrac F, stawidth I, stadistinct F",
    "pg_subscription": "oid B, subdbid B, subname V, subowner B, subenabled BOOL",
    "pg_locks": "locktype V, database B, relation B, page I, tuple S, virtualxid V, transactionid B, "
    "classid B, objid B, objsubid S, virtualtransaction V, pid I, mode V, granted BOOL, fastpath BOOL",
    "pg_prepared_xacts": "transaction B, gid V, prepared TIMESTAMPTZ, owner V, database V",
    "pg_stat_user_tables": "relid B, schemaname V, relname V, seq_scan B, seq_tup_read B, idx_scan B, "
    "idx_tup_fetch B, n_tup_ins B, n_tup_upd B, n_tup_del B, n_live_tup B, n_dead_tup B",
    "pg_statio_user_tables": "relid B, schemaname V, relname V, heap_blks_read B, heap_blks_hit B",
    "pg_stat_user_indexes": "relid B, indexrelid B, schemaname V, relname V, indexrelname V, idx_scan B",
    "pg_available_extensions": "name V, default_version V, installed_version V, comment V",
    "pg_timezone_names": "name V, abbrev V, utc_offset INTERVAL, is_dst BOOL",
    "pg_timezone_abbrevs": "abbrev V, utc_offset INTERVAL, is_dst BOOL",
    "pg_cursors": "name V, statement V, is_holdable BOOL, is_binary BOOL, is_scrollable BOOL, "
    "creation_time TIMESTAMPTZ",
    "pg_prepared_statements": "name V, statement V, prepare_time TIMESTAMPTZ, parameter_types V[], "
    "from_sql BOOL",
    "pg_replication_slots": "slot_name V, plugin V, slot_type V, datoid B, database V, active BOOL",
    "pg_stat_replication": "pid I, usesysid B, usename V, application_name V, state V",
}  # fmt: skip

# Relations with rows (defined in setup_sql), and everything a client may name in pg_catalog.
_ROW_RELATIONS = {
    "pg_namespace", "pg_class", "pg_attribute", "pg_type", "pg_proc", "pg_description", "pg_am",
    "pg_opclass", "pg_collation", "pg_database", "pg_settings", "pg_roles", "pg_authid", "pg_user",
    "pg_shadow", "pg_tablespace", "pg_views", "pg_language", "pg_stat_activity", "pg_stat_database",
    "pg_file_settings",
}  # fmt: skip
RELATIONS = set(EMPTY_RELATIONS) | _ROW_RELATIONS
INFO_RELATIONS = {
    "schemata", "tables", "columns", "views", "routines", "parameters", "table_constraints",
    "key_column_usage", "referential_constraints", "constraint_column_usage", "check_constraints",
    "table_privileges", "column_privileges", "character_sets", "sequences", "triggers",
    "element_types", "domains", "enabled_roles", "applicable_roles", "usage_privileges",
}  # fmt: skip


def relation_oid(name: str) -> int:
    return CATALOG_TABLE_OIDS.get(name) or stable_oid("catalog", name)


# Columns of the empty relations that hold OIDs (type oid, UINTEGER here: clients such as asyncpg
# decode them as oid); the other B columns are counts and sizes (bigint).
_NOT_OIDS = {"seqstart", "seqincrement", "seqmax", "seqmin", "seqcache", "start_value", "min_value",
             "max_value", "increment_by", "cache_size", "last_value", "seq_scan", "seq_tup_read",
             "idx_scan", "idx_tup_fetch", "n_tup_ins", "n_tup_upd", "n_tup_del", "n_live_tup", "n_dead_tup",
             "heap_blks_read", "heap_blks_hit", "transaction", "transactionid"}  # fmt: skip


def _duck(spec: str) -> list[tuple[str, str]]:
    types = {"B": _B, "V": _V, "I": _I, "S": _S, "F": _F, "BOOL": _BOOL}
    cols = []
    for part in spec.split(", "):
        name, kind = part.split(" ", 1)
        base, _, arr = kind.partition("[")
        duck = "UINTEGER" if base == "B" and name not in _NOT_OIDS else types.get(base, base)
        cols.append((name, duck + ("[]" if arr else "")))
    return cols


def _lit(v: object) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    return "'" + str(v).replace("'", "''") + "'"


def _values(rows: list[tuple], columns: str) -> str:
    body = ", ".join("(" + ", ".join(_lit(v) for v in r) + ")" for r in rows)
    return f"(VALUES {body}) AS t({columns})"


def _case(mapping: dict, key: str, default: str) -> str:
    whens = " ".join(f"WHEN {_lit(k)} THEN {_lit(v)}" for k, v in mapping.items())
    return f"CASE {key} {whens} ELSE {default} END"


def _settings_case(missing_ok: str = "false") -> str:
    """current_setting(name[, missing_ok]) from SERVER_SETTINGS (an unknown name is an error, as in
    PostgreSQL; NULL with missing_ok). DuckDB's own settings are never visible."""
    whens = " ".join(f"WHEN {_lit(k.lower())} THEN {_lit(v)}" for k, v in SERVER_SETTINGS.items())
    unknown = "error('unrecognized configuration parameter \"' || name || '\"')"
    return f"CASE lower(name) {whens} ELSE CASE WHEN {missing_ok} THEN NULL ELSE {unknown} END END"


def _comment_sql() -> list[str]:
    """COMMENT ON the user views (their one-line descriptions) and their documented columns."""
    from catalog.views import column_comments_sql

    return [f"COMMENT ON VIEW main.{name} IS {_lit(text)}" for name, text in USER_VIEWS.items()] + [
        stmt.replace("COMMENT ON COLUMN ", "COMMENT ON COLUMN main.", 1) for stmt in column_comments_sql()
    ]


def _cols_sql(rels: str, databases: str) -> str:
    """The columns of `rels` (a relation with oid, relname, nsp, duck_schema) as DuckDB knows them."""
    return f"""SELECT r.oid AS attrelid, c.column_name AS attname, c.column_index AS attnum,
            coalesce(m.oid, 25)::UINTEGER AS atttypid, c.data_type AS duck_type, c.comment AS comment, r.nsp AS nsp
        FROM duckdb_columns() c JOIN {rels} r ON c.table_name = r.relname AND c.schema_name = r.duck_schema
        LEFT JOIN {PG}.duck_type_oids m ON m.duck_type = c.data_type
        WHERE {databases}"""


def _pg_class_sql(rels: str, cols: str) -> str:
    """pg_class rows of the relations in `rels`, whose columns are `cols`."""
    return f"""SELECT r.oid, r.relname, r.nsp AS relnamespace, 0::UINTEGER AS reltype,
              0::UINTEGER AS reloftype, {OWNER_OID}::UINTEGER AS relowner,
              (CASE WHEN r.relkind = 'r' THEN 2 ELSE 0 END)::UINTEGER AS relam,
              0::UINTEGER AS relfilenode, 0::UINTEGER AS reltablespace, 0 AS relpages, -1.0::FLOAT AS reltuples,
              0 AS relallvisible, 0::UINTEGER AS reltoastrelid, false AS relhasindex, false AS relisshared,
              'p' AS relpersistence, r.relkind,
              (SELECT count(*) FROM {cols} c WHERE c.attrelid = r.oid)::SMALLINT AS relnatts,
              0::SMALLINT AS relchecks, r.relkind = 'v' AS relhasrules, false AS relhastriggers,
              false AS relhassubclass, false AS relrowsecurity, false AS relforcerowsecurity,
              true AS relispopulated, 'n' AS relreplident, false AS relispartition,
              0::UINTEGER AS relrewrite, 0::BIGINT AS relfrozenxid, 0::BIGINT AS relminmxid,
              NULL::VARCHAR[] AS relacl, NULL::VARCHAR[] AS reloptions, NULL::VARCHAR AS relpartbound
        FROM {rels} r"""


def _pg_attribute_sql(cols: str) -> str:
    """pg_attribute rows of the columns in `cols`."""
    return f"""SELECT c.attrelid, c.attname, c.atttypid, -1 AS attstattarget,
              coalesce(t.typlen, -1)::SMALLINT AS attlen, c.attnum::SMALLINT AS attnum,
              (CASE WHEN t.typcategory = 'A' THEN 1 ELSE 0 END)::INTEGER AS attndims, -1 AS attcacheoff,
              -1 AS atttypmod, coalesce(t.typbyval, false) AS attbyval, coalesce(t.typalign, 'i') AS attalign,
              coalesce(t.typstorage, 'p') AS attstorage, '' AS attcompression, false AS attnotnull,
              false AS atthasdef, false AS atthasmissing, '' AS attidentity, '' AS attgenerated,
              false AS attisdropped, true AS attislocal, 0 AS attinhcount,
              coalesce(t.typcollation, 0)::UINTEGER AS attcollation, NULL::VARCHAR[] AS attacl,
              NULL::VARCHAR[] AS attoptions, NULL::VARCHAR[] AS attfdwoptions, NULL::VARCHAR AS attmissingval
        FROM {cols} c LEFT JOIN {PG}.pg_type t ON t.oid = c.atttypid"""


def setup_sql(con: duckdb.DuckDBPyConnection | None = None) -> list[str]:
    """Statements creating schemas public, dumpcat_pg and dumpcat_is on the views database."""
    pg, info = PG, IS
    stmts = ["CREATE SCHEMA IF NOT EXISTS public", f"CREATE SCHEMA IF NOT EXISTS {pg}",
             f"CREATE SCHEMA IF NOT EXISTS {info}"]  # fmt: skip
    for name in sorted(USER_VIEWS):
        stmts.append(f"CREATE OR REPLACE VIEW public.{name} AS SELECT * FROM main.{name}")
    type_map = _values(sorted(pgwire.DUCK_TYPE_OIDS.items()), "duck_type, oid")
    types = types_rows()
    procs = procs_rows()
    proc_oid = {name: oid for oid, name, _r, _n in procs}
    type_rows = [
        (oid, name, length, byval, typtype, cat, elem, array, proc_oid.get(i, 0), proc_oid.get(o, 0),
         proc_oid.get(r, 0), proc_oid.get(s, 0), align)
        for oid, name, length, byval, typtype, cat, elem, array, i, o, r, s, align in types
    ]  # fmt: skip
    catalog_names = sorted(RELATIONS)
    system_rels = [
        (relation_oid(n), n, PG_NS, "r" if n in CATALOG_TABLE_OIDS else "v") for n in catalog_names
    ]
    system_rels += [(stable_oid("information_schema", n), n, INFO_NS, "v") for n in sorted(INFO_RELATIONS)]
    user_rels = [(oid, name, PUBLIC_NS, "v") for name, oid in view_oids().items()]
    stmts += [
        f"CREATE OR REPLACE VIEW {pg}.duck_type_oids AS SELECT * FROM {type_map}",
        f"CREATE OR REPLACE VIEW {pg}.format_types AS SELECT * FROM {_values(format_type_rows(), 'oid, name')}",
        # Every relation a client can see: the user views and the emulated catalogs (fixed once the
        # views exist, so stored as tables: a client's catalog query plans against a table, not against
        # VALUES lists and a duckdb_columns() scan), then this session's temporary views (in DuckDB's
        # temp catalog; the worker names them in a variable).
        f"""CREATE OR REPLACE VIEW {pg}.rels_fixed AS SELECT oid::UINTEGER AS oid, relname, nsp::UINTEGER AS nsp,
            relkind, CASE nsp WHEN {PUBLIC_NS} THEN 'main' WHEN {PG_NS} THEN '{pg}' ELSE '{info}' END AS duck_schema
            FROM {_values(user_rels + system_rels, "oid, relname, nsp, relkind")}""",
        f"""CREATE OR REPLACE VIEW {pg}.temp_rels AS
            SELECT (3000000000 + hash(view_name) % 1000000000)::UINTEGER AS oid, view_name AS relname,
              {TEMP_NS}::UINTEGER AS nsp, 'v' AS relkind, 'main' AS duck_schema
            FROM duckdb_views() WHERE temporary
              AND list_contains(coalesce(getvariable('dumpcat_session_views'), []::VARCHAR[]), view_name)""",
        f"CREATE OR REPLACE VIEW {pg}.rels AS SELECT * FROM {pg}.rels_fixed UNION ALL SELECT * FROM {pg}.temp_rels",
        f"""CREATE OR REPLACE VIEW {pg}.cols_fixed AS {_cols_sql(f"{pg}.rels_fixed", "c.database_name NOT IN ('system', 'temp')")}""",
        f"""CREATE OR REPLACE VIEW {pg}.temp_cols AS {_cols_sql(f"{pg}.temp_rels", "c.database_name = 'temp'")}""",
        f"CREATE OR REPLACE VIEW {pg}.cols AS SELECT * FROM {pg}.cols_fixed UNION ALL SELECT * FROM {pg}.temp_cols",
        f"""CREATE OR REPLACE VIEW {pg}.pg_namespace AS SELECT oid::UINTEGER AS oid, nspname, {
            OWNER_OID
        }::BIGINT
            AS nspowner, NULL::VARCHAR[] AS nspacl FROM {
            _values(
                [
                    (PG_NS, "pg_catalog"),
                    (PUBLIC_NS, "public"),
                    (INFO_NS, "information_schema"),
                ],
                "oid, nspname",
            )
        }
        UNION ALL SELECT {TEMP_NS}::UINTEGER, 'pg_temp_1', {OWNER_OID}::BIGINT, NULL::VARCHAR[]
        WHERE len(coalesce(getvariable('dumpcat_session_views'), [])) > 0""",
        f"CREATE OR REPLACE VIEW {pg}.pg_class_fixed AS {_pg_class_sql(f'{pg}.rels_fixed', f'{pg}.cols_fixed')}",
        f"""CREATE OR REPLACE VIEW {pg}.pg_class AS SELECT * FROM {pg}.pg_class_fixed
            UNION ALL {_pg_class_sql(f"{pg}.temp_rels", f"{pg}.temp_cols")}""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_type AS
            SELECT oid::UINTEGER AS oid, typname, {PG_NS}::UINTEGER AS typnamespace, {
            OWNER_OID
        }::UINTEGER AS typowner,
              typlen::SMALLINT AS typlen, typbyval, typtype, typcategory,
              typname IN ('bool', 'text', 'float8', 'oid', 'timestamptz', 'interval') AS typispreferred,
              true AS typisdefined, ',' AS typdelim, 0::UINTEGER AS typrelid,
              (CASE WHEN typelem <> 0 AND typlen = -1 THEN {proc_oid["array_in"]} ELSE 0 END)::BIGINT
                AS typsubscript,
              typelem::UINTEGER AS typelem, typarray::UINTEGER AS typarray, typinput::UINTEGER AS typinput,
              typoutput::UINTEGER AS typoutput, typreceive::UINTEGER AS typreceive, typsend::UINTEGER AS typsend,
              0::UINTEGER AS typmodin, 0::UINTEGER AS typmodout, 0::UINTEGER AS typanalyze, typalign,
              CASE WHEN typlen = -1 THEN 'x' ELSE 'p' END AS typstorage, false AS typnotnull,
              0::UINTEGER AS typbasetype, -1 AS typtypmod, 0 AS typndims,
              (CASE WHEN typcategory = 'S' THEN 100 ELSE 0 END)::UINTEGER AS typcollation,
              NULL::VARCHAR AS typdefaultbin, NULL::VARCHAR AS typdefault, NULL::VARCHAR[] AS typacl
            FROM {
            _values(
                type_rows,
                "oid, typname, typlen, typbyval, typtype, typcategory, typelem, typarray, "
                "typinput, typoutput, typreceive, typsend, typalign",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_proc AS
            SELECT oid::UINTEGER AS oid, proname, {PG_NS}::UINTEGER AS pronamespace, {OWNER_OID}::UINTEGER AS proowner,
              12::UINTEGER AS prolang, 1.0::FLOAT AS procost, 0.0::FLOAT AS prorows, 0::UINTEGER AS provariadic,
              0::UINTEGER AS prosupport, 'f' AS prokind, false AS prosecdef, false AS proleakproof,
              true AS proisstrict, false AS proretset, 'i' AS provolatile, 's' AS proparallel,
              nargs::SMALLINT AS pronargs, 0::SMALLINT AS pronargdefaults, rettype::UINTEGER AS prorettype,
              [2275::UINTEGER][1:nargs] AS proargtypes, NULL::UINTEGER[] AS proallargtypes,
              NULL::VARCHAR[] AS proargmodes, NULL::VARCHAR[] AS proargnames, NULL::VARCHAR AS proargdefaults,
              NULL::BIGINT[] AS protrftypes, proname AS prosrc, NULL::VARCHAR AS probin,
              NULL::VARCHAR AS prosqlbody, NULL::VARCHAR[] AS proconfig, NULL::VARCHAR[] AS proacl
            FROM {_values(procs, "oid, proname, rettype, nargs")}""",
        f"CREATE OR REPLACE VIEW {pg}.pg_attribute_fixed AS {_pg_attribute_sql(f'{pg}.cols_fixed')}",
        f"""CREATE OR REPLACE VIEW {pg}.pg_attribute AS SELECT * FROM {pg}.pg_attribute_fixed
            UNION ALL {_pg_attribute_sql(f"{pg}.temp_cols")}""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_description AS
            SELECT r.oid AS objoid, 1259::UINTEGER AS classoid, 0 AS objsubid, v.comment AS description
            FROM duckdb_views() v JOIN {pg}.rels_fixed r ON r.relname = v.view_name AND r.duck_schema = v.schema_name
            WHERE v.comment IS NOT NULL AND v.database_name NOT IN ('system', 'temp')
            UNION ALL
            SELECT c.attrelid, 1259::BIGINT, c.attnum::INTEGER, c.comment FROM {pg}.cols_fixed c
            WHERE c.comment IS NOT NULL""",
        f"""CREATE OR REPLACE VIEW {
            pg
        }.pg_am AS SELECT oid::UINTEGER AS oid, amname, 0::UINTEGER AS amhandler,
            amtype FROM {
            _values(
                [
                    (2, "heap", "t"),
                    (403, "btree", "i"),
                    (405, "hash", "i"),
                    (783, "gist", "i"),
                    (2742, "gin", "i"),
                    (4000, "spgist", "i"),
                    (3580, "brin", "i"),
                ],
                "oid, amname, amtype",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_opclass AS SELECT oid::UINTEGER AS oid, 403::UINTEGER AS opcmethod,
            opcname, {PG_NS}::UINTEGER AS opcnamespace, {
            OWNER_OID
        }::UINTEGER AS opcowner, oid::UINTEGER AS opcfamily,
            intype::UINTEGER AS opcintype, true AS opcdefault, 0::UINTEGER AS opckeytype
            FROM {
            _values(
                [
                    (3124, "int8_ops", 20),
                    (1978, "int4_ops", 23),
                    (1979, "int2_ops", 21),
                    (3126, "text_ops", 25),
                    (1970, "float8_ops", 701),
                    (1971, "float4_ops", 700),
                    (424, "bool_ops", 16),
                    (3128, "timestamptz_ops", 1184),
                ],
                "oid, opcname, intype",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_collation AS SELECT oid::UINTEGER AS oid, collname,
            {PG_NS}::UINTEGER AS collnamespace, {OWNER_OID}::UINTEGER AS collowner, provider AS collprovider,
            true AS collisdeterministic, -1 AS collencoding, coll AS collcollate, coll AS collctype,
            NULL::VARCHAR AS collversion
            FROM {
            _values(
                [(100, "default", "d", None), (950, "C", "c", "C"), (951, "POSIX", "c", "POSIX")],
                "oid, collname, provider, coll",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_database AS SELECT * FROM {
            _values(
                [
                    (
                        DATABASE_OID,
                        DATABASE,
                        OWNER_OID,
                        6,
                        "C.UTF-8",
                        "C.UTF-8",
                        False,
                        True,
                        -1,
                        13000,
                        0,
                        0,
                        1663,
                        None,
                    )
                ],
                "oid, datname, datdba, encoding, datcollate, datctype, datistemplate, datallowconn, "
                "datconnlimit, datlastsysoid, datfrozenxid, datminmxid, dattablespace, datacl",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_settings AS SELECT name, setting, NULL::VARCHAR AS unit,
            'dumpcat' AS category, '' AS short_desc, NULL::VARCHAR AS extra_desc, 'user' AS context, vartype,
            'default' AS source, NULL::VARCHAR AS min_val, NULL::VARCHAR AS max_val, NULL::VARCHAR[] AS enumvals,
            setting AS boot_val, setting AS reset_val, NULL::VARCHAR AS sourcefile, NULL::INTEGER AS sourceline,
            false AS pending_restart
            FROM {
            _values(
                [(k, v, setting_vartype(v)) for k, v in sorted(SERVER_SETTINGS.items())],
                "name, setting, vartype",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_file_settings AS SELECT NULL::VARCHAR AS sourcefile,
            NULL::INTEGER AS sourceline, NULL::INTEGER AS seqno, NULL::VARCHAR AS name, NULL::VARCHAR AS setting,
            NULL::BOOLEAN AS applied, NULL::VARCHAR AS error WHERE false""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_roles AS SELECT * FROM {
            _values(
                [
                    (
                        OWNER,
                        False,
                        True,
                        False,
                        False,
                        True,
                        False,
                        -1,
                        "********",
                        None,
                        False,
                        None,
                        OWNER_OID,
                    )
                ],
                "rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication, "
                "rolconnlimit, rolpassword, rolvaliduntil, rolbypassrls, rolconfig, oid",
            )
        }""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_authid AS SELECT oid, rolname, rolsuper, rolinherit, rolcreaterole,
            rolcreatedb, rolcanlogin, rolreplication, rolbypassrls, rolconnlimit, NULL::VARCHAR AS rolpassword,
            rolvaliduntil FROM {pg}.pg_roles""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_user AS SELECT rolname AS usename, oid AS usesysid,
            false AS usecreatedb, false AS usesuper, false AS userepl, false AS usebypassrls,
            '********' AS passwd, NULL::TIMESTAMPTZ AS valuntil, NULL::VARCHAR[] AS useconfig FROM {pg}.pg_roles""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_shadow AS SELECT usename, usesysid, usecreatedb, usesuper, userepl,
            usebypassrls, NULL::VARCHAR AS passwd, valuntil, useconfig FROM {pg}.pg_user WHERE false""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_tablespace AS SELECT oid::UINTEGER AS oid, spcname,
            {OWNER_OID}::UINTEGER AS spcowner, NULL::VARCHAR[] AS spcacl, NULL::VARCHAR[] AS spcoptions
            FROM {_values([(1663, "pg_default"), (1664, "pg_global")], "oid, spcname")}""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_language AS SELECT oid::UINTEGER AS oid, lanname,
            {OWNER_OID}::UINTEGER AS lanowner, lanispl, false AS lanpltrusted, 0::UINTEGER AS lanplcallfoid,
            0::UINTEGER AS laninline, 0::UINTEGER AS lanvalidator, NULL::VARCHAR[] AS lanacl
            FROM {_values([(12, "internal", False), (13, "c", False), (14, "sql", False)], "oid, lanname, lanispl")}""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_views AS SELECT CASE r.nsp WHEN {PUBLIC_NS} THEN 'public'
            WHEN {PG_NS} THEN 'pg_catalog' WHEN {TEMP_NS} THEN 'pg_temp_1' ELSE 'information_schema' END
            AS schemaname, r.relname AS viewname,
            '{OWNER}' AS viewowner, NULL::VARCHAR AS definition FROM {pg}.rels r WHERE r.relkind = 'v'""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_stat_activity AS SELECT {DATABASE_OID}::UINTEGER AS datid,
            '{DATABASE}' AS datname, getvariable('dumpcat_backend_pid')::INTEGER AS pid,
            NULL::INTEGER AS leader_pid, {OWNER_OID}::UINTEGER AS usesysid, '{OWNER}' AS usename,
            '' AS application_name, NULL::VARCHAR AS client_addr, NULL::VARCHAR AS client_hostname,
            NULL::INTEGER AS client_port, NULL::TIMESTAMPTZ AS backend_start, NULL::TIMESTAMPTZ AS xact_start,
            NULL::TIMESTAMPTZ AS query_start, NULL::TIMESTAMPTZ AS state_change, NULL::VARCHAR AS wait_event_type,
            NULL::VARCHAR AS wait_event, 'active' AS state, NULL::BIGINT AS backend_xid,
            NULL::BIGINT AS backend_xmin, NULL::BIGINT AS query_id, '' AS query, 'client backend' AS backend_type""",
        f"""CREATE OR REPLACE VIEW {pg}.pg_stat_database AS SELECT {DATABASE_OID}::UINTEGER AS datid,
            '{DATABASE}' AS datname, 0 AS numbackends, 0::BIGINT AS xact_commit, 0::BIGINT AS xact_rollback,
            0::BIGINT AS blks_read, 0::BIGINT AS blks_hit""",
    ]
    for name, spec in EMPTY_RELATIONS.items():
        casts = ", ".join(f"NULL::{t} AS {c}" for c, t in _duck(spec))
        stmts.append(f"CREATE OR REPLACE VIEW {pg}.{name} AS SELECT {casts} WHERE false")
    stmts += _function_sql(proc_oid)
    stmts += _information_schema_sql()
    return stmts


def _function_sql(proc_oid: dict[str, int]) -> list[str]:
    pg = PG
    fmt = f"(SELECT name FROM {pg}.format_types f WHERE f.oid = t)"
    nulls3 = "(a) AS NULL::VARCHAR, (a, b) AS NULL::VARCHAR, (a, b, c) AS NULL::VARCHAR"
    name_of = (
        "regexp_replace(regexp_replace(lower(n::VARCHAR), '^(public|pg_catalog|main)\\.', ''), '\"', '', 'g')"
    )
    stmts = [
        f"CREATE OR REPLACE MACRO {pg}.format_type(t, m) AS coalesce({fmt}, '???')",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_userbyid(x) AS CASE WHEN x = {OWNER_OID} THEN '{OWNER}' "
        "ELSE 'unknown (OID=' || x || ')' END",
        # on the search path ("$user", public, and pg_catalog, always), as in PostgreSQL
        f"CREATE OR REPLACE MACRO {pg}.pg_table_is_visible(x) AS coalesce((SELECT nsp IN ({PUBLIC_NS}, {PG_NS}, {TEMP_NS}) "
        f"FROM {pg}.rels WHERE oid = x), false)",
        *(
            f"CREATE OR REPLACE MACRO {pg}.{f}(x) AS true"
            for f in (
                "pg_type_is_visible",
                "pg_function_is_visible",
                "pg_conversion_is_visible",
                "pg_collation_is_visible",
                "pg_opclass_is_visible",
                "pg_ts_config_is_visible",
            )
        ),
        f"CREATE OR REPLACE MACRO {pg}.pg_relation_is_publishable(x) AS false",
        f"CREATE OR REPLACE MACRO {pg}.pg_is_other_temp_schema(x) AS false",
        f"CREATE OR REPLACE MACRO {pg}.pg_my_temp_schema() AS (CASE WHEN len(coalesce(getvariable("
        f"'dumpcat_session_views'), [])) > 0 THEN {TEMP_NS} ELSE 0 END)::UINTEGER",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_expr(a, b) AS NULL::VARCHAR, (a, b, c) AS NULL::VARCHAR",
        f"""CREATE OR REPLACE MACRO {pg}.obj_description(o) AS (SELECT description FROM {pg}.pg_description d
            WHERE d.objoid = o AND d.objsubid = 0 LIMIT 1),
            (o, c) AS (SELECT description FROM {pg}.pg_description d WHERE d.objoid = o AND d.objsubid = 0
            AND c::VARCHAR = 'pg_class' LIMIT 1)""",
        f"""CREATE OR REPLACE MACRO {pg}.col_description(o, n) AS (SELECT description FROM {pg}.pg_description d
            WHERE d.objoid = o AND d.objsubid = n LIMIT 1)""",
        f"CREATE OR REPLACE MACRO {pg}.shobj_description(a, b) AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_viewdef(a) AS NULL::VARCHAR, (a, b) AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_indexdef {nulls3}",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_constraintdef(a) AS NULL::VARCHAR, (a, b) AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.pg_encoding_to_char(a) AS CASE WHEN a = 6 THEN 'UTF8' ELSE '' END",
        f"CREATE OR REPLACE MACRO {pg}.pg_char_to_encoding(a) AS CASE WHEN upper(a) = 'UTF8' THEN 6 ELSE -1 END",
        *(
            f"CREATE OR REPLACE MACRO {pg}.{f} {nulls3}"
            for f in (
                "pg_get_statisticsobjdef_columns",
                "pg_get_partkeydef",
                "pg_get_triggerdef",
                "pg_get_ruledef",
                "pg_get_function_arguments",
                "pg_get_function_result",
                "pg_get_function_identity_arguments",
                "pg_get_serial_sequence",
                "pg_get_partition_constraintdef",
                "pg_get_statisticsobjdef",
                "pg_get_functiondef",
                "pg_tablespace_location",
                "_pg_char_max_length",
                "_pg_datetime_precision",
            )
        ),
        *(
            f"CREATE OR REPLACE MACRO {pg}.{f}(a) AS 0::BIGINT, (a, b) AS 0::BIGINT"
            for f in (
                "pg_relation_size",
                "pg_total_relation_size",
                "pg_table_size",
                "pg_indexes_size",
                "pg_database_size",
                "pg_stat_get_numscans",
            )
        ),
        f"CREATE OR REPLACE MACRO {pg}.pg_size_pretty(a) AS format_bytes(a::BIGINT)",
        *(
            f"CREATE OR REPLACE MACRO {pg}.{f}(a, b) AS true, (a, b, c) AS true, (a, b, c, d) AS true"
            for f in (
                "has_table_privilege",
                "has_schema_privilege",
                "has_database_privilege",
                "has_column_privilege",
                "has_function_privilege",
                "has_sequence_privilege",
                "has_any_column_privilege",
                "pg_has_role",
            )
        ),
        f"CREATE OR REPLACE MACRO {pg}.pg_column_is_updatable(a, b, c) AS false",
        f"CREATE OR REPLACE MACRO {pg}.pg_relation_is_updatable(a, b) AS 0",
        f"CREATE OR REPLACE MACRO {pg}.current_database() AS '{DATABASE}'",
        f"CREATE OR REPLACE MACRO {pg}.current_schemas(x) AS CASE WHEN x THEN ['pg_catalog', 'public'] "
        "ELSE ['public'] END",
        f"CREATE OR REPLACE MACRO {pg}.current_setting(name) AS {_settings_case()}, "
        f"(name, missing_ok) AS {_settings_case('missing_ok')}",
        # set_config in a query changes nothing here (the server answers SELECT set_config(...) alone as a SET)
        f"CREATE OR REPLACE MACRO {pg}.set_config(name, value, is_local) AS value::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.parse_ident(x) AS "
        "list_transform(string_split(x, '.'), lambda part: trim(part, '\"')), (x, strict) AS "
        "list_transform(string_split(x, '.'), lambda part: trim(part, '\"'))",
        f"CREATE OR REPLACE MACRO {pg}.pg_backend_pid() AS getvariable('dumpcat_backend_pid')::INTEGER",
        f"CREATE OR REPLACE MACRO {pg}.pg_postmaster_start_time() AS getvariable('dumpcat_started')::TIMESTAMPTZ",
        f"CREATE OR REPLACE MACRO {pg}.pg_is_in_recovery() AS false",
        f"CREATE OR REPLACE MACRO {pg}.pg_jit_available() AS false",
        f"CREATE OR REPLACE MACRO {pg}.txid_current() AS 1::BIGINT",
        f"CREATE OR REPLACE MACRO {pg}.pg_current_xact_id() AS 1::BIGINT",
        f"CREATE OR REPLACE MACRO {pg}.pg_current_wal_lsn() AS '0/0'",
        f"CREATE OR REPLACE MACRO {pg}.pg_last_wal_receive_lsn() AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.inet_server_addr() AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.inet_server_port() AS NULL::INTEGER",
        f"CREATE OR REPLACE MACRO {pg}.current_query() AS NULL::VARCHAR",
        f"CREATE OR REPLACE MACRO {pg}.array_lower(a, d) AS CASE WHEN len(a) > 0 AND d = 1 THEN 1 END",
        f"CREATE OR REPLACE MACRO {pg}.array_upper(a, d) AS CASE WHEN len(a) > 0 AND d = 1 THEN len(a) END",
        f"CREATE OR REPLACE MACRO {pg}.quote_ident(x) AS CASE WHEN regexp_full_match(x, '[a-z_][a-z0-9_$]*') "
        "THEN x ELSE '\"' || replace(x, '\"', '\"\"') || '\"' END",
        f"""CREATE OR REPLACE MACRO {pg}.version() AS 'PostgreSQL {PG_VERSION} (dumpcat, DuckDB '
            || (SELECT library_version FROM pragma_version()) || ') on x86_64-pc-linux-gnu, 64-bit'""",
        # reg* types: *_in gives the OID (from a name, a number, or a number as text), *_out the name.
        f"""CREATE OR REPLACE MACRO {pg}.regclass_in(n) AS CASE WHEN n IS NOT NULL THEN coalesce(TRY_CAST(n AS BIGINT),
            (SELECT oid FROM {pg}.rels WHERE relname = {name_of} ORDER BY nsp DESC LIMIT 1),
            error('relation "' || n::VARCHAR || '" does not exist')) END""",
        f"CREATE OR REPLACE MACRO {pg}.to_regclass(n) AS (SELECT oid FROM {pg}.rels WHERE relname = {name_of} "
        "ORDER BY nsp DESC LIMIT 1)",
        f"CREATE OR REPLACE MACRO {pg}.regclass_out(o) AS CASE WHEN o = 0 THEN '-' ELSE coalesce((SELECT relname "
        f"FROM {pg}.rels WHERE oid = o), o::VARCHAR) END",
        f"""CREATE OR REPLACE MACRO {pg}.regtype_in(n) AS CASE WHEN n IS NOT NULL THEN coalesce(TRY_CAST(n AS BIGINT),
            (SELECT oid FROM {pg}.pg_type WHERE typname = {name_of}),
            (SELECT oid FROM {pg}.format_types WHERE name = {name_of}),
            (SELECT oid FROM {pg}.pg_type WHERE {name_of} LIKE '%[]' AND typname = '_' || replace({name_of}, '[]', '')),
            error('type "' || n::VARCHAR || '" does not exist')) END""",
        f"CREATE OR REPLACE MACRO {pg}.to_regtype(n) AS coalesce((SELECT oid FROM {pg}.pg_type "
        f"WHERE typname = {name_of}), (SELECT oid FROM {pg}.format_types WHERE name = {name_of}))",
        f"CREATE OR REPLACE MACRO {pg}.regtype_out(o) AS CASE WHEN o = 0 THEN '-' ELSE coalesce((SELECT name "
        f"FROM {pg}.format_types WHERE oid = o), o::VARCHAR) END",
        f"""CREATE OR REPLACE MACRO {pg}.regproc_in(n) AS CASE WHEN n IS NOT NULL THEN coalesce(TRY_CAST(n AS BIGINT),
            (SELECT oid FROM {pg}.pg_proc WHERE proname = {name_of} LIMIT 1),
            CASE WHEN n::VARCHAR = '-' THEN 0 END,
            error('function "' || n::VARCHAR || '" does not exist')) END""",
        f"CREATE OR REPLACE MACRO {pg}.to_regproc(n) AS (SELECT oid FROM {pg}.pg_proc WHERE proname = {name_of} "
        "LIMIT 1)",
        f"CREATE OR REPLACE MACRO {pg}.regproc_out(o) AS CASE WHEN o = 0 THEN '-' ELSE coalesce((SELECT proname "
        f"FROM {pg}.pg_proc WHERE oid = o), o::VARCHAR) END",
        f"""CREATE OR REPLACE MACRO {pg}.regnamespace_in(n) AS CASE WHEN n IS NOT NULL THEN coalesce(TRY_CAST(n AS BIGINT),
            (SELECT oid FROM {pg}.pg_namespace WHERE nspname = {name_of}),
            error('schema "' || n::VARCHAR || '" does not exist')) END""",
        f"CREATE OR REPLACE MACRO {pg}.to_regnamespace(n) AS (SELECT oid FROM {pg}.pg_namespace "
        f"WHERE nspname = {name_of})",
        f"CREATE OR REPLACE MACRO {pg}.regnamespace_out(o) AS CASE WHEN o = 0 THEN '-' ELSE coalesce((SELECT "
        f"nspname FROM {pg}.pg_namespace WHERE oid = o), o::VARCHAR) END",
        f"CREATE OR REPLACE MACRO {pg}.regrole_in(n) AS CASE WHEN n IS NOT NULL THEN coalesce(TRY_CAST(n AS BIGINT), "
        f"CASE WHEN {name_of} = '{OWNER}' THEN {OWNER_OID} END, error('role \"' || n::VARCHAR || "
        "'\" does not exist')) END",
        f"CREATE OR REPLACE MACRO {pg}.regrole_out(o) AS CASE WHEN o = 0 THEN '-' WHEN o = {OWNER_OID} "
        f"THEN '{OWNER}' ELSE o::VARCHAR END",
        # information_schema helpers pgjdbc and psqlODBC call.
        f"""CREATE OR REPLACE MACRO {pg}._pg_expandarray(a) AS
            unnest(list_transform(range(1, len(a) + 1), lambda i: {{'x': a[i], 'n': i}}))""",
        f"CREATE OR REPLACE MACRO {pg}._pg_truetypid(a, t) AS a.atttypid",
        f"CREATE OR REPLACE MACRO {pg}._pg_truetypmod(a, t) AS a.atttypmod",
        f"CREATE OR REPLACE MACRO {pg}._pg_numeric_precision(t, m) AS CASE t WHEN 21 THEN 16 WHEN 23 THEN 32 "
        "WHEN 20 THEN 64 WHEN 700 THEN 24 WHEN 701 THEN 53 END",
        f"CREATE OR REPLACE MACRO {pg}._pg_numeric_scale(t, m) AS CASE WHEN t IN (21, 23, 20) THEN 0 END",
        f"CREATE OR REPLACE MACRO {pg}.array_to_string_compat(a, s) AS array_to_string(a, s)",
        f"CREATE OR REPLACE MACRO {pg}.pg_listening_channels() AS []::VARCHAR[]",
        f"CREATE OR REPLACE MACRO {pg}.pg_get_keywords() AS TABLE SELECT keyword_name AS word, "
        "left(keyword_category, 1) AS catcode, keyword_category AS catdesc FROM duckdb_keywords()",
        f"CREATE OR REPLACE MACRO {pg}.pg_options_to_table(a) AS TABLE SELECT NULL::VARCHAR AS option_name, "
        "NULL::VARCHAR AS option_value WHERE false",
    ]
    assert proc_oid  # the I/O functions exist for regproc_in to find
    return stmts


def _information_schema_sql() -> list[str]:
    pg, info = PG, IS
    nsp_name = (
        f"CASE r.nsp WHEN {PUBLIC_NS} THEN 'public' WHEN {PG_NS} THEN 'pg_catalog' WHEN {TEMP_NS} THEN 'pg_temp_1' "
        "ELSE 'information_schema' END"
    )
    empty = {
        "routines": "specific_catalog V, specific_schema V, specific_name V, routine_catalog V, routine_schema V, "
        "routine_name V, routine_type V, data_type V, type_udt_name V, routine_definition V, external_language V",
        "parameters": "specific_catalog V, specific_schema V, specific_name V, ordinal_position I, "
        "parameter_mode V, parameter_name V, data_type V",
        "table_constraints": "constraint_catalog V, constraint_schema V, constraint_name V, table_catalog V, "
        "table_schema V, table_name V, constraint_type V, is_deferrable V, initially_deferred V, enforced V",
        "key_column_usage": "constraint_catalog V, constraint_schema V, constraint_name V, table_catalog V, "
        "table_schema V, table_name V, column_name V, ordinal_position I, position_in_unique_constraint I",
        "referential_constraints": "constraint_catalog V, constraint_schema V, constraint_name V, "
        "unique_constraint_catalog V, unique_constraint_schema V, unique_constraint_name V, match_option V, "
        "update_rule V, delete_rule V",
        "constraint_column_usage": "table_catalog V, table_schema V, table_name V, column_name V, "
        "constraint_catalog V, constraint_schema V, constraint_name V",
        "check_constraints": "constraint_catalog V, constraint_schema V, constraint_name V, check_clause V",
        "column_privileges": "grantor V, grantee V, table_catalog V, table_schema V, table_name V, "
        "column_name V, privilege_type V, is_grantable V",
        "sequences": "sequence_catalog V, sequence_schema V, sequence_name V, data_type V",
        "triggers": "trigger_catalog V, trigger_schema V, trigger_name V, event_manipulation V, "
        "event_object_catalog V, event_object_schema V, event_object_table V, action_statement V",
        "element_types": "object_catalog V, object_schema V, object_name V, object_type V, "
        "collection_type_identifier V, data_type V",
        "domains": "domain_catalog V, domain_schema V, domain_name V, data_type V",
        "usage_privileges": "grantor V, grantee V, object_catalog V, object_schema V, object_name V, "
        "object_type V, privilege_type V, is_grantable V",
    }  # fmt: skip
    stmts = [
        f"""CREATE OR REPLACE VIEW {info}.schemata AS SELECT '{DATABASE}' AS catalog_name, nspname AS schema_name,
            '{OWNER}' AS schema_owner, NULL::VARCHAR AS default_character_set_catalog,
            NULL::VARCHAR AS default_character_set_schema, NULL::VARCHAR AS default_character_set_name,
            NULL::VARCHAR AS sql_path FROM {pg}.pg_namespace""",
        f"""CREATE OR REPLACE VIEW {info}.tables AS SELECT '{DATABASE}' AS table_catalog,
            {nsp_name} AS table_schema, r.relname AS table_name,
            CASE r.relkind WHEN 'v' THEN 'VIEW' ELSE 'BASE TABLE' END AS table_type,
            NULL::VARCHAR AS self_referencing_column_name, NULL::VARCHAR AS reference_generation,
            NULL::VARCHAR AS user_defined_type_catalog, NULL::VARCHAR AS user_defined_type_schema,
            NULL::VARCHAR AS user_defined_type_name, 'NO' AS is_insertable_into, 'NO' AS is_typed,
            NULL::VARCHAR AS commit_action FROM {pg}.rels r""",
        f"""CREATE OR REPLACE VIEW {info}.views AS SELECT '{DATABASE}' AS table_catalog, {nsp_name} AS table_schema,
            r.relname AS table_name, NULL::VARCHAR AS view_definition, 'NONE' AS check_option,
            'NO' AS is_updatable, 'NO' AS is_insertable_into, 'NO' AS is_trigger_updatable,
            'NO' AS is_trigger_deletable, 'NO' AS is_trigger_insertable_into
            FROM {pg}.rels r WHERE r.relkind = 'v'""",
        f"""CREATE OR REPLACE VIEW {info}.columns AS SELECT '{DATABASE}' AS table_catalog,
            {nsp_name} AS table_schema, r.relname AS table_name, c.attname AS column_name,
            c.attnum::INTEGER AS ordinal_position, NULL::VARCHAR AS column_default, 'YES' AS is_nullable,
            CASE WHEN t.typcategory = 'A' THEN 'ARRAY' ELSE {pg}.format_type(c.atttypid, NULL) END AS data_type,
            NULL::INTEGER AS character_maximum_length, NULL::INTEGER AS character_octet_length,
            {pg}._pg_numeric_precision(c.atttypid, -1)::INTEGER AS numeric_precision,
            (CASE WHEN c.atttypid IN (20, 21, 23, 700, 701) THEN 2 END)::INTEGER AS numeric_precision_radix,
            {pg}._pg_numeric_scale(c.atttypid, -1)::INTEGER AS numeric_scale,
            (CASE WHEN c.atttypid IN (1114, 1184) THEN 6 END)::INTEGER AS datetime_precision,
            NULL::VARCHAR AS interval_type, NULL::INTEGER AS interval_precision,
            NULL::VARCHAR AS character_set_catalog, NULL::VARCHAR AS character_set_schema,
            NULL::VARCHAR AS character_set_name, NULL::VARCHAR AS collation_catalog,
            NULL::VARCHAR AS collation_schema, NULL::VARCHAR AS collation_name, NULL::VARCHAR AS domain_catalog,
            NULL::VARCHAR AS domain_schema, NULL::VARCHAR AS domain_name, '{DATABASE}' AS udt_catalog,
            'pg_catalog' AS udt_schema, t.typname AS udt_name, NULL::VARCHAR AS scope_catalog,
            NULL::VARCHAR AS scope_schema, NULL::VARCHAR AS scope_name, NULL::INTEGER AS maximum_cardinality,
            c.attnum::VARCHAR AS dtd_identifier, 'NO' AS is_self_referencing, 'NO' AS is_identity,
            NULL::VARCHAR AS identity_generation, NULL::VARCHAR AS identity_start,
            NULL::VARCHAR AS identity_increment, NULL::VARCHAR AS identity_maximum,
            NULL::VARCHAR AS identity_minimum, NULL::VARCHAR AS identity_cycle, 'NEVER' AS is_generated,
            NULL::VARCHAR AS generation_expression, 'NO' AS is_updatable
            FROM {pg}.cols c JOIN {pg}.rels r ON r.oid = c.attrelid
            LEFT JOIN {pg}.pg_type t ON t.oid = c.atttypid""",
        f"""CREATE OR REPLACE VIEW {info}.table_privileges AS SELECT '{OWNER}' AS grantor, '{OWNER}' AS grantee,
            '{DATABASE}' AS table_catalog, 'public' AS table_schema, relname AS table_name,
            'SELECT' AS privilege_type, 'NO' AS is_grantable, 'YES' AS with_hierarchy
            FROM {pg}.rels WHERE nsp = {PUBLIC_NS}""",
        f"""CREATE OR REPLACE VIEW {info}.character_sets AS SELECT NULL::VARCHAR AS character_set_catalog,
            NULL::VARCHAR AS character_set_schema, 'UTF8' AS character_set_name,
            'UCS' AS character_repertoire, 'UTF8' AS form_of_use, '{DATABASE}' AS default_collate_catalog,
            'pg_catalog' AS default_collate_schema, 'C.UTF-8' AS default_collate_name""",
        f"CREATE OR REPLACE VIEW {info}.enabled_roles AS SELECT '{OWNER}' AS role_name",
        f"""CREATE OR REPLACE VIEW {info}.applicable_roles AS SELECT '{OWNER}' AS grantee,
            '{OWNER}' AS role_name, 'NO' AS is_grantable WHERE false""",
    ]
    for name, spec in empty.items():
        casts = ", ".join(f"NULL::{t} AS {c}" for c, t in _duck(spec))
        stmts.append(f"CREATE OR REPLACE VIEW {info}.{name} AS SELECT {casts} WHERE false")
    return stmts


# Relations whose rows are fixed once every view exists, in an order where each one's sources are
# already stored: install() stores them as tables, so that a client's catalog query (asyncpg's type
# lookup joins pg_type five times) plans against tables, not against VALUES lists and scans of
# duckdb_columns(); planning those took seconds. What a session adds (its temporary views) is
# unioned in by the views rels, cols, pg_class and pg_attribute.
FIXED_RELATIONS = (
    "duck_type_oids", "format_types", "pg_type", "pg_proc", "pg_am", "pg_opclass", "pg_collation",
    "pg_database", "pg_settings", "pg_roles", "pg_tablespace", "pg_language",
    "rels_fixed", "cols_fixed", "pg_class_fixed", "pg_attribute_fixed", "pg_description",
)  # fmt: skip


def install(con: duckdb.DuckDBPyConnection) -> None:
    """Define the emulation on the views database (comments on the user views first: the
    catalog reads them from DuckDB's own metadata), then store its fixed relations as tables."""
    for stmt in _comment_sql():
        con.execute(stmt)
    for stmt in setup_sql(con):
        con.execute(stmt)
    for name in FIXED_RELATIONS:
        con.execute(f"CREATE TABLE {PG}.{name}__stored AS SELECT * FROM {PG}.{name}")
        con.execute(f"DROP VIEW {PG}.{name}")
        con.execute(f"ALTER TABLE {PG}.{name}__stored RENAME TO {name}")
