"""Apache Superset, run from its own virtual environment, driven as a BI user drives it.

`Superset` makes a metadata database and config in a folder of its own (a copy of the database
install.sh initialised, or `superset db upgrade` and `init`; then `fab create-admin`), runs
`superset run` on a free loopback port and stops it. `Api` is a logged-in REST client (JWT, CSRF
token, session cookie). The remaining functions are the steps a
user takes to chart a `dumpcat serve` catalog: add the database, create a dataset, save a chart,
and open it in headless Chromium after logging in through the login form.

The virtual environment is built by tests/superset/install.sh (.ci/run calls it), at
$DUMPCAT_SUPERSET_VENV or <repo>/.superset-venv; nothing here reaches a package index.
"""

from __future__ import annotations

import contextlib
import http.cookiejar
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
VENV_VARIABLE = "DUMPCAT_SUPERSET_VENV"
INSTALL = "tests/superset/install.sh"
ADMIN = "admin"
TEMPLATE_NAME = "dumpcat-metadata-template.db"  # made by install.sh in the venv

_CONFIG = """\
# Written by tests/superset/harness.py for one test run.
SECRET_KEY = {secret!r}
SQLALCHEMY_DATABASE_URI = {metadata!r}
# The web server answers loopback only; SQL Lab runs statements in the request (no Celery).
SQLLAB_TIMEOUT = 60
"""


class SupersetMissing(RuntimeError):
    """The Superset virtual environment has not been built."""


class SupersetFailed(AssertionError):
    """A Superset command or request failed; the message holds Superset's answer and log tail."""


def venv_path() -> Path:
    return Path(os.environ.get(VENV_VARIABLE) or REPO / ".superset-venv")


def superset_executable() -> Path:
    exe = venv_path() / "bin" / "superset"
    if not exe.is_file():
        raise SupersetMissing(
            f"Apache Superset is not installed at {venv_path()} (${VENV_VARIABLE} or <repo>/.superset-venv): "
            f"run `bash {INSTALL}` first (.ci/run does)"
        )
    return exe


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rison(value: Any) -> str:
    """Rison, the URL notation of Superset's `q=` parameters (dicts, lists, strings, numbers, bools)."""
    if isinstance(value, bool):
        return "!t" if value else "!f"
    if value is None:
        return "!n"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        if value and re.fullmatch(r"[A-Za-z_./~][A-Za-z0-9_./~-]*", value):
            return value
        return "'" + value.replace("!", "!!").replace("'", "!'") + "'"
    if isinstance(value, dict):
        return "(" + ",".join(f"{rison(str(k))}:{rison(v)}" for k, v in value.items()) + ")"
    if isinstance(value, list | tuple):
        return "!(" + ",".join(rison(v) for v in value) + ")"
    raise TypeError(f"no rison for {type(value).__name__}")


@dataclass
class Superset:
    """One Superset web server with its metadata database in `folder`."""

    folder: Path
    password: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    timings: dict[str, float] = field(default_factory=dict)  # seconds each set-up step took

    def __post_init__(self) -> None:
        self.exe = superset_executable()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.log_path = self.folder / "superset.log"
        config = self.folder / "superset_config.py"
        metadata = f"sqlite:///{self.folder / 'superset.db'}"
        config.write_text(_CONFIG.format(secret=secrets.token_urlsafe(32), metadata=metadata))
        home = self.folder / "home"  # Superset's DATA_DIR, else ~/.superset
        home.mkdir(exist_ok=True)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env.update(
            SUPERSET_CONFIG_PATH=str(config),
            SUPERSET_HOME=str(home),
            FLASK_APP="superset",
            VIRTUAL_ENV=str(self.exe.parent.parent),
            PATH=f"{self.exe.parent}{os.pathsep}{env.get('PATH', '')}",
        )
        self.env = env
        self.port = 0
        self.proc: subprocess.Popen | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_tail(self, lines: int = 60) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return "(no Superset log yet)"
        return "\n".join(text.splitlines()[-lines:])

    def fail(self, what: str) -> SupersetFailed:
        took = ", ".join(f"{k} {v:.1f} s" for k, v in self.timings.items()) or "none yet"
        return SupersetFailed(
            f"{what}\n(Superset set-up steps done: {took})"
            f"\n--- Superset log, last lines ({self.log_path}) ---\n{self.log_tail()}"
        )

    def _command(self, name: str, *args: str, timeout: float = 300) -> None:
        start = time.monotonic()
        with self.log_path.open("a") as log:
            log.write(f"\n=== superset {' '.join(args)}\n")
            log.flush()
            try:
                done = subprocess.run(
                    [str(self.exe), *args],
                    env=self.env,
                    cwd=self.folder,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                )
            except subprocess.TimeoutExpired:
                raise self.fail(f"`superset {args[0]}` did not finish in {timeout:.0f} s") from None
        self.timings[name] = time.monotonic() - start
        if done.returncode != 0:
            raise self.fail(f"`superset {' '.join(args[:2])}` exited with {done.returncode}")

    def set_up(self) -> Superset:
        """The metadata database, the admin user, roles and permissions. The database comes from
        the template install.sh initialised (`db upgrade` and `init` took ~40 s of CPU per test
        run); without one, those steps run here."""
        template = venv_path() / TEMPLATE_NAME
        if template.is_file():
            shutil.copyfile(template, self.folder / "superset.db")
            self.timings["metadata from the template"] = 0.0
            self._command("fab create-admin", *self._create_admin())
            return self
        self._command("db upgrade", "db", "upgrade")
        self._command("fab create-admin", *self._create_admin())
        self._command("init", "init")
        return self

    def _create_admin(self) -> tuple[str, ...]:
        return (
            "fab", "create-admin", "--username", ADMIN, "--firstname", "Ada", "--lastname", "Admin",
            "--email", "admin@example.invalid", "--password", self.password,
        )  # fmt: skip

    def start(self, timeout: float = 180) -> Superset:
        """`superset run` on a free loopback port; returns when /health answers OK."""
        self.port = free_port()
        start = time.monotonic()
        with self.log_path.open("a") as log:
            log.write(f"\n=== superset run -p {self.port}\n")
            log.flush()
            self.proc = subprocess.Popen(
                [str(self.exe), "run", "-h", "127.0.0.1", "-p", str(self.port), "--with-threads"],
                env=self.env,
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = start + timeout
        while True:
            if self.proc.poll() is not None:
                raise self.fail(f"`superset run` exited with {self.proc.returncode} before answering /health")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.base}/health", timeout=5) as r:
                if r.status == 200:
                    break
            if time.monotonic() > deadline:
                self.stop()
                raise self.fail(f"Superset's /health did not answer OK within {timeout:.0f} s")
            time.sleep(0.25)
        self.timings["run until /health"] = time.monotonic() - start
        return self

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(15)

    def __enter__(self) -> Superset:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def api(self) -> Api:
        return Api(self).login(ADMIN, self.password)


@dataclass
class Response:
    status: int
    text: str

    @property
    def json(self) -> Any:
        try:
            return json.loads(self.text)
        except ValueError:
            return None


class Api:
    """Superset's REST API as one logged-in user: bearer token, CSRF token, session cookie."""

    def __init__(self, superset: Superset) -> None:
        self.superset = superset
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )
        self.headers: dict[str, str] = {"Accept": "application/json"}

    def call(self, method: str, path: str, body: Any = None, *, timeout: float = 120) -> Response:
        data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(self.superset.base + path, data=data, method=method, headers=headers)
        try:
            with self.opener.open(request, timeout=timeout) as r:
                return Response(r.status, r.read().decode(errors="replace"))
        except urllib.error.HTTPError as e:
            return Response(e.code, e.read().decode(errors="replace"))

    def expect(self, method: str, path: str, body: Any = None, *, status: int | tuple[int, ...] = 200) -> Any:
        """The JSON answer of a request that must succeed; otherwise a failure with Superset's
        answer and log tail."""
        statuses = (status,) if isinstance(status, int) else status
        r = self.call(method, path, body)
        if r.status not in statuses:
            sent = "" if body is None else f"\nrequest body: {json.dumps(body)[:2000]}"
            raise self.superset.fail(f"{method} {path}: HTTP {r.status}{sent}\nanswer: {r.text[:4000]}")
        return r.json

    def login(self, username: str, password: str) -> Api:
        token = self.expect(
            "POST",
            "/api/v1/security/login",
            {"username": username, "password": password, "provider": "db", "refresh": True},
        )["access_token"]
        self.headers["Authorization"] = f"Bearer {token}"
        csrf = self.expect("GET", "/api/v1/security/csrf_token/")["result"]
        self.headers["X-CSRFToken"] = csrf
        self.headers["Referer"] = self.superset.base
        return self


# -- the user's steps ----------------------------------------------------------------------------


def sqlalchemy_uri(port: int, user: str, password: str) -> str:
    return f"postgresql+psycopg2://{user}:{urllib.parse.quote(password, safe='')}@127.0.0.1:{port}/dumpcat"


def add_database(api: Api, uri: str, name: str = "dumpcat") -> int:
    """POST /api/v1/database/ (Superset tests the connection first); the new database's id."""
    answer = api.expect(
        "POST",
        "/api/v1/database/",
        {"database_name": name, "sqlalchemy_uri": uri, "expose_in_sqllab": True},
        status=201,
    )
    return int(answer["id"])


def create_dataset(api: Api, database_id: int, table: str, schema: str = "public") -> int:
    body = {"database": database_id, "schema": schema, "table_name": table}
    answer = api.expect("POST", "/api/v1/dataset/", body, status=201)
    return int(answer["id"])


# Metrics and filters of the charts, as the explore page writes them.
COUNT = {"expressionType": "SQL", "sqlExpression": "COUNT(*)", "label": "tensors"}
NAN_SUM = {
    "expressionType": "SIMPLE",
    "column": {"column_name": "nan_count"},
    "aggregate": "SUM",
    "label": "nans",
}
NAN_FILTER = {
    "expressionType": "SIMPLE",
    "subject": "nan_count",
    "operator": ">",
    "comparator": 0,
    "clause": "WHERE",
}

# The saved chart (docs/superset-chart.png): NaN values per op type, stacked by input / output.
CHART_NAME = "NaN values per op type (nan_log)"
# What it shows, as plain SQL.
CHART_SQL = "SELECT op_type, io, sum(nan_count) FROM stats WHERE nan_count > 0 GROUP BY op_type, io"


def chart_form_data(dataset_id: int) -> dict:
    """The explore form of the saved chart: stacked bars of sum(nan_count) by op_type and io."""
    return {
        "datasource": f"{dataset_id}__table",
        "viz_type": "echarts_timeseries_bar",
        "x_axis": "op_type",
        "metrics": [NAN_SUM],
        "groupby": ["io"],
        "adhoc_filters": [NAN_FILTER],
        "row_limit": 1000,
        "xAxisLabelRotation": 30,
        "xAxisLabelInterval": 0,
        "orientation": "vertical",
        "stack": "Stack",
        "show_legend": True,
        "legendType": "scroll",
        "legendOrientation": "top",
        "rich_tooltip": True,
        "y_axis_format": "SMART_NUMBER",
        "y_axis_title": "NaN values",
        "y_axis_title_margin": 40,
        "y_axis_title_position": "Left",
        "color_scheme": "supersetColors",
    }


def query_context(dataset_id: int, columns: list[str], metrics: list[dict], where: list[dict]) -> dict:
    """A /api/v1/chart/data query context: `metrics` grouped by `columns`, largest last metric first."""
    return {
        "datasource": {"id": dataset_id, "type": "table"},
        "force": True,
        "queries": [
            {
                "columns": columns,
                "metrics": metrics,
                "filters": where,
                "orderby": [[metrics[-1], False]],
                "row_limit": 1000,
                "extras": {"where": "", "having": ""},
            }
        ],
        "form_data": chart_form_data(dataset_id),
        "result_format": "json",
        "result_type": "full",
    }


def save_chart(api: Api, dataset_id: int) -> int:
    """POST /api/v1/chart/: the chart, saved as a user saves it from the explore page."""
    form = chart_form_data(dataset_id)
    context = query_context(
        dataset_id, ["op_type", "io"], [NAN_SUM], [{"col": "nan_count", "op": ">", "val": 0}]
    )
    answer = api.expect(
        "POST",
        "/api/v1/chart/",
        {
            "slice_name": CHART_NAME,
            "viz_type": form["viz_type"],
            "datasource_id": dataset_id,
            "datasource_type": "table",
            "params": json.dumps(form),
            "query_context": json.dumps(context),
        },
        status=201,
    )
    return int(answer["id"])


# -- the browser ---------------------------------------------------------------------------------


def browser_login(driver, superset: Superset, timeout: float = 60) -> None:
    """Log in through Superset's login page as a person does: type the name and the password."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    deadline = time.monotonic() + timeout
    # The page is a React form: a field can take keys before the form's handlers are attached, and
    # then Enter submits nothing (seen once in a full run under load). A person types again; so
    # does this, on a freshly loaded page, until the deadline.
    while True:
        driver.get(f"{superset.base}/login/")
        left = max(1.0, deadline - time.monotonic())
        user = WebDriverWait(driver, left).until(
            ec.element_to_be_clickable((By.CSS_SELECTOR, "input#username, input[name=username]"))
        )
        user.clear()
        user.send_keys(ADMIN)
        password = driver.find_element(By.CSS_SELECTOR, "input#password, input[name=password]")
        password.clear()
        password.send_keys(superset.password, Keys.ENTER)
        try:
            WebDriverWait(driver, min(15.0, max(1.0, deadline - time.monotonic()))).until(
                lambda d: "/login" not in d.current_url
            )
            return
        except TimeoutException:
            if time.monotonic() >= deadline:
                raise superset.fail(f"the login form did not log in: still at {driver.current_url}") from None


# What the explore page shows: a drawn ECharts chart with its row count, or an error.
_CHART_STATE = """
const chart = document.querySelector('.chart-container [_echarts_instance_] canvas')
  && document.querySelector('[data-test="row-count-label"]');
const alert = document.querySelector('.chart-container .ant-alert-error');
return [chart !== null, alert ? alert.innerText : null];
"""


def open_chart(driver, superset: Superset, chart_id: int, timeout: float = 90) -> None:
    """Open a saved chart's explore page and wait until the chart is drawn (or fails)."""
    driver.get(f"{superset.base}/explore/?slice_id={chart_id}")
    deadline = time.monotonic() + timeout
    while True:
        drawn, alert = driver.execute_script(_CHART_STATE)
        if alert:
            raise superset.fail(f"the explore page of chart {chart_id} shows an error: {alert}")
        if drawn:
            break
        if time.monotonic() > deadline:
            raise superset.fail(f"the explore page of chart {chart_id} drew no chart within {timeout:.0f} s")
        time.sleep(0.25)
    time.sleep(1.5)  # ECharts' entry animation


def outside_request(entry: dict) -> bool:
    """A browser log entry about a request to a host other than loopback, which the browser's
    resolver refused (Superset's pages load a telemetry pixel from the internet)."""
    if entry.get("source") != "network":
        return False
    host = urllib.parse.urlsplit(entry["message"].split(" ", 1)[0]).hostname
    return host not in ("127.0.0.1", "localhost", None)
