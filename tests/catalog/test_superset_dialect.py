"""Apache Superset 6.1 on a live catalog through the `dumpcat://` dialect, no server: through its
REST API as a BI user, as tests/catalog/server/test_superset.py does over `dumpcat serve`. Test the
connection, add the database, list its schema and views, SQL Lab (a refused statement too), a
dataset on a view, a chart's data, and a run ingested while Superset runs. Every answer is checked
against the same SQL run through `Catalog.sql`.

Superset runs from its own virtual environment (SQLAlchemy 1.4.54), with dumpcat installed into it
by tests/superset/install.sh, which .ci/run calls: the test fails, naming the script, when Superset
or that copy of dumpcat is missing or older than this checkout.
"""

from __future__ import annotations

import secrets
from decimal import Decimal
from pathlib import Path

import pytest

from catalog.api import Catalog
from catalog.views import USER_VIEWS
from tests.conftest import dump_of, nan_log_catalog
from tests.superset import harness
from tests.superset.source_digest import source_digest

SCHEMA = "main"


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory) -> Path:
    return nan_log_catalog(tmp_path_factory.mktemp("superset-dialect"))


@pytest.fixture(scope="module")
def superset(tmp_path_factory):
    problem = None
    try:
        harness.superset_executable()
        stamp = harness.venv_path() / ".dumpcat-source"
        installed = stamp.read_text().split()[0] if stamp.is_file() else None
        if installed != source_digest():
            state = "missing" if installed is None else "older than this checkout"
            problem = (
                f"dumpcat in {harness.venv_path()} is {state}: run `bash {harness.INSTALL}` (it installs it)"
            )
    except harness.SupersetMissing as exc:
        problem = str(exc)
    if problem:
        pytest.fail(problem, pytrace=False)  # a failure, not a skip: the venv is part of the set-up
    with harness.Superset(tmp_path_factory.mktemp("superset")) as s:
        s.set_up().start()
        yield s


@pytest.fixture(scope="module")
def api(superset) -> harness.Api:
    return superset.api()


@pytest.fixture(scope="module")
def uri(cat_path) -> str:
    return f"dumpcat:///{cat_path.absolute()}"


@pytest.fixture(scope="module")
def database_id(api, uri) -> int:
    return harness.add_database(api, uri, name="dumpcat-live")


@pytest.fixture(scope="module")
def dataset_id(api, database_id) -> int:
    return harness.create_dataset(api, database_id, "stats", schema=SCHEMA)


def catalog_rows(cat_path: Path, sql: str) -> list[tuple]:
    result = Catalog.open(cat_path).sql(sql)
    table = result.arrow() if hasattr(result, "arrow") else result
    return sorted(tuple(_plain(v) for v in row.values()) for row in table.to_pylist())


def _plain(v):
    """Numbers as Superset's JSON has them (a DuckDB HUGEINT sum arrives as a Decimal)."""
    return int(v) if isinstance(v, Decimal) and v == int(v) else v


def sql_lab(api: harness.Api, database_id: int, sql: str) -> dict:
    body = {
        "database_id": database_id,
        "sql": sql,
        "schema": SCHEMA,
        "runAsync": False,
        "queryLimit": 10_000,
        "client_id": secrets.token_hex(5),
    }
    response = api.call("POST", "/api/v1/sqllab/execute/", body)
    return {"status_code": response.status, **(response.json or {})}


def test_test_connection(api, uri):
    api.expect(
        "POST", "/api/v1/database/test_connection/", {"database_name": "dumpcat-live", "sqlalchemy_uri": uri}
    )


def test_add_database(api, database_id):
    db = api.expect("GET", f"/api/v1/database/{database_id}")["result"]
    assert db["backend"] == "dumpcat"
    assert db["expose_in_sqllab"] is True


def test_schemas_and_views(api, database_id):
    schemas = api.expect("GET", f"/api/v1/database/{database_id}/schemas/")["result"]
    assert schemas == [SCHEMA]
    q = harness.rison({"schema_name": SCHEMA, "force": True})
    answer = api.expect("GET", f"/api/v1/database/{database_id}/tables/?q={q}")
    assert sorted(t["value"] for t in answer["result"]) == sorted(USER_VIEWS)  # no helper views
    assert {t["type"] for t in answer["result"]} == {"view"}


def test_columns_of_stats(api, database_id, cat_path):
    meta = api.expect("GET", f"/api/v1/database/{database_id}/table_metadata/?name=stats&schema={SCHEMA}")
    result = Catalog.open(cat_path).sql("SELECT * FROM stats LIMIT 0")
    want = (result.arrow() if hasattr(result, "arrow") else result).schema.names
    assert [c["name"] for c in meta["columns"]] == want
    types = {c["name"]: c["type"] for c in meta["columns"]}
    assert types["op_name"] == "VARCHAR"
    assert types["nan_count"] == "BIGINT"
    assert types["max"] == "DOUBLE_PRECISION"  # SQLAlchemy 1.4's name of the type


SQL_LAB_QUERY = "SELECT op_name, nan_count FROM stats WHERE nan_count > 0"


def test_sql_lab_query(api, database_id, cat_path):
    answer = sql_lab(api, database_id, SQL_LAB_QUERY)
    assert answer.get("status") == "success", answer
    assert [c["column_name"] for c in answer["columns"]] == ["op_name", "nan_count"]
    got = sorted((r["op_name"], r["nan_count"]) for r in answer["data"])
    assert got == catalog_rows(cat_path, SQL_LAB_QUERY)
    assert len(got) > 10


def test_sql_lab_refuses_reading_a_file(api, database_id):
    answer = sql_lab(api, database_id, "SELECT * FROM read_csv('/etc/passwd')")
    assert answer["status_code"] >= 400, answer
    assert "refused: table function read_csv() is not allowed" in str(answer), answer
    assert sql_lab(api, database_id, "SELECT 1 AS one")["data"] == [{"one": 1}]  # still usable


def test_dataset_on_stats(api, dataset_id, cat_path):
    ds = api.expect("GET", f"/api/v1/dataset/{dataset_id}")["result"]
    assert (ds["schema"], ds["table_name"]) == (SCHEMA, "stats")
    result = Catalog.open(cat_path).sql("SELECT * FROM stats LIMIT 0")
    want = (result.arrow() if hasattr(result, "arrow") else result).schema.names
    assert sorted(c["column_name"] for c in ds["columns"]) == sorted(want)
    generic = {c["column_name"]: c.get("type_generic") for c in ds["columns"]}
    numeric, string, boolean = 0, 1, 3  # Superset's GenericDataType
    assert (generic["nan_count"], generic["max"], generic["op_name"], generic["has_nan"]) == (
        numeric,
        numeric,
        string,
        boolean,
    ), generic


def test_chart_data(api, dataset_id, cat_path):
    context = harness.query_context(dataset_id, ["op_name"], [harness.COUNT, harness.NAN_SUM], [])
    (result,) = api.expect("POST", "/api/v1/chart/data", context)["result"]
    assert result.get("error") is None, result
    got = sorted((r["op_name"], r["tensors"], r["nans"]) for r in result["data"])
    want = catalog_rows(cat_path, "SELECT op_name, count(*), sum(nan_count) FROM stats GROUP BY op_name")
    assert got == want


def test_saved_chart(api, dataset_id, cat_path):
    chart_id = harness.save_chart(api, dataset_id)
    data = api.expect("GET", f"/api/v1/chart/{chart_id}/data/?format=json&force=true")
    got = sorted((r["op_type"], r["io"], r["nans"]) for r in data["result"][0]["data"])
    assert got == catalog_rows(cat_path, harness.CHART_SQL)


def test_a_run_ingested_while_superset_runs_is_seen(api, database_id, cat_path):
    """Last: it adds a run to the module's catalog."""
    query = "SELECT run FROM runs ORDER BY run"
    assert [r["run"] for r in sql_lab(api, database_id, query)["data"]] == ["nan_log"]
    Catalog.open(cat_path).ingest(dump_of("div_late"), run="later")
    assert [r["run"] for r in sql_lab(api, database_id, query)["data"]] == ["later", "nan_log"]
