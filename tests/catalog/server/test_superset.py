"""Apache Superset 6.1 over `dumpcat serve`, used as a BI user uses it, through its REST API and a
headless browser: log in, test and add the database, browse schema public, run a SQL Lab query,
chart a dataset, open the saved chart. Every answer is checked against the same SQL run through
`Catalog.sql`.

Superset runs from its own virtual environment, built before the tests by
tests/superset/install.sh (.ci/run calls it): the test fails, naming the script, when it is missing.
Superset's metadata, config and log live in a temp folder; its web server listens on loopback only.
"""

from __future__ import annotations

import json
import secrets
from decimal import Decimal
from pathlib import Path

import pytest

from tests.conftest import nan_log_catalog
from tests.superset import harness

USER = "bi"
PASSWORD = secrets.token_urlsafe(12)


@pytest.fixture(scope="module")
def cat_path(tmp_path_factory) -> Path:
    return nan_log_catalog(tmp_path_factory.mktemp("superset-catalog"))


@pytest.fixture(scope="module")
def dumpcat_uri(cat_path):
    from catalog.server.server import Server

    srv = Server(cat_path, port=0, users={USER: PASSWORD}).start()
    try:
        yield harness.sqlalchemy_uri(srv.port, USER, PASSWORD)
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def superset(tmp_path_factory):
    missing = None
    try:
        harness.superset_executable()
    except harness.SupersetMissing as exc:
        missing = str(exc)
    if missing:
        pytest.fail(missing, pytrace=False)  # a failure, not a skip: the venv is part of the set-up
    with harness.Superset(tmp_path_factory.mktemp("superset")) as s:
        s.set_up().start()
        yield s


@pytest.fixture(scope="module")
def api(superset) -> harness.Api:
    """Step 1: log in (a JWT, then a CSRF token for the session)."""
    return superset.api()


@pytest.fixture(scope="module")
def database_id(api, dumpcat_uri) -> int:
    """Step 2: the database, added as a user adds it (Superset tests the connection first)."""
    return harness.add_database(api, dumpcat_uri)


@pytest.fixture(scope="module")
def dataset_id(api, database_id) -> int:
    """Step 5: a dataset on view stats."""
    return harness.create_dataset(api, database_id, "stats")


@pytest.fixture(scope="module")
def chart_id(api, dataset_id) -> int:
    """Step 6: the bar chart of NaN values per op type, saved."""
    return harness.save_chart(api, dataset_id)


def catalog_rows(cat_path: Path, sql: str) -> list[tuple]:
    from catalog.api import Catalog

    table = Catalog.open(cat_path).sql(sql)
    return sorted(tuple(_plain(v) for v in row.values()) for row in table.to_pylist())


def _plain(v):
    """Numbers as Superset's JSON has them (a DuckDB HUGEINT sum arrives as a Decimal)."""
    return int(v) if isinstance(v, Decimal) and v == int(v) else v


# -- 1. log in ------------------------------------------------------------------------------------


def test_login(api):
    me = api.expect("GET", "/api/v1/me/")["result"]
    assert me["username"] == harness.ADMIN


# -- 2. test the connection, add the database ------------------------------------------------------


def test_test_connection(api, dumpcat_uri):
    body = {"database_name": "dumpcat", "sqlalchemy_uri": dumpcat_uri}
    api.expect("POST", "/api/v1/database/test_connection/", body)


def test_add_database(api, database_id):
    db = api.expect("GET", f"/api/v1/database/{database_id}")["result"]
    assert db["backend"] == "postgresql"
    assert db["expose_in_sqllab"] is True


# -- 3. browse schema public ---------------------------------------------------------------------


def test_schemas_and_tables_of_public(api, database_id):
    from catalog.views import USER_VIEWS

    schemas = api.expect("GET", f"/api/v1/database/{database_id}/schemas/")["result"]
    assert "public" in schemas
    q = harness.rison({"schema_name": "public", "force": True})
    answer = api.expect("GET", f"/api/v1/database/{database_id}/tables/?q={q}")
    names = [t["value"] for t in answer["result"]]
    assert sorted(names) == sorted(USER_VIEWS)
    assert answer["count"] == len(USER_VIEWS)
    assert {t["type"] for t in answer["result"]} <= {"table", "view"}


def test_columns_of_stats(api, database_id, cat_path):
    from catalog.api import Catalog

    meta = api.expect("GET", f"/api/v1/database/{database_id}/table_metadata/?name=stats&schema=public")
    want = Catalog.open(cat_path).sql("SELECT * FROM stats LIMIT 0").schema
    assert [c["name"] for c in meta["columns"]] == want.names
    types = {c["name"]: c["type"] for c in meta["columns"]}
    assert types["op_name"].upper().startswith(("VARCHAR", "TEXT"))
    assert types["nan_count"].upper() == "BIGINT"


# -- 4. SQL Lab ------------------------------------------------------------------------------------

SQL_LAB_QUERY = "SELECT op_name, nan_count FROM stats WHERE nan_count > 0"


def test_sql_lab_query(api, database_id, cat_path):
    answer = api.expect(
        "POST",
        "/api/v1/sqllab/execute/",
        {
            "database_id": database_id,
            "sql": SQL_LAB_QUERY,
            "schema": "public",
            "runAsync": False,
            "queryLimit": 10_000,
            "client_id": secrets.token_hex(5),
        },
    )
    assert answer["status"] == "success", answer
    assert [c["column_name"] for c in answer["columns"]] == ["op_name", "nan_count"]
    got = sorted((r["op_name"], r["nan_count"]) for r in answer["data"])
    assert got == catalog_rows(cat_path, SQL_LAB_QUERY)
    assert len(got) > 10


# -- 5. a dataset and a chart's data --------------------------------------------------------------


def test_dataset_on_stats(api, dataset_id, cat_path):
    from catalog.api import Catalog

    ds = api.expect("GET", f"/api/v1/dataset/{dataset_id}")["result"]
    assert (ds["schema"], ds["table_name"]) == ("public", "stats")
    want = Catalog.open(cat_path).sql("SELECT * FROM stats LIMIT 0").schema.names
    assert sorted(c["column_name"] for c in ds["columns"]) == sorted(want)


def test_chart_data(api, dataset_id, cat_path):
    """A chart's query as the explore page sends it: tensors and NaN values per op_name."""
    context = harness.query_context(dataset_id, ["op_name"], [harness.COUNT, harness.NAN_SUM], [])
    answer = api.expect("POST", "/api/v1/chart/data", context)
    (result,) = answer["result"]
    assert result.get("error") is None, result
    got = sorted((r["op_name"], r["tensors"], r["nans"]) for r in result["data"])
    want = catalog_rows(cat_path, "SELECT op_name, count(*), sum(nan_count) FROM stats GROUP BY op_name")
    assert got == want
    assert result["rowcount"] == len(want)


# -- 6. a saved chart, in a browser ---------------------------------------------------------------


def test_saved_chart(api, chart_id, cat_path):
    chart = api.expect("GET", f"/api/v1/chart/{chart_id}")["result"]
    assert chart["slice_name"] == harness.CHART_NAME
    assert json.loads(chart["params"])["viz_type"] == "echarts_timeseries_bar"
    data = api.expect("GET", f"/api/v1/chart/{chart_id}/data/?format=json&force=true")
    got = sorted((r["op_type"], r["io"], r["nans"]) for r in data["result"][0]["data"])
    assert got == catalog_rows(cat_path, harness.CHART_SQL)


def test_saved_chart_in_browser(superset, chart_id):
    """Log in through the login form, open the chart's explore page: the chart is drawn, and the
    browser reports no error (but for the requests Superset's page makes to hosts outside, which
    the browser's resolver refuses)."""
    from tests.report_browser import Browser

    with Browser(width=1600, height=1000) as b:
        harness.browser_login(b.driver, superset)
        harness.open_chart(b.driver, superset, chart_id)
        png = b.screenshot()
        console = b.driver.get_log("browser")
    errors = [e["message"] for e in console if e["level"] == "SEVERE" and not harness.outside_request(e)]
    assert not errors, errors
    assert png.startswith(b"\x89PNG") and len(png) > 10_000
