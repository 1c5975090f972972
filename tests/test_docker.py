"""The Dockerfile, checked without a Docker engine (none runs here or in CI).

What is tested: the base image; that everything `pip install .` needs from pyproject.toml is copied
into the image and not excluded by .dockerignore; the port and volumes; the entrypoint's command
line, by running its exact shell text with `/bin/sh` (as the image does) against a stand-in
`dumpcat` that records its arguments; that the flags it passes exist in `dumpcat serve --help`; and
`dumpcat serve` started with the entrypoint's arguments on temporary /catalog and /dumps folders.
The last two check `dumpcat serve --help` and start the real server on fresh folders.

Not tested here: building the image (pulling python:3.11-slim, pip inside it), the container's
networking and volume mounts, and file events across a bind mount.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from catalog.cli.commands import main as cli_main
from tests.conftest import REPO

ROOT = REPO
DOCKERFILE = ROOT / "Dockerfile"


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


def _entrypoint() -> list[str]:
    (args,) = _all("ENTRYPOINT")
    argv = json.loads(args)  # exec form: a JSON array
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    return argv


def _serve_argv(env: dict[str, str], tmp_path: Path, extra: tuple[str, ...] = ()) -> list[str]:
    """The arguments the entrypoint gives `dumpcat`, running it with /bin/sh and a stand-in."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    record = tmp_path / "argv.json"
    stub = bindir / "dumpcat"
    stub.write_text(
        f"#!{sys.executable}\nimport json, sys\nopen({str(record)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
    )
    stub.chmod(0o755)
    full_env = {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", **env}
    proc = subprocess.run([*_entrypoint(), *extra], env=full_env, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return json.loads(record.read_text())


def test_base_image_is_python_311_slim():
    """Every stage (the build stage compiling the C kernel, the final image) is python:3.11-slim."""
    froms = [shlex.split(f)[0] for f in _all("FROM")]
    assert froms and set(froms) == {"python:3.11-slim"}


def test_installs_the_package_from_the_copied_sources():
    sources = _copy_sources()
    for src in sources:
        assert (ROOT / src).exists(), f"Dockerfile copies {src}, which is not in the repository"
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = project["tool"]["setuptools"]["packages"]
    # a subpackage (sql.queries) comes with its top-level folder
    needed = {"pyproject.toml", project["project"]["readme"], *(p.split(".")[0] for p in packages)}
    assert needed <= {s.rstrip("/") for s in sources}, f"pip install . needs {needed}"
    # the package is built from the copied sources (a wheel in the build stage, or installed)
    assert any(
        shlex.split(run)[:3] == ["pip", "install", "."]
        or (shlex.split(run)[:2] == ["pip", "wheel"] and shlex.split(run)[-1] == ".")
        for run in _all("RUN")
    )


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


def test_entrypoint_without_credentials(tmp_path):
    argv = _serve_argv({}, tmp_path)
    assert argv == ["serve", "/catalog", "--host", "0.0.0.0", "--port", "5433", "--watch", "/dumps"]


def test_entrypoint_passes_credentials_and_tls_from_the_environment(tmp_path):
    env = {
        "DUMPCAT_USER": "data team",
        "DUMPCAT_PASSWORD": "p'a\"s$s w",
        "DUMPCAT_TLS_CERT": "/certs/server.crt",
        "DUMPCAT_TLS_KEY": "/certs/server.key",
    }
    argv = _serve_argv(env, tmp_path)
    assert argv[:8] == ["serve", "/catalog", "--host", "0.0.0.0", "--port", "5433", "--watch", "/dumps"]
    assert argv[8:] == [
        "--user", "data team", "--password", "p'a\"s$s w",
        "--tls-cert", "/certs/server.crt", "--tls-key", "/certs/server.key",
    ]  # fmt: skip


def test_docker_run_arguments_are_appended(tmp_path):
    """`docker run dumpcat --some-flag` reaches dumpcat serve (sh -c passes "$@")."""
    argv = _serve_argv({}, tmp_path, ("--extra", "x y"))
    assert argv[-2:] == ["--extra", "x y"]


def _serve_help() -> str:
    result = CliRunner().invoke(cli_main, ["serve", "--help"])
    assert result.exit_code == 0, result.output
    return result.output


def test_entrypoint_flags_exist_in_dumpcat_serve(tmp_path):
    help_text = _serve_help()
    env = {"DUMPCAT_USER": "u", "DUMPCAT_PASSWORD": "p", "DUMPCAT_TLS_CERT": "c", "DUMPCAT_TLS_KEY": "k"}
    for flag in (a for a in _serve_argv(env, tmp_path) if a.startswith("--")):
        assert flag in help_text, f"the entrypoint passes {flag}, which `dumpcat serve` does not take"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_entrypoint_command_serves_on_fresh_volumes(tmp_path):
    """The container's command, with /catalog and /dumps replaced by empty temporary folders (a
    first `docker run` on new volumes) and the port by a free one: it must start listening."""
    _serve_help()
    exe = shutil.which("dumpcat")
    if exe is None:
        pytest.fail("the dumpcat console script is not installed: pip install -e .")
    catalog, dumps = tmp_path / "catalog", tmp_path / "dumps"
    catalog.mkdir()
    dumps.mkdir()
    port = _free_port()
    argv = _serve_argv({}, tmp_path)
    swap = {"/catalog": str(catalog), "/dumps": str(dumps), "5433": str(port), "0.0.0.0": "127.0.0.1"}
    cmd = [exe, *(swap.get(a, a) for a in argv)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"{shlex.join(cmd)} exited {proc.returncode}: {proc.stderr.read()}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("dumpcat serve did not listen within 30 s")
                time.sleep(0.2)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
