"""The allocator settings an ingest runs with (ingest/memory.py), in fresh processes: they take
effect only if made before pyarrow and DuckDB load, so importing dumpcat makes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]

_PROBE = (
    "import sys\n"
    "import {first}\n"
    "import pyarrow as pa, os\n"
    "from ingest import memory\n"
    "print(pa.default_memory_pool().backend_name, os.environ.get('ARROW_DEFAULT_MEMORY_POOL'),\n"
    "      memory.helper_environment().get('MALLOC_ARENA_MAX'))\n"
)


def _probe(first: str, **env: str) -> list[str]:
    environ = {
        k: v for k, v in os.environ.items() if k not in ("ARROW_DEFAULT_MEMORY_POOL", "MALLOC_ARENA_MAX")
    }
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(first=first)], capture_output=True, text=True, cwd=ROOT,
        env={**environ, **env}, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def test_importing_dumpcat_puts_arrow_on_the_system_allocator():
    # through either package, as a user's script or the command line would
    assert _probe("catalog") == ["system", "system", "2"]
    assert _probe("ingest") == ["system", "system", "2"]


def test_settings_the_user_made_are_kept():
    assert _probe("catalog", ARROW_DEFAULT_MEMORY_POOL="mimalloc", MALLOC_ARENA_MAX="4") == [
        "mimalloc", "mimalloc", "4"
    ]  # fmt: skip
