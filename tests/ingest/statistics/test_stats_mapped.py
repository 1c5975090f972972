"""Big tensors are read through mappings of the page cache (ingest/statistics/_fused_stats.c: mapped).

A mapped file that shrinks under its reader raises SIGBUS on the missing pages. These tests make that
happen for real (a file shorter than the mapping; files truncated by another thread and another process
while ingest reads them) and check that it becomes a "truncated" error for that tensor, that the process
lives on, and that any other SIGBUS still does what it did before.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ingest import helper_pool as hp
from ingest.statistics import kernel as ts
from ingest.statistics.kernel import StatJob, compute_stats_many
from tests.ingest.statistics.test_fused_stats import assert_identical, backend, save, via_file

ROOT = Path(ts.__file__).resolve().parents[2]
F32 = ts._KINDS.index("float32")


@pytest.fixture(autouse=True)
def _no_helpers_left():
    yield
    hp._shutdown_helpers()


def lanes() -> bytearray:
    return bytearray(ts._STATE * 8)


def test_big_tensors_are_read_through_mappings_with_the_same_results(tmp_path: Path) -> None:
    """A tensor past _MAPPED_MIN takes the mapped path (md5 still reads: the hash needs the bytes); the
    results are those of the reading path and of the numpy fallback, bit for bit."""
    rng = np.random.default_rng(3)
    a = rng.standard_normal(3 * ts._MAPPED_WINDOW // 4 + 777).astype(np.float32)  # 3+ windows
    a[::1001] = np.nan
    a[5::3001] = np.inf
    job = save(tmp_path, "big", a)
    assert a.nbytes >= ts._MAPPED_MIN
    calls = []
    real = ts._Accumulator.update_mapped

    def counting(self, fd, offset, m):
        calls.append(m)
        return real(self, fd, offset, m)

    ts._Accumulator.update_mapped = counting
    try:
        with backend(True):
            mapped = via_file(job)
            with_md5 = via_file(job, md5=True)
    finally:
        ts._Accumulator.update_mapped = real
    assert sum(calls) == a.size and len(calls) == 4  # only the first call maps, in 4 MiB windows
    with backend(False):
        assert_identical(via_file(job), mapped)
    assert_identical({**with_md5, "md5": None}, mapped)


def test_a_file_shorter_than_its_mapping_is_eoferror_not_sigbus(tmp_path: Path) -> None:
    """Pages past the end of a file fault with SIGBUS when read: here for real, in this process."""
    path = tmp_path / "short.bin"
    path.write_bytes(np.arange(1024, dtype=np.float32).tobytes())  # 4 KiB: one page
    k = ts._c_kernel
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(EOFError, match="truncated"):
            k.mapped(fd, 0, 64 << 10, F32, 0, lanes())  # 16 pages mapped, 15 past the end
        with pytest.raises(EOFError):
            k.mapped(fd, 100, 8 << 10, F32, 0, lanes())  # an unaligned offset, the fault on page 2
        # the same call within the file still works, and agrees with block()
        a, b = lanes(), lanes()
        assert k.mapped(fd, 8, 4000, F32, 0, a) == k.block(path.read_bytes()[8:4008], F32, 0, b)
        assert a == b
    finally:
        os.close(fd)


def test_mapped_rejects_bad_arguments(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    path.write_bytes(b"\0" * 64)
    k = ts._c_kernel
    fd = os.open(path, os.O_RDONLY)
    try:
        with pytest.raises(ValueError):
            k.mapped(fd, 0, 6, F32, 0, lanes())  # not whole elements
        with pytest.raises(ValueError):
            k.mapped(fd, -1, 4, F32, 0, lanes())
        with pytest.raises(ValueError):
            k.mapped(fd, 0, 4, len(ts._KINDS), 0, lanes())
        with pytest.raises(ValueError):
            k.mapped(fd, 0, 4, F32, 0, bytearray(8))
        with pytest.raises(TypeError):
            k.mapped(fd, 0, 4, F32, 0)
        assert k.mapped(fd, 0, 0, F32, 0, lanes()) == (0, 0, 0, 0, 0, -np.inf, np.inf)
    finally:
        os.close(fd)
    with pytest.raises(OSError):
        k.mapped(fd, 0, 4, F32, 0, lanes())  # closed
    wfd = os.open(path, os.O_WRONLY)  # a mapping for reading needs a readable descriptor
    try:
        with pytest.raises(OSError):
            k.mapped(wfd, 0, 4, F32, 0, lanes())
        # where a file cannot be mapped, tensor_stats reads it instead (nothing folded yet)
        acc = ts._Accumulator(np.dtype(np.float32), False)
        assert ts._fold_mapped(acc, wfd, 0, 64) is False and acc.n == 0
    finally:
        os.close(wfd)


def test_other_sigbus_keeps_its_old_meaning() -> None:
    """After a fault caught inside a mapping, a SIGBUS anywhere else does what it did before: the default
    action stops the process, and with faulthandler enabled, faulthandler reports it."""
    code = (
        "import os, signal, sys, tempfile\n"
        "{setup}"
        "from ingest.statistics import kernel as ts\n"
        "f = tempfile.NamedTemporaryFile(); f.write(b'\\0' * 4096); f.flush()\n"
        "fd = os.open(f.name, os.O_RDONLY)\n"
        "try:\n"
        "    ts._c_kernel.mapped(fd, 0, 1 << 16, 2, 0, bytearray(ts._STATE * 8))\n"
        "except EOFError:\n"
        "    print('caught', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGBUS)\n"
        "print('still alive')\n"
    )
    for setup, stderr_has in (("", ""), ("import faulthandler; faulthandler.enable()\n", "Bus error")):
        out = subprocess.run(
            [sys.executable, "-c", code.format(setup=setup)], capture_output=True, text=True, cwd=ROOT
        )
        assert out.stdout == "caught\n", out.stdout + out.stderr
        assert out.returncode == -signal.SIGBUS
        assert stderr_has in out.stderr


def _shrink_repeatedly(path: Path, full: int, stop: threading.Event) -> None:
    """Truncate the file to one page and give it back its length (as holes), again and again."""
    fd = os.open(path, os.O_WRONLY)
    try:
        while not stop.is_set():
            os.ftruncate(fd, 4096)
            time.sleep(0.0005)
            os.ftruncate(fd, full)
            time.sleep(0.001)
    finally:
        os.ftruncate(fd, full)
        os.close(fd)


def _check_results(results, n_elems: int) -> tuple[int, int]:
    """Every result is a whole tensor's statistics or a truncated error; (ok, shrank-while-read)."""
    ok = shrank = 0
    for _, stats, err in results:
        if err is None:
            assert stats["count"] == n_elems
            ok += 1
        else:
            assert err.startswith("truncated: file has "), err
            shrank += "shrank while it was read" in err
    return ok, shrank


@pytest.mark.parametrize(("workers", "pool"), [(1, "process"), (2, "process"), (2, "thread")])
def test_files_that_shrink_while_read_become_truncated_errors(
    tmp_path: Path, workers: int, pool: str
) -> None:
    """Another thread truncates a 32 MiB tensor's file over and over while compute_stats_many reads it
    (in this process, in helper processes, in two threads at once): no crash, every result whole or
    "truncated", and faults inside a mapping are seen (the mapped reads release the GIL, so the
    truncation lands mid-read)."""
    a = np.ones(8 << 20, dtype=np.float32)
    job = save(tmp_path, "shrinking", a)
    full = os.path.getsize(job.path)
    jobs = [StatJob(i, job.path, job.data_offset, job.stored_dtype, job.shape) for i in range(8)]
    with backend(True):
        list(compute_stats_many(jobs, workers=workers, backend=pool))  # helpers started, page cache warm
        helper_pids = sorted(h.proc.pid for h in hp._idle_helpers)
        assert len(helper_pids) == (workers - 1 if pool == "process" else 0)
        stop = threading.Event()
        shrinker = threading.Thread(target=_shrink_repeatedly, args=(Path(job.path), full, stop))
        shrinker.start()
        seen_ok = seen_shrank = 0
        deadline = time.monotonic() + 60
        try:
            while not seen_shrank and time.monotonic() < deadline:
                ok, shrank = _check_results(compute_stats_many(jobs, workers=workers, backend=pool), a.size)
                seen_ok += ok
                seen_shrank += shrank
        finally:
            stop.set()
            shrinker.join()
        assert seen_shrank, "no read ever met the truncation within a minute"
        # afterwards the file is whole again (zeros where it was cut) and reads normally
        results = list(compute_stats_many(jobs, workers=workers, backend=pool))
    assert all(err is None for _, _, err in results)
    assert results[0][1]["count"] == a.size
    # the helper processes that met the faults are the ones that started, alive and reused
    assert sorted(h.proc.pid for h in hp._idle_helpers if h.reusable()) == helper_pids


def test_a_file_shrunk_by_another_process_is_reported_truncated(tmp_path: Path) -> None:
    """The same with a separate process truncating (as a producer rewriting its dump would)."""
    a = np.ones(8 << 20, dtype=np.float32)
    job = save(tmp_path, "shrunk", a)
    full = os.path.getsize(job.path)
    code = (
        "import os, time\n"
        f"fd = os.open({job.path!r}, os.O_WRONLY)\n"
        "print('ready', flush=True)\n"
        "while True:  # until killed\n"
        f"    os.ftruncate(fd, 4096); time.sleep(0.0005); os.ftruncate(fd, {full}); time.sleep(0.001)\n"
    )
    shrinker = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert shrinker.stdout.readline() == b"ready\n"
        shrank = 0
        deadline = time.monotonic() + 60
        with backend(True):
            while not shrank and time.monotonic() < deadline:
                shrank += _check_results(compute_stats_many([job] * 4, workers=1), a.size)[1]
        assert shrank
    finally:
        shrinker.kill()
        shrinker.wait()
