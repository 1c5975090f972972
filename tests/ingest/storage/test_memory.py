"""The allocator settings an ingest runs with (ingest/storage/memory.py), in fresh processes: they take
effect only if made before pyarrow and DuckDB load, so importing dumpcat makes them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

ROOT = REPO
sys.path.insert(0, str(ROOT / "bench"))  # synth, the tree generator

_PROBE = (
    "import sys\n"
    "import {first}\n"
    "import pyarrow as pa, os\n"
    "from ingest.storage import memory\n"
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


# After a mapped block is freed, glibc's default raises its mapping threshold past it (up to 32 MiB),
# so a block a little smaller then comes from the heap; with the ingest's fixed threshold it is mapped
# on its own (and unmapped when freed). glibc maps only a request that no free chunk can serve, so the
# probe asks for more than all the free memory the allocator holds (mallinfo2's fordblks, every arena):
# what an ingest left free can then never answer it. A crowded heap is reported, not guessed at.
_PROBE_BLOCK = 29 << 20
_THRESHOLD_PROBE = (
    "import ctypes, sys\n"
    "import ingest\n"
    "from ingest.storage import memory\n"
    "{tune}\n"
    "class Info(ctypes.Structure):\n"
    "    _fields_ = [(n, ctypes.c_size_t) for n in ('arena', 'ordblks', 'smblks', 'hblks', 'hblkhd',\n"
    "                'usmblks', 'fsmblks', 'uordblks', 'fordblks', 'keepcost')]\n"
    "libc = ctypes.CDLL(None)\n"
    "libc.mallinfo2.restype = Info\n"
    "libc.malloc.restype = ctypes.c_void_p\n"
    "libc.free.argtypes = [ctypes.c_void_p]\n"
    "libc.free(libc.malloc(30 << 20))\n"
    f"size = {_PROBE_BLOCK}\n"
    "free_bytes = libc.mallinfo2().fordblks\n"
    "if free_bytes >= size:\n"
    "    sys.exit(f'the heap holds {{free_bytes}} free bytes: a free chunk may serve the probe')\n"
    "block = libc.malloc(size)\n"
    # glibc marks a chunk it mapped on its own with IS_MMAPPED (bit 1 of the size word before it):
    # read from the block itself, not from process-wide counters other threads move meanwhile
    "print(bool(ctypes.c_size_t.from_address(block - ctypes.sizeof(ctypes.c_size_t)).value & 2))\n"
    "libc.free(block)\n"
)


def _mapped_alone(tune: bool, **env: str) -> bool:
    code = _THRESHOLD_PROBE.format(tune="memory.tune_for_ingest()" if tune else "")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**environ, **env},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.split() == ["True"]


def test_an_ingesting_process_maps_big_buffers_on_their_own():
    """The walk's buffers go back to the system when freed, not into a heap its small objects pin."""
    assert not _mapped_alone(tune=False)  # importing dumpcat leaves glibc's thresholds alone
    assert _mapped_alone(tune=True)


def test_a_threshold_the_user_set_is_kept():
    assert not _mapped_alone(tune=True, MALLOC_MMAP_THRESHOLD_=str(32 << 20))  # glibc's largest


def test_helpers_start_with_the_ingest_thresholds():
    from ingest.storage import memory

    env = memory.helper_environment()
    assert env["MALLOC_MMAP_THRESHOLD_"] == str(256 * 1024) and env["MALLOC_TRIM_THRESHOLD_"] == str(1 << 20)
    assert _mapped_alone(
        tune=False, **{k: env[k] for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")}
    )


def test_an_ingest_tunes_its_process(tmp_path):
    """Ingester sets the thresholds (a one-shot ingest and a watcher both make one)."""
    dump = ROOT / "tests" / "data" / "ms210" / "nan_log" / "dump"
    catalog = str(tmp_path / "cat")
    ingest = f"from ingest.pipeline import ingest_dump; ingest_dump({catalog!r}, {str(dump)!r}, workers=1)"
    code = _THRESHOLD_PROBE.format(tune=ingest)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=environ, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]


@pytest.mark.parametrize("one_shot", [False, True], ids=["flat-per-batch", "one-shot"])
def test_helpers_beside_a_full_batch_commit(tmp_path, monkeypatch, one_shot):
    """Where the writer's DuckDB works on a full batch while the walk waits (a watcher's commit: a
    flat file per batch), the helpers, idle then, are stopped first (their memory back), and the
    walk starts new ones when it scans on. A one-shot ingest's batches only write their files (its
    flat files wait for its end): its helpers stay up across them, and are stopped before the run's
    flat files are resolved at its end."""
    import psutil
    import synth

    from ingest import helper_pool
    from ingest.pipeline import Ingester, detect_dump
    from ingest.readers import mindspore_npy
    from ingest.storage import flat
    from ingest.storage.store import CatalogStore

    root = tmp_path / "tree"
    synth.generate(root, 12_000, ranks=1, iterations=3, statistic_csv=False, workers=1)
    helper_pool.stop_idle_helpers()
    me = psutil.Process()

    def helpers_alive() -> int:
        return sum("_serve" in " ".join(p.cmdline()) for p in me.children() if p.is_running())

    at_commits: list[tuple[int, int, bool]] = []  # (tensors in the batch, helpers alive, last)
    commit = CatalogStore.commit_batch

    def observed_commit(self, run, tables, **kwargs):
        rows = tables["tensors"].num_rows if "tensors" in tables else 0
        at_commits.append((rows, helpers_alive(), kwargs.get("last", False)))
        return commit(self, run, tables, **kwargs)

    at_resolve: list[int] = []  # helpers alive as the run's flat files are resolved (one-shot)
    resolve_run = flat.FlatWriter.resolve_run

    def observed_resolve_run(self, *args, **kwargs):
        at_resolve.append(helpers_alive())
        return resolve_run(self, *args, **kwargs)

    # scan groups of a directory each (16,384 files by default), so that a batch fills per group
    monkeypatch.setattr(mindspore_npy, "_SCAN_GROUP_FILES", 4000)
    monkeypatch.setattr(CatalogStore, "commit_batch", observed_commit)
    monkeypatch.setattr(flat.FlatWriter, "resolve_run", observed_resolve_run)
    store = CatalogStore(tmp_path / "cat", create=True).shard("r", None)
    ing = Ingester(store, "r", root, detect_dump(root), workers=2, batch_rows=4000)
    with store.writer_lock():
        ing.begin()
        if one_shot:
            store.start_run()
        ing.scan_all()
        ing.flush(last=one_shot)
        store.finish_run("r")
    assert ing.summary.tensors == 12_000 and ing.summary.errors == 0
    full = [(alive, last) for rows, alive, last in at_commits if rows >= 2000]
    assert len(full) >= 3, at_commits
    if one_shot:
        assert all(alive >= 1 for alive, last in full if not last), at_commits
        assert at_resolve == [0]
    else:
        assert [alive for alive, _ in full] == [0] * len(full), at_commits
        assert not at_resolve


# -- pandas, which pyarrow would import for nothing -------------------------------------------------

_PANDAS_PROBE = (
    "import sys\n"
    "from ingest.storage.memory import decline_pandas_for_arrow\n"
    "{before}"
    "decline_pandas_for_arrow()\n"
    "import numpy as np, pyarrow as pa\n"
    "a = pa.array([1, 2]); a.to_numpy(); pa.chunked_array([a]).to_numpy(); pa.table({{'x': [1]}})\n"
    "print('pandas' in sys.modules)\n"
    "import pandas as pd\n"
    "kind = lambda: str(pa.array(pd.Categorical(['a', 'b'])).type).split('<')[0]\n"
    "print(kind(), type(pa.table({{'x': [1, 2]}}).to_pandas()).__name__, kind())\n"
)


def _pandas_probe(before: str = "") -> list[str]:
    out = subprocess.run(
        [sys.executable, "-c", _PANDAS_PROBE.format(before=before)],
        capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.split("\n")[:2]


def test_arrow_works_without_pandas_after_declining_it_and_pandas_still_imports():
    # pyarrow's arrays and numpy conversions import no pandas; a later `import pandas` and
    # `to_pandas` work. Until such a conversion, pyarrow does not recognise a pandas Categorical
    # (strings, not a dictionary); after it, it does.
    assert _pandas_probe() == ["False", "string DataFrame dictionary"]


def test_a_process_that_has_pandas_keeps_all_of_pyarrows_pandas_support():
    assert _pandas_probe(before="import pandas\n") == ["True", "dictionary DataFrame dictionary"]


_CLI = (
    "import atexit, sys\n"
    "atexit.register(lambda: print('pandas imported:', 'pandas' in sys.modules))\n"
    "from catalog.cli.commands import main\n"
    "sys.argv = ['dumpcat', *sys.argv[1:]]\n"
    "main()\n"
)


def test_a_command_line_ingest_imports_no_pandas_and_catalogs_the_same(tmp_path):
    """`dumpcat ingest` and `dumpcat stats` decline pandas (catalog/cli/commands.py): the catalog of
    three producers' real dumps they make equals the one an ingest with pandas imported makes."""
    from tests.ingest.storage.test_definitions_cache import TREES, _views

    cli_cat, lib_cat = tmp_path / "cli", tmp_path / "lib"
    for run, root in TREES.items():
        for command in (
            ["ingest", "-c", str(cli_cat), "--run", run, "--no-stats", str(root)],
            ["stats", str(cli_cat)],
        ):
            out = subprocess.run(
                [sys.executable, "-c", _CLI, *command], capture_output=True, text=True, cwd=ROOT, timeout=300
            )
            assert out.returncode == 0, out.stderr
            assert out.stdout.strip().endswith("pandas imported: False"), out.stdout
    probe = (
        "import sys, pandas\n"
        "from ingest.pipeline import ingest_dump\n"
        "for run, root in zip(sys.argv[2::2], sys.argv[3::2]):\n"
        "    ingest_dump(sys.argv[1], root, run=run)\n"
    )
    args = [str(lib_cat)] + [str(x) for run, root in TREES.items() for x in (run, root)]
    out = subprocess.run(
        [sys.executable, "-c", probe, *args], capture_output=True, text=True, cwd=ROOT, timeout=300
    )
    assert out.returncode == 0, out.stderr
    assert _views(cli_cat) == _views(lib_cat)
