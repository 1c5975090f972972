"""The digest of dumpcat's shipped source (catalog/, ingest/, sql/, pyproject.toml, setup.py).

tests/superset/install.sh installs dumpcat into Superset's virtual environment (for the
`dumpcat://` dialect) and writes this digest beside it; the Superset tests compare it with the
checkout's, so that a stale copy fails with the command that refreshes it instead of testing old
code. Run as a script (`python3 source_digest.py`), it prints the digest; standard library only.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SUFFIXES = {".py", ".sql", ".c", ".h"}


def source_digest(repo: Path = REPO) -> str:
    digest = hashlib.sha256()
    files = [repo / "pyproject.toml", repo / "setup.py"]
    for folder in ("catalog", "ingest", "sql"):
        files += [
            p for p in (repo / folder).rglob("*") if p.suffix in SUFFIXES and "__pycache__" not in p.parts
        ]
    for path in sorted(files):
        digest.update(path.relative_to(repo).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


if __name__ == "__main__":
    sys.stdout.write(source_digest() + "\n")
