"""docs/bi-tools.md's recipes do what the page says, against a real `dumpcat serve` of the committed
nan_log dump's catalog (on loopback, with a password, one server for the module).

A recipe is a fenced block right after a `<!-- recipe: NAME -->` line. A ```python recipe runs as a
script of its own (a fresh interpreter), with the page's placeholders HOST, USER, PASSWORD and the
default port 5433 replaced by the test server's; what it prints must be the ```text block that
follows it.
The ```console recipe is a psql session: its `$ psql "..."` line is run with the `dumpcat=> ` lines
on stdin, and what psql prints must be the other lines. Lines compare with runs of spaces collapsed
and blank lines ignored; a `...` line stands for any number of lines.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from catalog.server.server import Limits, Server
from tests.conftest import REPO, nan_log_catalog
from tests.pg_clients import Endpoint
from tests.superset import harness

DOC = REPO / "docs" / "bi-tools.md"
MARKER = re.compile(r"^<!-- recipe: ([a-z0-9-]+) -->$")
FENCE = re.compile(r"^```(\S*)\s*$")
PLACEHOLDER = re.compile(r"\b(HOST|USER|PASSWORD|5433)\b")
PROMPT = "dumpcat=> "
# Every recipe the page has; a recipe whose marker went missing would silently go untested.
RECIPES = {
    "psql", "sqlalchemy", "sqlalchemy-async", "psycopg", "psycopg2", "asyncpg", "adbc", "connectorx",
    "polars", "ibis", "odbc",
}  # fmt: skip
USER = "analyst"
PASSWORD = f"docs-{secrets.token_hex(6)}"  # unique, so that a log holding it can only be this module's


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced block of the page: its info string, text, 1-based line of its opening fence, the
    recipe name it is marked with, and (for a recipe) the ```text block that follows it."""

    lang: str
    code: str
    line: int
    recipe: str | None = None
    output: str | None = None


def blocks(text: str) -> list[Block]:
    """The page's fenced blocks; a recipe takes the ```text block after it (in its section) as output."""
    lines = text.splitlines()
    found: list[Block] = []
    recipe: str | None = None
    new_section = False  # a heading since the last block
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := MARKER.match(line):
            recipe = m[1]
        elif m := FENCE.match(line):
            end = lines.index("```", i + 1)  # ValueError: an unclosed fence
            block = Block(m[1], "\n".join(lines[i + 1 : end]) + "\n", i + 1, recipe)
            prev = found[-1] if found else None
            if block.lang == "text" and prev and prev.recipe and prev.output is None and not new_section:
                found[-1] = dataclasses.replace(prev, output=block.code)
            else:
                found.append(block)
            recipe, new_section, i = None, False, end
        elif line.strip():
            recipe = None  # a marker belongs to the block right after it (blank lines aside)
            new_section = new_section or line.startswith("#")
        i += 1
    return found


BLOCKS = blocks(DOC.read_text())
RECIPE = {b.recipe: b for b in BLOCKS if b.recipe}
PYTHON_RECIPES = sorted(name for name, b in RECIPE.items() if b.lang == "python")


def localize(text: str, pg: Endpoint) -> str:
    """The page's placeholders replaced by the test server's address and login."""
    values = {"HOST": pg.host, "USER": pg.user, "PASSWORD": pg.password, "5433": str(pg.port)}
    return PLACEHOLDER.sub(lambda m: values[m[1]], text)


def _norm(lines: list[str]) -> tuple[str, ...]:
    return tuple(" ".join(line.split()) for line in lines if line.strip())


def same_output(got: str, want: str) -> bool:
    """`got` is `want`, runs of spaces collapsed, blank lines ignored, `...` matching any lines."""
    g, w = _norm(got.splitlines()), _norm(want.splitlines())

    @functools.cache
    def match(i: int, j: int) -> bool:
        if j == len(w):
            return i == len(g)
        if w[j] == "...":
            return any(match(k, j + 1) for k in range(i, len(g) + 1))
        return i < len(g) and g[i] == w[j] and match(i + 1, j + 1)

    return match(0, 0)


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without libpq's PG* and psql's settings (PGSSLMODE and the like)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PG", "PSQL"))}
    env.update(extra)
    return env


def run_python(block: Block, code: str, folder: Path) -> str:
    """Run a recipe's code as a script of its own, as a user runs it (in this process, connectorx's
    pandas reader times out connecting to the server this process runs); what it printed."""
    script = folder / f"recipe_{block.recipe.replace('-', '_')}.py"
    script.write_text(code)
    out = subprocess.run(
        [sys.executable, script.name],
        cwd=folder,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, f"{DOC.name}:{block.line}: recipe {block.recipe} failed:\n{out.stderr}"
    return out.stdout


def check_python(block: Block, code: str, folder: Path) -> None:
    printed = run_python(block, code, folder)
    where = f"{DOC.name}:{block.line}: recipe {block.recipe}"
    assert same_output(printed, block.output), (
        f"{where} printed\n{printed}\n-- the page shows\n{block.output}"
    )


@pytest.fixture(scope="module")
def pg(tmp_path_factory):
    cat_path = nan_log_catalog(tmp_path_factory.mktemp("bi_docs"))
    limits = Limits(query_timeout=60)
    with Server(cat_path, host="127.0.0.1", port=0, users={USER: PASSWORD}, limits=limits) as srv:
        yield Endpoint("127.0.0.1", srv.port, USER, PASSWORD)


def test_the_page_marks_every_recipe():
    assert set(RECIPE) == RECIPES
    for b in BLOCKS:
        if b.lang == "python" and re.search(r"\b5433\b", b.code):
            assert b.recipe, f"{DOC.name}:{b.line}: a Python block connecting to the server is no recipe"
    for name in PYTHON_RECIPES:
        assert RECIPE[name].output, f"recipe {name}: no ```text block of what it prints follows it"
    assert RECIPE["psql"].lang == "console"


@pytest.mark.parametrize("name", PYTHON_RECIPES)
def test_python_recipe(pg, name, tmp_path):
    block = RECIPE[name]
    check_python(block, localize(block.code, pg), tmp_path)


@pytest.mark.parametrize("driver", ["psycopg", "pg8000"])
def test_sqlalchemy_recipe_with_the_other_drivers(pg, driver, tmp_path):
    """The page says the SQLAlchemy recipe works with these URLs too."""
    block = RECIPE["sqlalchemy"]
    assert "postgresql+psycopg2://" in block.code
    assert f"`postgresql+{driver}://`" in DOC.read_text()
    code = localize(block.code, pg).replace("postgresql+psycopg2://", f"postgresql+{driver}://")
    check_python(block, code, tmp_path)


def test_odbc_recipe_writes_no_log_holding_the_password(pg, tmp_path):
    """CommLog=0 in the connection string overrides Debian's CommLog=1, whose log (psqlODBC writes
    it into /tmp) would hold the password."""
    block = RECIPE["odbc"]
    assert "CommLog=0" in block.code
    run_python(block, localize(block.code, pg), tmp_path)
    for log in Path("/tmp").glob("psqlodbc_*.log"):
        with contextlib.suppress(OSError):
            assert PASSWORD not in log.read_text(errors="replace"), f"{log} holds the password"


def test_psql_recipe(pg, tmp_path):
    psql = shutil.which("psql")
    if psql is None:
        pytest.fail("psql (postgresql-client) not installed: install the Debian packages .ci/run installs")
    first, *rest = localize(RECIPE["psql"].code, pg).splitlines()
    assert first.startswith("$ psql "), first
    args = shlex.split(first.removeprefix("$ "))[1:]
    inputs = [line.removeprefix(PROMPT) for line in rest if line.startswith(PROMPT)]
    want = "\n".join(line for line in rest if not line.startswith(PROMPT))
    env = clean_env(PGPASSWORD=pg.password, PGCONNECT_TIMEOUT="10", LC_ALL="C", LANG="C", PAGER="cat")
    out = subprocess.run(
        [psql, "-X", "-v", "ON_ERROR_STOP=1", *args],
        input="\n".join(inputs) + "\n",
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0 and not out.stderr, out.stderr
    assert same_output(out.stdout, want), f"psql printed\n{out.stdout}\n-- the page shows\n{want}"
    # \copy wrote the rows it counted, and a header, to a file on the client's side.
    (copy,) = [line for line in inputs if line.startswith("\\copy")]
    name = re.search(r"TO '([^']+)'", copy)[1]
    count = int(re.search(r"^COPY (\d+)$", out.stdout, re.M)[1])
    assert len((tmp_path / name).read_text().splitlines()) == count + 1


def test_superset_section_gives_the_tested_uri_and_the_screenshot():
    text = DOC.read_text()
    uri = harness.sqlalchemy_uri(5433, "USER", "PASSWORD").replace("127.0.0.1", "HOST")
    assert f"`{uri}`" in text
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert "superset-chart.png" in images
    for image in images:
        assert (DOC.parent / image).is_file(), image


def test_same_output():
    assert same_output("a  b\n\nc\n", "a b\nc")
    assert same_output("a\nb\nc\nd\n", "a\n...\nd")
    assert same_output("a\nd\n", "a\n...\nd")
    assert not same_output("a\nb\n", "a\n...\nc")
    assert not same_output("a\nb\n", "a")
