"""The one-pass C kernel of ingest.compare_metrics (ingest/_compare_kernel.c) against its numpy path.

The two sum in different orders (numpy: pairwise and BLAS dot products per step; C: 4 lanes per chunk of
256 elements), so the sums agree to a few ulps, not bit for bit; everything that does not depend on an
order is identical: status, numel, max_abs_err, max_rel_err (the float32 arithmetic of msprobe's
relative error), the error ratios, and which metrics are NULL. The portable and AVX2 builds of the
kernel give identical bits.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from ingest import compare_metrics as cm
from ingest.compare_metrics import METRIC_FIELDS, PairJob, compare_arrays, compare_jobs
from tests.conftest import REPO

EXACT = ("max_abs_err", "max_rel_err", "err_ratio_1e3", "err_ratio_5e3")
SUMS = ("cosine", "mean_abs_err", "rmse", "rel_euclidean", "acc_rel_err")
DTYPES = {"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float64": np.float64}
PAIRS = [
    ("float32", "float32"),
    ("float16", "float16"),
    ("bfloat16", "bfloat16"),
    ("float64", "float64"),
    ("float16", "float32"),
    ("float32", "bfloat16"),
    ("bfloat16", "float16"),
]
SIZES = [(), (1,), (3,), (7,), (256,), (257,), (1000, 3), (70_001,)]


@pytest.fixture(autouse=True)
def _restore_backend():
    before = cm._kernel
    yield
    cm._kernel = before


def both(x: np.ndarray, y: np.ndarray, **kw):
    """(C kernel, numpy path) metrics of one pair."""
    assert cm.use_c_kernel(True)
    c = compare_arrays(x, y, **kw)
    cm.use_c_kernel(False)
    n = compare_arrays(x, y, **kw)
    cm.use_c_kernel(True)
    return c, n


def assert_agree(c, n) -> None:
    assert (c.status, c.numel) == (n.status, n.numel)
    for f in METRIC_FIELDS:
        g, w = getattr(c, f), getattr(n, f)
        assert (g is None) == (w is None), (f, g, w)
        if g is None:
            continue
        if f in EXACT:
            assert g == w, (f, g, w)
        elif f == "kl_div":
            assert abs(g - w) <= 1e-13 + 1e-9 * abs(w), (f, g, w)
        else:
            assert g == pytest.approx(w, rel=1e-12, abs=1e-300), (f, g, w)


def values(
    rng: np.random.Generator, shape: tuple, run: str, baseline: str, profile: str
) -> tuple[np.ndarray, np.ndarray]:
    """A run and its baseline near it; profiles add zeros, denormals, NaN/inf at matching or other places."""
    size = math.prod(shape)
    y = rng.standard_normal(size) * 10.0 ** rng.integers(-3, 4)
    x = y + rng.standard_normal(size) * 1e-3 * np.abs(y)
    if size > 4:
        y[:: max(1, size // 7)] = 0.0
        x[1 :: max(2, size // 5)] = 0.0
    if profile == "denormal":
        tiny = {"float32": 1e-42, "float16": 3e-8, "bfloat16": 1e-40, "float64": 1e-310}[baseline]
        y[::3] = tiny * rng.integers(-5, 6, y[::3].size)
        x[::2] = tiny * rng.integers(-5, 6, x[::2].size)
    if profile in ("nan_same", "inf_same", "nan_other", "inf_other") and size:
        k = rng.choice(size, max(1, size // 50), replace=False)
        special = np.nan if profile.startswith("nan") else np.inf
        x[k] = special
        y[k] = -special if profile == "inf_same" else special
        if profile.endswith("other"):
            y[(k + 1) % size] = special
            if size == 1:
                y[k] = 1.0
    return x.reshape(shape).astype(DTYPES[run]), y.reshape(shape).astype(DTYPES[baseline])


@pytest.mark.parametrize("run,baseline", PAIRS)
@pytest.mark.parametrize("profile", ["finite", "denormal", "nan_same", "inf_same", "nan_other", "inf_other"])
def test_c_agrees_with_numpy(run: str, baseline: str, profile: str) -> None:
    rng = np.random.default_rng(abs(hash((run, baseline, profile))) % 2**32)
    for shape in SIZES:
        x, y = values(rng, shape, run, baseline, profile)
        for block in (7, 1000, 1 << 20):
            assert_agree(*both(x, y, block=block))


def test_c_agrees_on_layouts_and_kl_range() -> None:
    """Non-contiguous views (nditer chunks), a tensor spanning many steps, and KL over sides whose
    normalised values span eps32..1 (the whole range of the kernel's own logarithm)."""
    rng = np.random.default_rng(3)
    y = rng.standard_normal((300, 517)).astype(np.float32)
    x = (y + rng.standard_normal(y.shape).astype(np.float32) * 0.3).astype(np.float32)
    for xs, ys in ((x.T, y.T), (x[::-1, ::2], y[::-1, ::2]), (x.astype(ml_dtypes.bfloat16).T, y.T)):
        for block in (64, 1 << 20):
            assert_agree(*both(xs, ys, block=block))
    big = rng.exponential(size=200_003) ** 3
    assert_agree(*both(big, big[::-1].copy(), block=1 << 16))
    assert_agree(*both(big.astype(np.float32), rng.random(200_003).astype(np.float32)))


def test_constant_zero_and_one_element_pairs() -> None:
    for dtype in DTYPES.values():
        for a, b in (
            (np.zeros(9), np.zeros(9)),
            (np.full(9, 3.0), np.full(9, 3.0)),
            (np.full(9, 3.0), np.arange(9.0)),
            (np.array(2.5), np.array(2.0)),
            (np.array([[2.0]]), np.array([[2.001]])),
            (np.array([0.0]), np.array([0.0])),
        ):
            assert_agree(*both(a.astype(dtype), b.astype(dtype)))


def test_float32_relative_error_is_computed_in_float32() -> None:
    """max_rel_err and the ratios are msprobe's float32 numbers exactly (eps added where y == 0)."""
    y = np.array([0.0, 0.0, 1.0, 2.0, 0.0, 3.0, -0.0], np.float32)
    x = np.array([0.0, 1e-3, 1.0, 2.002, 1e-7, 3.0029998, 5e-8], np.float32)
    c, n = both(x, y)
    assert_agree(c, n)
    eps = np.float32(np.finfo(np.float32).eps)
    re = np.abs(((x + eps * (y == 0)) - (y + eps * (y == 0))) / (y + eps * (y == 0)))
    assert c.max_rel_err == float(re.max())
    assert c.err_ratio_1e3 == np.count_nonzero(re < np.float32(0.001)) / 7


def write(tmp_path: Path, name: str, a: np.ndarray) -> tuple:
    """A side located like a catalog row: npy for numpy dtypes, raw little-endian bytes for bfloat16."""
    stored = a.dtype.name
    if stored == "bfloat16":
        p = tmp_path / f"{name}.bin"
        p.write_bytes(b"\0" * 5 + a.tobytes())
        return (str(p), 5, stored, a.shape, None, None)
    p = tmp_path / f"{name}.npy"
    np.save(p, a)
    return (str(p), int(np.load(p, mmap_mode="r").offset), stored, a.shape, None, None)


def test_compare_jobs_reads_small_pairs_in_the_kernel(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """compare_jobs' batch kernel call (files()) against read_tensor + the numpy path, job by job,
    including unreadable sides, short files, and pairs it must leave to the general path."""
    rng = np.random.default_rng(5)
    jobs = []
    for i, ((run, baseline), profile) in enumerate(
        [(p, prof) for p in PAIRS for prof in ("finite", "nan_same", "inf_other", "denormal")]
    ):
        x, y = values(rng, SIZES[i % len(SIZES)], run, baseline, profile)
        jobs.append(PairJob(i, write(tmp_path, f"r{i}", x), write(tmp_path, f"b{i}", y)))
    ok = jobs[0]
    short = tmp_path / "short.npy"
    short.write_bytes(Path(ok.run[0]).read_bytes()[:-3])
    gone = (str(tmp_path / "gone.npy"), *ok.run[1:])
    k = len(jobs)
    jobs += [
        PairJob(k, gone, ok.baseline),
        PairJob(k + 1, ok.run, gone),
        PairJob(k + 2, gone, gone),
        PairJob(k + 3, (str(short), *ok.run[1:]), ok.baseline),
        PairJob(k + 4, ok.run, None),
        PairJob(k + 5, ok.run, write(tmp_path, "i32", np.zeros(ok.run[3], np.int32))),
        PairJob(k + 6, write(tmp_path, "f64", np.zeros(7)), write(tmp_path, "f32", np.zeros(7, np.float32))),
        PairJob(k + 7, ("bad\0path", *ok.run[1:]), ok.baseline),
    ]
    calls = []
    real = cm._kernel_files
    monkeypatch.setattr(cm, "_kernel_files", lambda by, out: (calls.append(len(by)), real(by, out)))
    assert cm.use_c_kernel(True)
    got = compare_jobs(jobs)
    assert calls == [k + 5]  # every float pair of one pread-sized batch, in one kernel call
    cm.use_c_kernel(False)
    want = compare_jobs(jobs)
    assert [key for key, _ in got] == [key for key, _ in want] == list(range(len(jobs)))
    for (_, c), (_, n) in zip(got, want, strict=True):
        assert_agree(c, n)
    statuses = [m.status for _, m in got[k:]]
    assert statuses == [
        "unreadable_run", "unreadable_baseline", "unreadable_run", "unreadable_run", "only_in_run",
        "dtype_mismatch", "dtype_mismatch", "unreadable_run",
    ]  # fmt: skip


# -- the module: built, portable = AVX2, fallback without it -------------------------------------------


def test_the_c_kernel_is_built_and_used_here() -> None:
    """CI builds the extension (pip install -e '.[test]' with gcc): its absence is a failure."""
    from ingest import _compare_kernel

    assert cm._c_kernel is _compare_kernel and _compare_kernel.STATE == cm._STATE
    if os.environ.get("DUMPCAT_PURE_NUMPY_COMPARE", "").strip() in ("", "0"):
        assert cm.compare_backend() == "C kernel"
    env = {k: v for k, v in os.environ.items() if k != "DUMPCAT_PURE_NUMPY_COMPARE"}
    code = "from ingest import compare_metrics as cm; print(cm.compare_backend())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert out.stdout.strip() == "C kernel", out.stderr


STATES_CODE = """
import json, sys
import numpy as np
from ingest import compare_metrics as cm
from ingest import _compare_kernel as k
rng = np.random.default_rng(8)
out = []
for kx, ky in [(2, 2), (0, 0), (1, 1), (3, 3), (0, 2), (2, 1), (1, 0)]:
    for n in (1, 3, 255, 1029, 20_011):
        dt = {0: np.float16, 2: np.float32, 3: np.float64}
        def side(kind):
            v = rng.standard_normal(n) * 100
            v[::11] = 0
            if kind == 1:
                return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
            return v.astype(dt[kind])
        x, y = side(kx), side(ky)
        x[5::97] = y[5::97]
        st = np.frombuffer(k.new_state(), np.float64)
        k.pair(x.view(np.uint8), kx, y.view(np.uint8), ky, st)
        out.append(st.tobytes().hex())
print(json.dumps([k.ISA, out]))
"""


def test_portable_and_avx2_kernels_give_the_same_bits() -> None:
    env = {k: v for k, v in os.environ.items() if k != "DUMPCAT_COMPARE_PORTABLE"}
    runs = []
    for portable in ("1", "0"):
        env["DUMPCAT_COMPARE_PORTABLE"] = portable
        out = subprocess.run(
            [sys.executable, "-c", STATES_CODE], capture_output=True, text=True, cwd=REPO, env=env
        )
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout))
    (isa_p, states_p), (isa_a, states_a) = runs
    assert isa_p == "portable"
    if isa_a == "portable":
        pytest.skip("this CPU has no AVX2: only the portable kernels exist here")
    assert states_p == states_a


def test_env_var_and_missing_module_fall_back_to_numpy(tmp_path: Path) -> None:
    """Without the compiled module (an install without a C compiler) or with DUMPCAT_PURE_NUMPY_COMPARE,
    compare_jobs works, quietly, on numpy; the numbers agree with the kernel's."""
    rng = np.random.default_rng(2)
    x, y = values(rng, (999,), "float32", "float32", "nan_same")
    job = PairJob(0, write(tmp_path, "x", x), write(tmp_path, "y", y))
    assert cm.use_c_kernel(True)
    [(_, want)] = compare_jobs([job])
    code = (
        "import json, sys\n"
        "if sys.argv[1] == 'nomod': sys.modules['ingest._compare_kernel'] = None\n"  # `import` now fails
        "from ingest import compare_metrics as cm\n"
        f"[(_, m)] = cm.compare_jobs([cm.PairJob(0, {job.run!r}, {job.baseline!r})])\n"
        "print(cm.compare_backend())\n"
        "print(json.dumps([m.status] + [getattr(m, f) for f in cm.METRIC_FIELDS]))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DUMPCAT_PURE_NUMPY_COMPARE"}
    for how, note in (
        ("nomod", "numpy (the C kernel ingest._compare_kernel is not built)"),
        ("env", "numpy (DUMPCAT_PURE_NUMPY_COMPARE is set)"),
    ):
        e = {**env, "DUMPCAT_PURE_NUMPY_COMPARE": "1"} if how == "env" else env
        out = subprocess.run(
            [sys.executable, "-W", "error", "-c", code, how], capture_output=True, text=True, cwd=REPO, env=e
        )
        assert out.returncode == 0 and out.stderr == "", out.stderr
        got_note, got = out.stdout.splitlines()
        assert got_note == note
        status, *vals = json.loads(got)
        got_m = cm.PairMetrics(status, 999, **dict(zip(METRIC_FIELDS, vals, strict=True)))
        assert_agree(want, got_m)


def test_kernel_rejects_bad_arguments() -> None:
    k = cm._c_kernel
    st = np.frombuffer(k.new_state(), np.float64)
    f = np.zeros(4, np.float32).view(np.uint8)
    with pytest.raises(ValueError):
        k.block(f, 2, f, 3, st)  # float32 with float64: a dtype mismatch, no kernel
    with pytest.raises(ValueError):
        k.block(f, 9, f, 2, st)
    with pytest.raises(ValueError):
        k.block(f[:15], 2, f[:15], 2, st)  # not whole elements
    with pytest.raises(ValueError):
        k.block(f, 2, f[:8], 2, st)  # different lengths
    with pytest.raises(ValueError):
        k.block(f, 2, f, 2, np.zeros(8))
    with pytest.raises((BufferError, ValueError)):
        k.block(f, 2, f, 2, bytes(cm._STATE * 8))  # read-only state
    with pytest.raises(TypeError):
        k.files([("a", 0, 2, b"b", 0, 2, 1)], np.zeros(cm._STATE))  # str path
    with pytest.raises(ValueError):
        k.files([(b"a", 0, 2, b"b", 0, 2, 1)], np.zeros(cm._STATE + 1))
    k.files([], np.zeros(0))
