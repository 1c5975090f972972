"""`dumpcat compare`'s batched path (ingest.compare_metrics.plan_batches -> compare_batch, the kernel's
columns(): a task of many pairs as columns, the metrics back as columns) gives the same numbers, bit
for bit, as the pair-by-pair path (`compare_jobs` on one pair), on real files of every dtype the
kernel tests cover, NaN/inf, denormals, 0-d and one-element tensors, shapes and dtypes that differ,
integers, big tensors, missing and truncated files, absent sides and a raw device-format dump."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from ingest import compare_metrics as cm
from ingest.compare_metrics import METRIC_FIELDS, MetricColumns, PairJob, compare_jobs, compare_table
from tests.conftest import REPO
from tests.ingest.test_compare_kernel import PAIRS, values, write

PROFILES = ("finite", "denormal", "nan_same", "inf_same", "nan_other", "inf_other")
SHAPES = [(), (1,), (3,), (257,), (40, 25), (70_001,), (300_000,)]  # the last > 1 MiB: read_tensor's path
RAW_DUMP = REPO / "tests" / "data" / "ascend_raw" / "nan_log_rank"
SIDE = ("path", "data_offset", "stored_dtype", "shape", "format", "host_shape")


@pytest.fixture(autouse=True)
def _restore_backend():
    before = cm._kernel
    yield
    cm._kernel = before


def bits(m: cm.PairMetrics) -> tuple:
    """Everything a pair's row holds, floats by their bits (0.0 and -0.0 differ, NaN equals NaN)."""
    return (
        m.status,
        m.numel,
        *(None if (v := getattr(m, f)) is None else struct.pack("<d", v).hex() for f in METRIC_FIELDS),
    )


def table_of(jobs: list[PairJob]) -> pa.Table:
    """The pairs as sql/queries/compare_pairs.sql gives them to `dumpcat compare` (row i: key i)."""
    assert [j.key for j in jobs] == list(range(len(jobs)))
    cols = {}
    types = (pa.string(), pa.int64(), pa.string(), pa.list_(pa.int64()), pa.string(), pa.list_(pa.int64()))
    for prefix, which in (("", "run"), ("baseline_", "baseline")):
        for k, (name, typ) in enumerate(zip(SIDE, types, strict=True)):
            vals = [None if getattr(j, which) is None else getattr(j, which)[k] for j in jobs]
            if name in ("shape", "host_shape"):
                vals = [None if v is None else list(v) for v in vals]
            cols[prefix + name] = pa.array(vals, typ)
    return pa.table(cols)


def real_jobs(tmp_path: Path) -> list[PairJob]:
    rng = np.random.default_rng(35)
    jobs: list[PairJob] = []

    def add(run, baseline):
        jobs.append(PairJob(len(jobs), run, baseline))

    for run, baseline in PAIRS:
        for profile in PROFILES:
            for shape in SHAPES if profile in ("finite", "nan_same") else SHAPES[:5]:
                x, y = values(rng, shape, run, baseline, profile)
                i = len(jobs)
                add(write(tmp_path, f"r{i}", x), write(tmp_path, f"b{i}", y))
    ok = jobs[len(PROFILES) + 4]
    short = tmp_path / "short.npy"
    short.write_bytes(Path(ok.run[0]).read_bytes()[:-3])
    gone = (str(tmp_path / "gone.npy"), *ok.run[1:])
    add(gone, ok.baseline)
    add(ok.run, gone)
    add(gone, gone)
    add((str(short), *ok.run[1:]), ok.baseline)
    add(("bad\0path", *ok.run[1:]), ok.baseline)
    add(ok.run, None)
    add(None, ok.baseline)
    add(None, None)
    ints = rng.integers(-50, 50, (6, 7)).astype(np.int32)
    add(write(tmp_path, "i32a", ints), write(tmp_path, "i32b", ints + 1))
    add(write(tmp_path, "f64", np.ones(7)), write(tmp_path, "f32", np.ones(7, np.float32)))  # dtype mismatch
    add(
        write(tmp_path, "s1", np.ones((3, 4), np.float32)), write(tmp_path, "s2", np.ones((4, 3), np.float32))
    )
    add(write(tmp_path, "s3", np.ones((12,), np.float32)), write(tmp_path, "s4", np.ones((3, 4), np.float32)))
    add(
        write(tmp_path, "e1", np.ones((0, 4), np.float32)), write(tmp_path, "e2", np.ones((0, 4), np.float32))
    )
    fort = np.asfortranarray(rng.standard_normal((5, 6)).astype(np.float32))
    fpath = tmp_path / "fortran.npy"
    np.save(fpath, fort)
    fside = (str(fpath), int(np.load(fpath, mmap_mode="r").offset), "float32", (5, 6), "fortran_order", None)
    add(fside, write(tmp_path, "c_order", np.ascontiguousarray(fort)))
    return jobs


def raw_jobs(tmp_path: Path, start: int) -> list[PairJob]:
    """Device-format (FRACTAL_NZ) and plain slots of a real raw Ascend dump, located by its catalog."""
    from catalog import Catalog

    cat = Catalog.open(tmp_path / "cat", create=True)
    cat.ingest(str(RAW_DUMP))
    cols = ", ".join(SIDE)
    rows = []
    for where in ("format = 'FRACTAL_NZ'", "format IS DISTINCT FROM 'FRACTAL_NZ'"):
        q = f"SELECT {cols} FROM tensors WHERE {where} ORDER BY path, data_offset LIMIT 20"
        rows += cat.sql(q).to_pylist()
    cat.close()
    sides = [tuple(r[c] for c in SIDE) for r in rows]
    assert any(s[4] == "FRACTAL_NZ" for s in sides)
    return [PairJob(start + i, s, sides[(i + 1) % len(sides)] if i % 3 else s) for i, s in enumerate(sides)]


def one_by_one(jobs: list[PairJob]) -> list[tuple]:
    return [bits(compare_jobs([job])[0][1]) for job in jobs]


def batched(table: pa.Table, workers: int = 1, **plan) -> list[tuple]:
    res = MetricColumns.concat(list(compare_table(table, workers, **plan)))
    assert sorted(res.key.tolist()) == list(range(table.num_rows))
    return [bits(m) for _, m in sorted(res.pair_metrics(), key=lambda km: km[0])]


def test_batches_give_the_pair_by_pair_bits(tmp_path: Path) -> None:
    jobs = real_jobs(tmp_path)
    jobs += raw_jobs(tmp_path, len(jobs))
    table = table_of(jobs)
    assert cm.use_c_kernel(True)
    want = one_by_one(jobs)
    statuses = {w[0] for w in want}
    assert statuses >= set(cm.STATUSES) - {"unsupported_dtype", "error"}
    tasks = list(cm.plan_batches(table, task_bytes=256 << 10, task_pairs=64))
    in_kernel = sum(len(t.key) for t in tasks)
    assert len(tasks) > 5 and in_kernel > len(jobs) // 2  # most pairs go to the kernel, as columns
    assert sum(len(t) for t in tasks) == len(jobs)
    assert batched(table, task_bytes=256 << 10, task_pairs=64) == want
    assert batched(table) == want  # the default task size
    assert batched(table, workers=2, task_bytes=256 << 10) == want  # through a helper process


def test_numpy_fallback_gives_the_pair_by_pair_bits(tmp_path: Path) -> None:
    """Without the kernel (here: use_c_kernel(False)), compare_batch computes the kernel's pairs one by
    one on numpy: the numbers of compare_jobs on numpy."""
    jobs = real_jobs(tmp_path)[::3]
    jobs = [PairJob(i, j.run, j.baseline) for i, j in enumerate(jobs)]
    table = table_of(jobs)
    tasks = list(cm.plan_batches(table))  # planned with the kernel: its pairs travel as columns
    assert sum(len(t.key) for t in tasks) > 0
    cm.use_c_kernel(False)
    want = one_by_one(jobs)
    got = MetricColumns.concat([cm.compare_batch(t) for t in tasks])
    assert [bits(m) for _, m in sorted(got.pair_metrics(), key=lambda km: km[0])] == want


def test_tasks_are_cut_by_bytes_and_pairs(tmp_path: Path) -> None:
    small = write(tmp_path, "small", np.ones(1000, np.float32))  # 8 KB a pair
    big = write(tmp_path, "big", np.ones(1 << 20, np.float32))  # 8 MB a pair
    jobs = [PairJob(i, small, small) for i in range(100)] + [PairJob(100, big, big)]
    jobs += [PairJob(101 + i, small, small) for i in range(10)]
    tasks = list(cm.plan_batches(table_of(jobs), task_bytes=64_000, task_pairs=5))
    sizes = [len(t) for t in tasks]
    assert max(sizes) <= 5 and sum(sizes) == len(jobs)
    alone = [t for t in tasks if any(j.key == 100 for j in t.jobs)]
    assert len(alone) == 1 and len(alone[0]) == 1  # the big pair is a task of its own
    by_bytes = list(cm.plan_batches(table_of(jobs[:100]), task_bytes=64_000, task_pairs=4096))
    assert [len(t) for t in by_bytes] == [8] * 12 + [4]  # 64,000 bytes: 8 pairs of 8,000


def test_columns_rejects_inconsistent_columns() -> None:
    """The kernel entry point says what is wrong with its arguments instead of reading past them."""
    from ingest import _compare_kernel as k

    m = 2
    good = dict(
        xp=b"ab", xe=np.array([0, 1, 2], np.int64), yp=b"ab", ye=np.array([0, 1, 2], np.int64),
        off=np.zeros((m, 2), np.int64), kinds=np.full((m, 2), 2, np.int8), numel=np.ones(m, np.int64),
        zero=np.zeros(m, np.uint8), status=np.empty(m, np.int8), metrics=np.empty((m, len(METRIC_FIELDS))),
    )  # fmt: skip
    k.columns(*good.values())  # files "a" and "b" do not exist here: unreadable, no error
    assert good["status"].tolist() == [cm.STATUSES.index("unreadable_run")] * m
    assert np.isnan(good["metrics"]).all()
    for name, bad, message in (
        ("xe", np.array([0, 1, 5], np.int64), "path ends"),
        ("kinds", np.array([[2, 3], [2, 2]], np.int8), "kinds"),
        ("numel", np.array([1, 0], np.int64), "counts"),
        ("metrics", np.empty((m, 3)), "metrics must be"),
        ("status", np.empty(m + 1, np.int8), "status must be"),
    ):
        with pytest.raises(ValueError, match=message):
            k.columns(*{**good, name: bad}.values())
    assert math.isnan(good["metrics"][0, 0])


def test_files_opened_through_directories_give_the_pair_by_pair_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """columns() opens a file relative to its directory, kept open for the rest of the call (a few at a
    time): pairs spread over more directories than it keeps, in an order that goes back to evicted
    ones, symlinks (to a file, to a directory, dangling), a file replaced by a directory, paths with
    '//', '.' and '..', a relative path, a path ending in '/', files shorter and longer than the catalog
    says — the same answers as compare_jobs pair by pair (which opens the whole path), in one thread
    and in several."""
    rng = np.random.default_rng(7)
    jobs: list[PairJob] = []

    def add(run, baseline):
        jobs.append(PairJob(len(jobs), run, baseline))

    dirs = [tmp_path / f"d{i:02d}" / "nested" for i in range(20)]
    for d in dirs:
        d.mkdir(parents=True)
    sides = []
    for i in range(60):  # directory of pair i: 0, 7, 14, ... (mod 20): back to evicted ones
        d = dirs[(7 * i) % len(dirs)]
        y = rng.standard_normal(300).astype(np.float32)
        sides.append((write(d, f"r{i}", y + np.float32(1e-3)), write(d, f"b{i}", y)))
    for run, baseline in sides:
        add(run, baseline)
    run0, base0 = sides[0]
    r0 = Path(run0[0])

    def at(path: Path | str, side: tuple = run0) -> tuple:
        return (str(path), *side[1:])

    (tmp_path / "link_file.npy").symlink_to(r0)
    (tmp_path / "link_dir").symlink_to(r0.parent, target_is_directory=True)
    (tmp_path / "dangling.npy").symlink_to(tmp_path / "nowhere.npy")
    (tmp_path / "a_dir.npy").mkdir()  # a file replaced by a directory
    short, long_ = tmp_path / "short.npy", tmp_path / "long.npy"
    short.write_bytes(r0.read_bytes()[:-1])
    long_.write_bytes(r0.read_bytes() + b"\0" * 4096)
    monkeypatch.chdir(r0.parent)
    for odd in (
        tmp_path / "link_file.npy",
        tmp_path / "link_dir" / r0.name,
        tmp_path / "dangling.npy",
        tmp_path / "a_dir.npy",
        short,
        long_,
        f"{r0.parent}//{r0.name}",
        f"{r0.parent}/./{r0.name}",
        f"{r0.parent}/../nested/{r0.name}",
        f"{r0.parent}/../missing/{r0.name}",
        r0.name,  # relative: to the working directory
        f"{r0}/",
        f"{tmp_path}/",
    ):
        add(at(odd), base0)
        add(base0, at(odd))
    table = table_of(jobs)
    assert cm.use_c_kernel(True)
    want = one_by_one(jobs)
    statuses = [w[0] for w in want]
    assert statuses.count("ok") == 60 + 2 * 7  # link_file, link_dir, long, //, /./, /../nested, relative
    assert statuses.count("unreadable_run") == statuses.count("unreadable_baseline") == 6
    tasks = list(cm.plan_batches(table, task_bytes=1 << 30))
    assert len(tasks) == 1 and len(tasks[0].key) == len(jobs)  # every pair through columns(), one call
    assert batched(table, task_bytes=1 << 30) == want
    assert batched(table, workers=3, task_bytes=16_000) == want  # several threads, several calls


def test_threads_stop_when_the_caller_stops_early(tmp_path: Path) -> None:
    """compare_table with workers > 1 computes tasks ahead in threads; a caller that stops after the
    first result (a failed commit, Ctrl-C) gets its generator closed without waiting for the rest, and
    the next call starts afresh with the same answers."""
    small = write(tmp_path, "small", np.arange(500, dtype=np.float32))
    other = write(tmp_path, "other", np.arange(500, dtype=np.float32) + 1)
    jobs = [PairJob(i, small, other) for i in range(400)]
    table = table_of(jobs)
    results = compare_table(table, 2, task_pairs=4)
    first = next(results)
    assert first.key.tolist() == [0, 1, 2, 3]
    results.close()
    assert batched(table, workers=2, task_pairs=4) == one_by_one(jobs)


def test_planning_in_slices_keeps_keys_and_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """plan_batches plans a small first slice of rows, then bigger ones (so that the first task starts
    before the whole table is planned): with slices of a few rows, every kind of pair (the kernel's,
    compare_jobs', absent sides) keeps its row's key and its answer."""
    jobs = real_jobs(tmp_path)
    table = table_of(jobs)
    assert cm.use_c_kernel(True)
    want = one_by_one(jobs)
    whole = [(t.key.tolist(), [j.key for j in t.jobs]) for t in cm.plan_batches(table, task_pairs=64)]
    monkeypatch.setattr(cm, "_PLAN_FIRST_ROWS", 7)
    monkeypatch.setattr(cm, "_PLAN_ROWS", 20)
    tasks = list(cm.plan_batches(table, task_pairs=64))
    assert len(tasks) > len(jobs) // 20  # no task crosses a slice
    keys = sorted(k for t in tasks for k in [*t.key.tolist(), *(j.key for j in t.jobs)])
    keys += [k for t in tasks if t.fixed is not None for k in t.fixed[0].tolist()]
    assert sorted(keys) == list(range(len(jobs)))
    assert sorted(k for ks, js in whole for k in ks + js) == sorted(
        k for t in tasks for k in [*t.key.tolist(), *(j.key for j in t.jobs)]
    )
    assert batched(table, task_pairs=64) == want
    assert batched(table, workers=2, task_pairs=64) == want
