"""Dependencies match use.

- What `pip install .` installs is enough to run dumpcat: every third-party package a shipped
  module imports when it loads is a core dependency in pyproject.toml (an optional extra only for
  its own front end: Spark, the HTML report). `dumpcat serve` once imported sqlglot, which only the
  test and spark extras installed: after the README's `pip install -e .` it ended with a traceback.
- Nothing more: every core dependency and every package of the `spark` and `report` extras is
  imported by some module of catalog/, ingest/ or sql/ (plotly, 20 MB for one command, was core).
- Without an extra, its command says which to install, in a real subprocess where the package
  cannot be imported: `pip install -e '.[report]'`, `pip install -e '.[spark]'` (dumpcat is not on
  PyPI: `pip install 'dumpcat[spark]'` would fetch another project's package).
- constraints.txt (tests/lock.py) pins every distribution the extras bring in, each pin within
  pyproject's range, and this environment has exactly those versions: the suite ran on the lock.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib

import pytest
from packaging.utils import canonicalize_name

from tests import lock
from tests.conftest import REPO

# modules that may import the packages of an extra, and which
EXTRAS = {"catalog/spark/": "spark", "catalog/report/figures.py": "report"}


def _requirement_names(specs: list[str]) -> set[str]:
    return {re.split(r"[<>=!~;\[ ]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in specs}


def _top_level_imports(path) -> set[str]:
    """Packages a module imports when it loads: module-level statements, not those inside functions
    (imported when called) or under `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                visit(node.body)

    visit(tree.body)
    return names


def test_every_package_a_shipped_module_imports_is_a_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    core = _requirement_names(project["dependencies"])
    extras = {name: _requirement_names(specs) for name, specs in project["optional-dependencies"].items()}
    distributions = importlib.metadata.packages_distributions()
    ours = {"catalog", "ingest", "sql", "dumpcat_sql"}
    missing = []
    for package in ("catalog", "ingest"):
        for path in sorted((REPO / package).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            allowed = set(core)
            for prefix, extra in EXTRAS.items():
                if rel.startswith(prefix):
                    allowed |= extras[extra]
            for name in _top_level_imports(path) - ours - set(sys.stdlib_module_names):
                dists = {d.lower().replace("_", "-") for d in distributions.get(name, [name])}
                if not dists & allowed:
                    missing.append(f"{rel}: {name} ({', '.join(sorted(dists))})")
    assert missing == [], "imported when the module loads, but not a core dependency:\n" + "\n".join(missing)


def _all_imports(path) -> set[str]:
    """Every top-level package a module imports anywhere (in functions too), absolute imports."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_runtime_dependency_is_imported():
    """A core dependency (or one of the spark/report extras) that no module of catalog/, ingest/ or
    sql/ imports is weight every install carries for nothing."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    declared = _requirement_names(project["dependencies"])
    for extra in ("spark", "report"):
        declared |= _requirement_names(project["optional-dependencies"][extra])
    distributions = importlib.metadata.packages_distributions()  # import name -> distributions
    imported: set[str] = set()
    for package in ("catalog", "ingest", "sql"):
        for path in (REPO / package).rglob("*.py"):
            for name in _all_imports(path):
                imported |= {d.lower().replace("_", "-") for d in distributions.get(name, [name])}
    assert "protobuf" in imported and "ml-dtypes" in imported  # import names that differ from theirs
    assert "sqlalchemy" in imported  # the dumpcat:// dialect (catalog/sqlalchemy_dialect.py)
    unused = declared - imported
    assert unused == set(), f"declared in pyproject.toml but imported by no runtime module: {sorted(unused)}"


def _without(package: str, *args: str, cwd) -> subprocess.CompletedProcess:
    """`dumpcat ARGS` in a fresh interpreter where `package` cannot be imported (ModuleNotFoundError,
    as when it is not installed)."""
    code = (
        f"import sys; sys.modules[{package!r}] = None; "
        "from catalog.cli.commands import main; main(sys.argv[1:])"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=300
    )


@pytest.fixture(scope="module")
def nan_log_catalog(tmp_path_factory):
    """The committed nan_log dump ingested without statistics (so `stats --spark` has work)."""
    cat = tmp_path_factory.mktemp("deps") / "cat"
    dump = REPO / "tests/data/ms210/nan_log/dump"
    cmd = [sys.executable, "-m", "catalog.cli", "ingest", str(dump), "--catalog", str(cat), "--no-stats"]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    return cat


def test_report_without_plotly_names_the_extra(nan_log_catalog, tmp_path):
    proc = _without("plotly", "report", str(nan_log_catalog), "--out", str(tmp_path / "r.html"), cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == (
        "dumpcat: error: plotly is not installed, which the report draws with: pip install -e '.[report]'\n"
    )
    assert not (tmp_path / "r.html").exists()
    doc = (REPO / "docs/report.md").read_text(encoding="utf-8")
    assert proc.stderr.strip() in " ".join(doc.split())  # the line docs/report.md quotes
    # every other command works without plotly
    views = _without("plotly", "views", str(nan_log_catalog), cwd=tmp_path)
    assert views.returncode == 0 and "first_anomaly:" in views.stdout, views.stderr


def test_spark_without_pyspark_names_the_extra(nan_log_catalog, tmp_path):
    proc = _without("pyspark", "stats", str(nan_log_catalog), "--spark", "local[1]", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("dumpcat: error: pyspark is not installed: pip install -e '.[spark]'")
    assert proc.stderr.count("\n") == 1, proc.stderr


def test_no_install_hint_names_the_pypi_package():
    """`pip install 'dumpcat[...]'` would install an unrelated PyPI project called dumpcat."""
    pattern = re.compile(r"pip install (-\S+ )*['\"]?dumpcat\b")
    texts = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
    for package in ("catalog", "ingest"):
        texts += sorted((REPO / package).rglob("*.py"))
    offenders = [
        f"{p.relative_to(REPO)}:{n}"
        for p in texts
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line) and "would fetch" not in line and "fetches another" not in line
    ]
    assert offenders == []


# -- constraints.txt -------------------------------------------------------------------------------


def test_lock_pins_satisfy_pyproject_ranges():
    pins = lock.read_lock()
    outside = []
    for req in lock.project_requirements():
        name = canonicalize_name(req.name)
        if name not in pins:
            outside.append(f"{name}: not in constraints.txt")
        elif not req.specifier.contains(pins[name], prereleases=True):
            outside.append(f"{name}=={pins[name]} is outside pyproject's {req.specifier}")
    assert outside == [], "run `python -m tests.lock` after installing:\n" + "\n".join(outside)


def test_lock_is_what_this_environment_runs():
    """The lock covers every distribution the extras install, and each is installed at the locked
    version (CI installs with `-c constraints.txt`): the suite ran on what the image installs."""
    try:
        installed = lock.closure(lock.project_requirements())
    except KeyError as exc:
        pytest.fail(f"{exc.args[0]} is not installed: pip install -c constraints.txt -e '.[test]'")
    installed.pop("dumpcat", None)
    pins = lock.read_lock()
    differ = sorted(
        f"{n}: locked {pins.get(n, '-')}, installed {installed.get(n, '-')}"
        for n in set(pins) | set(installed)
        if pins.get(n) != installed.get(n)
    )
    assert differ == [], (
        "constraints.txt is not current (pip install -c constraints.txt -e '.[test]', or after a "
        "deliberate upgrade `python -m tests.lock`):\n" + "\n".join(differ)
    )
    assert lock.LOCK.read_text(encoding="utf-8") == lock.render(pins)  # as the generator writes it


def test_lock_check_command_reports_a_drift(tmp_path, monkeypatch, capsys):
    """`python -m tests.lock --check` names what differs."""
    stale = tmp_path / "constraints.txt"
    pins = lock.read_lock()
    pins["duckdb"] = "2.0.0.dev0"
    stale.write_text(lock.render(pins), encoding="utf-8")
    monkeypatch.setattr(lock, "LOCK", stale)
    assert lock.main(["--check"]) == 1
    assert "duckdb: locked 2.0.0.dev0, installed " in capsys.readouterr().out
