"""The npy headers read in C (ingest/formats/_npy_scan.c, `scan_npy_headers`) against the Python reader
it follows (`read_npy_header` + `stored_as`): on every committed npy, on numpy-written files of many
dtypes, shapes and versions, and on hostile files. The C reader may leave a file to the Python
(DEFER), but it never accepts one the Python rejects nor rejects one it accepts, and the values of
the files it accepts are the Python's."""

from __future__ import annotations

import io
import json
import os
import re
import stat
import subprocess
import sys
import threading
from collections import defaultdict
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest.formats import npy_header
from ingest.formats.mindspore.npy_name import TensorNameError, parse_tensor_name, parse_tensor_names
from ingest.formats.npy_header import (
    SCAN_DEFER,
    SCAN_IRREGULAR,
    SCAN_OK,
    STORED_NAMES,
    NpyHeaderError,
    read_npy_header,
    scan_npy_headers,
    stored_as,
)
from ingest.readers import leaf_scan
from tests.conftest import DATA, REPO

IRREGULAR = "irregular"
DEFER = "defer"


def python_view(dir_path: str, name: str) -> object:
    """What the Python reader says of one file: IRREGULAR, or (stored, shape, offset, nbytes, size)."""
    try:
        header, size = read_npy_header(dir_path + os.sep + name)
    except (NpyHeaderError, OSError):
        return IRREGULAR
    stored, nbytes = stored_as(header, size)
    return stored, header.shape, header.data_offset, nbytes, size


def c_view(dir_path: str, names: list[str]) -> list[object]:
    """What the C reader says of each file: IRREGULAR, DEFER or the values python_view gives."""
    scan = scan_npy_headers(dir_path, names)
    assert scan is not None, "the C reader is not built"
    stored = memoryview(scan.stored).cast("i")
    offset, nbytes, size = (memoryview(b).cast("q") for b in (scan.data_offset, scan.nbytes, scan.file_size))
    ends, dims = memoryview(scan.shape_offsets).cast("i"), memoryview(scan.dims).cast("q")
    assert len(scan.status) == len(names) and len(ends) == len(stored) + 1 and ends[-1] == len(dims)
    out: list[object] = []
    k = 0
    for status in scan.status:
        if status == SCAN_OK:
            shape = tuple(dims[ends[k] : ends[k + 1]])
            out.append((STORED_NAMES[stored[k]], shape, offset[k], nbytes[k], size[k]))
            k += 1
        else:
            assert status in (SCAN_IRREGULAR, SCAN_DEFER)
            out.append(IRREGULAR if status == SCAN_IRREGULAR else DEFER)
    assert k == len(stored) == len(offset) == len(nbytes) == len(size)
    return out


def assert_agree(dir_path: str | Path, names: list[str], *, deferred: set[str] = frozenset()) -> list:
    """Both readers on `names`: the C one agrees wherever it answers, and defers exactly `deferred`
    (None: any)."""
    dir_path = str(dir_path)
    got = c_view(dir_path, names)
    for name, c in zip(names, got, strict=True):
        want = python_view(dir_path, name)
        if c == DEFER:
            assert deferred is None or name in deferred, (name, want)
        else:
            assert c == want, (name, c, want)
            assert deferred is None or name not in deferred, name
    return got


def test_the_c_reader_is_built_and_used_here() -> None:
    """CI builds the extension (pip install -e '.[test]' with gcc): its absence is a failure."""
    from ingest.formats import _npy_scan

    assert npy_header._npy_scan is _npy_scan
    code = "from ingest.formats import npy_header; print(npy_header._npy_scan is not None)"
    env = {k: v for k, v in os.environ.items() if k != "DUMPCAT_PURE_PYTHON_HEADERS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert out.stdout.strip() == "True", out.stderr
    env["DUMPCAT_PURE_PYTHON_HEADERS"] = "1"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert out.stdout.strip() == "False", out.stderr


def test_every_committed_npy() -> None:
    """Every npy under tests/data (real MindSpore, msprobe and Ascend dumps): the same values, none
    left to the Python."""
    by_dir: dict[Path, list[str]] = defaultdict(list)
    for path in sorted(DATA.rglob("*.npy")):
        by_dir[path.parent].append(path.name)
    assert sum(map(len, by_dir.values())) > 5000
    accepted = 0
    for dir_path, names in by_dir.items():
        got = assert_agree(dir_path, names, deferred=set())
        accepted += sum(g != IRREGULAR for g in got)
    assert accepted > 5000


def _arrays() -> list[tuple[str, np.ndarray]]:
    rng = np.random.default_rng(3)
    out = []
    dtypes = [
        "?",
        "i1",
        "u1",
        "<i2",
        ">i2",
        "<u2",
        ">u4",
        "<i4",
        "<i8",
        ">i8",
        "<u8",
        "<f2",
        ">f2",
        "<f4",
        ">f4",
    ]
    dtypes += ["<f8", ">f8", "<c8", ">c8", "<c16"]
    shapes = [(), (0,), (1,), (7,), (3, 4), (2, 0, 5), (2, 3, 4, 5), (1,) * 12, (4097,)]
    for dtype in dtypes:
        for shape in shapes:
            a = (rng.random(shape) * 100).astype(dtype)
            out.append((f"{dtype}_{'x'.join(map(str, shape))}", a))
            if len(shape) > 1:
                out.append((f"{dtype}_{'x'.join(map(str, shape))}_F", np.asfortranarray(a)))
    return out


def test_numpy_written_files_of_many_dtypes_shapes_orders_and_versions(tmp_path: Path) -> None:
    names = []
    for label, a in _arrays():
        for version in ((1, 0), (2, 0), (3, 0)):
            name = f"{label}_v{version[0]}.npy"
            with open(tmp_path / name, "wb") as f:
                np.lib.format.write_array(f, a, version=version)
            names.append(name)
    got = assert_agree(tmp_path, names, deferred=set())
    assert all(g != IRREGULAR for g in got)
    assert {g[0] for g in got} >= {"float32", ">f4", "bool", "int8", "complex128", ">u4", "float16"}


def _write_header(path: Path, header: dict, data: bytes, version=(1, 0)) -> None:
    """An npy file with this header dict, written as numpy writes one (its text, padded to 64)."""
    text = "{" + "".join(f"{k!r}: {header[k]!r}, " for k in sorted(header)) + "}"
    prefix = 10 if version == (1, 0) else 12
    text = text.encode("latin1") + b" " * (-(len(text) + prefix + 1) % 64) + b"\n"
    size = len(text).to_bytes(2 if version == (1, 0) else 4, "little")
    path.write_bytes(b"\x93NUMPY" + bytes(version) + size + text + data)


def test_other_dtypes_are_left_to_the_python(tmp_path: Path) -> None:
    """Structured, datetime, unicode, object (a pickle) and ml_dtypes' bfloat16 as numpy saves them:
    the Python asks numpy, so the C reader defers; MindSpore's '<E2' bfloat16 it reads itself."""
    deferred = {
        "structured.npy": np.zeros(3, dtype=[("a", "<f4"), ("b", "<i8", (2,))]),
        "datetime.npy": np.zeros((2, 2), dtype="<M8[ns]"),
        "unicode.npy": np.array(["ab", "c"]),
        "bytes.npy": np.array([b"ab", b"c"]),
        "object.npy": np.array([{"a": 1}, None], dtype=object),
        "ml_bfloat16.npy": np.ones(4, dtype=ml_dtypes.bfloat16),
        "void.npy": np.zeros(2, dtype="V3"),
    }
    for name, a in deferred.items():
        np.save(tmp_path / name, a, allow_pickle=True)
    _write_header(
        tmp_path / "ms_bf16.npy", {"descr": "<E2", "fortran_order": False, "shape": (4,)}, b"\0" * 8
    )
    names = [*deferred, "ms_bf16.npy"]
    got = assert_agree(tmp_path, names, deferred=set(deferred))
    assert got[-1] == ("bfloat16", (4,), 128, 8, 136)


def test_float16_headers_over_twice_their_bytes_are_float32(tmp_path: Path) -> None:
    """stored_as: MindSpore's float32 data under a float16 header (2x the bytes) is float32; one more
    or one fewer byte, or an empty tensor, is not."""
    names = []
    for descr in ("<f2", "|f2", "=f2", "f2", ">f2", "<i2", "<E2"):
        for shape in ((3,), (0,), (2, 2)):
            n = int(np.prod(shape)) * 2
            for extra in (0, n, n - 1, n + 1, 2 * n):
                name = f"{descr.replace('|', 'p').replace('<', 'l').replace('>', 'b')}_{len(names)}.npy"
                header = {"descr": descr, "fortran_order": False, "shape": shape}
                _write_header(tmp_path / name, header, b"\x01" * (n + max(extra, 0)))
                names.append(name)
    got = assert_agree(tmp_path, names, deferred=set())
    assert ("float32", (3,), 128, 12, 140) in got and ("float16", (3,), 128, 6, 140) not in got
    assert ("float16", (3,), 128, 6, 139) in got and ("float16", (0,), 128, 0, 128) in got


def test_big_and_odd_shapes(tmp_path: Path) -> None:
    """Dims at and past int64, products that overflow, a zero dim that makes an overflowing product
    empty, many dims (a header longer than the first block), leading zeros, 20 digits."""
    big = 2**63 - 1
    cases = {
        "max_dim": [(big,), 0],
        "zero_times_max": [(0, big, big), 0],
        "overflow": [(2**40, 2**40), 0],
        "just_fits": [(2**31, 2**31), 0],
        "many_dims": [(1,) * 3000, 4],
        "many_dims_v2": [(2,) * 20000, 0],
    }
    names = []
    for name, (shape, nbytes) in cases.items():
        _write_header(tmp_path / f"{name}.npy", {"descr": "<f4", "fortran_order": True, "shape": shape},
                      b"\0" * nbytes, version=(2, 0))  # fmt: skip
        names.append(f"{name}.npy")

    def v1(text: bytes) -> bytes:
        text = text + b" " * (-(len(text) + 11) % 64) + b"\n"
        return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text

    raw = {
        "dim_2_63.npy": b"(9223372036854775808,)",
        "dim_20_digits.npy": b"(00000000000000000001,)",
        "dim_19_digits.npy": b"(0000000000000000001,)",
        "leading_zeros.npy": b"(0003, 02)",
        "negative.npy": b"(-1,)",
        "no_space.npy": b"(2,3)",
        "trailing_comma.npy": b"(2,3,)",
        "two_spaces.npy": b"(2,  3)",
        "empty_dim.npy": b"(2,,3)",
        "bool_dim.npy": b"(True,)",
        "float_dim.npy": b"(2.0,)",
        "list_shape.npy": b"[2, 3]",
        "unit.npy": b"()",
    }
    for name, shape in raw.items():
        text = b"{'descr': '<u1', 'fortran_order': False, 'shape': " + shape + b", }"
        (tmp_path / name).write_bytes(v1(text) + b"\0" * 6)
    names += raw
    # the fast pattern's forms only: the rest (a negative dim, a list) the Python parses with ast
    slow = {
        "negative.npy",
        "two_spaces.npy",
        "empty_dim.npy",
        "bool_dim.npy",
        "float_dim.npy",
        "list_shape.npy",
    }
    got = dict(zip(names, assert_agree(tmp_path, names, deferred=slow), strict=True))
    assert got["zero_times_max.npy"][1:4] == ((0, big, big), 128, 0)
    assert got["overflow.npy"] == IRREGULAR and got["max_dim.npy"] == IRREGULAR
    assert got["dim_2_63.npy"] == IRREGULAR and got["dim_20_digits.npy"] == IRREGULAR
    assert got["dim_19_digits.npy"][1] == (1,) and got["leading_zeros.npy"][1] == (3, 2)
    assert got["many_dims.npy"][1] == (1,) * 3000 and got["unit.npy"][1] == ()


def _headers(tmp_path: Path) -> dict[str, bytes]:
    """Real headers (and a little data) of each npy version, as numpy writes them."""
    out = {}
    for version in ((1, 0), (2, 0), (3, 0)):
        f = io.BytesIO()
        np.lib.format.write_array(f, np.arange(6, dtype="<f4").reshape(2, 3), version=version)
        out[f"v{version[0]}"] = f.getvalue()
    out["v3_utf8"] = out["v3"].replace(b"'<f4', ", b"'<f4',\xc2\xa0")  # a no-break space: v3 text is UTF-8
    return out


_PLAIN = b"{'descr': '<f4', 'fortran_order': False, 'shape': (), }"


def _raw1(text: bytes) -> bytes:
    """An npy v1.0 preamble for exactly this header text (no padding) and 4 data bytes."""
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text + b"\0" * 4


def test_truncated_at_every_byte_and_other_hostile_files(tmp_path: Path) -> None:
    names = []
    for label, content in _headers(tmp_path).items():
        for cut in range(len(content) + 1):
            name = f"{label}_cut{cut}.npy"
            (tmp_path / name).write_bytes(content[:cut])
            names.append(name)
    hostile = {
        "bad_magic.npy": b"\x93NUMPZ\x01\x00\x10\x00" + b" " * 16,
        "version9.npy": b"\x93NUMPY\x09\x00\x10\x00" + b" " * 16,
        "version0.npy": b"\x93NUMPY\x00\x00\x10\x00" + b" " * 16,
        "huge_v2.npy": b"\x93NUMPY\x02\x00\xf0\xff\xff\xff{",
        "just_past_max.npy": b"\x93NUMPY\x02\x00" + (2**20 + 12 - 500).to_bytes(4, "little") + b" " * 500,
        "just_at_max.npy": b"\x93NUMPY\x02\x00" + (2**20 + 12 - 512).to_bytes(4, "little") + b" " * 500,
        "bad_dict.npy": b"\x93NUMPY\x01\x00\x10\x00{'descr': oops}",
        "not_dict.npy": b"\x93NUMPY\x01\x00\x04\x00[1]\n",
        "missing_key.npy": b"\x93NUMPY\x01\x00\x20\x00{'descr': '<f4', 'shape': ()}  \n",
        "latin1_v1.npy": _raw1(_PLAIN + b"\xa0\xa0"),
        "bad_utf8_v3.npy": b"\x93NUMPY\x03\x00\x10\x00\x00\x00{'descr': '\xff'}   ",
        "vertical_tab.npy": _raw1(_PLAIN + b"\x0b\x1c\n"),
        "plain.npy": _raw1(_PLAIN),
        "form_feed_in.npy": _raw1(_PLAIN.replace(b": False", b":\x0cFalse")),
        "empty.npy": b"",
        "ten.npy": b"\x93NUMPY\x01\x00\x00\x00",
        "eleven.npy": b"\x93NUMPY\x02\x00\x00\x00\x00",
    }
    for name, content in hostile.items():
        (tmp_path / name).write_bytes(content)
    names += hostile
    got = dict(zip(names, assert_agree(tmp_path, names, deferred=None), strict=True))
    assert got["v1_cut" + str(len(_headers(tmp_path)["v1"])) + ".npy"][:2] == ("float32", (2, 3))
    assert got["plain.npy"] == ("float32", (), 65, 4, 69)
    assert got["vertical_tab.npy"] == ("float32", (), 68, 4, 72)
    for name in ("bad_magic.npy", "version9.npy", "huge_v2.npy", "just_past_max.npy", "empty.npy"):
        assert got[name] == IRREGULAR, name
    # the only files left to the Python: those whose header text is not ASCII or not numpy's form
    deferrable = {"bad_dict.npy", "not_dict.npy", "missing_key.npy", "latin1_v1.npy", "bad_utf8_v3.npy",
                  "form_feed_in.npy", "ten.npy", "just_at_max.npy"}  # fmt: skip
    assert {n for n, g in got.items() if g == DEFER} <= deferrable | {n for n in names if "utf8" in n}


def test_directories_links_fifos_devices_and_permissions(tmp_path: Path) -> None:
    """A FIFO is never waited on (not even with a writer), and every kind of non-file is irregular
    as read_npy_header finds it."""
    np.save(tmp_path / "real.npy", np.arange(3, dtype=np.int16))
    (tmp_path / "dir.npy").mkdir()
    (tmp_path / "link.npy").symlink_to("real.npy")
    (tmp_path / "dir_link.npy").symlink_to("dir.npy")
    (tmp_path / "dangling.npy").symlink_to("nowhere.npy")
    (tmp_path / "loop.npy").symlink_to("loop.npy")
    (tmp_path / "null.npy").symlink_to(os.devnull)
    os.mkfifo(tmp_path / "fifo.npy")
    os.mkfifo(tmp_path / "fifo_written.npy")
    np.save(tmp_path / "locked.npy", np.arange(3, dtype=np.int16))
    (tmp_path / "locked.npy").chmod(0)
    names = ["real.npy", "dir.npy", "link.npy", "dir_link.npy", "dangling.npy", "loop.npy", "null.npy",
             "fifo.npy", "fifo_written.npy", "locked.npy", "absent.npy"]  # fmt: skip
    # a writer holds fifo_written open (non-blocking open of the read end first, so nothing waits)
    reader = os.open(tmp_path / "fifo_written.npy", os.O_RDONLY | os.O_NONBLOCK)
    writer = os.open(tmp_path / "fifo_written.npy", os.O_WRONLY | os.O_NONBLOCK)
    done = threading.Event()
    result: list = []

    def run() -> None:
        result.append(assert_agree(tmp_path, names, deferred=set()))
        done.set()

    try:
        threading.Thread(target=run, daemon=True).start()
        assert done.wait(60), "the C reader waited on a FIFO"
    finally:
        os.close(writer)
        os.close(reader)
        (tmp_path / "locked.npy").chmod(stat.S_IRUSR | stat.S_IWUSR)
    [got] = result
    want_ok = {"real.npy", "link.npy"} | ({"locked.npy"} if os.geteuid() == 0 else set())
    assert {n for n, g in zip(names, got, strict=True) if g != IRREGULAR} == want_ok


def test_names_of_every_kind(tmp_path: Path) -> None:
    """Non-ASCII and undecodable names (surrogate-escaped, as os.listdir gives them) are found as
    os.open finds them; names that are no single directory entry are left to the Python."""
    a = np.arange(4, dtype=np.float32)
    named = ["ä ü.npy", "日本.npy", os.fsdecode(b"\xff\xfe.npy"), "sp ace.npy", "-.npy", "." * 200 + ".npy"]
    for name in named:
        np.save(tmp_path / name, a)
    (tmp_path / "sub").mkdir()
    np.save(tmp_path / "sub" / "x.npy", a)
    got = assert_agree(tmp_path, [*named, "sub/x.npy", "", "x" * 300], deferred={"sub/x.npy", ""})
    assert all(g[1] == (4,) for g in got[: len(named)])
    assert got[-1] == IRREGULAR  # ENAMETOOLONG, an OSError
    scan = scan_npy_headers(str(tmp_path), ["a\0b.npy", "/abs.npy"])
    assert scan.status == bytes([SCAN_DEFER, SCAN_DEFER])
    # a directory that is not there: every file irregular, as os.open says
    assert scan_npy_headers(str(tmp_path / "absent"), ["x.npy"]).status == bytes([SCAN_DEFER])
    assert python_view(str(tmp_path / "absent"), "x.npy") == IRREGULAR


def test_bad_arguments_are_clear_errors() -> None:
    from ingest.formats import _npy_scan

    with pytest.raises(TypeError, match="file names as str"):
        _npy_scan.scan(".", [b"x.npy"])
    with pytest.raises(TypeError):
        _npy_scan.scan(".", 3)
    with pytest.raises(ValueError, match="bad table entry"):
        _npy_scan.table([(b"", 1, False)])


# -- mutated real headers ----------------------------------------------------------------------------

_SEEDS = None


def _seeds() -> list[bytes]:
    """Real headers to mutate: numpy's of several versions and dtypes, MindSpore's (committed)."""
    global _SEEDS
    if _SEEDS is None:
        seeds = []
        for version in ((1, 0), (2, 0), (3, 0)):
            for a in (np.zeros((2, 3), "<f2"), np.zeros((), ">i8"), np.zeros((0, 5), "?")):
                f = io.BytesIO()
                np.lib.format.write_array(f, a, version=version)
                seeds.append(f.getvalue())
        committed = sorted(DATA.rglob("*.npy"))
        seeds += [p.read_bytes()[:300] + b"\0" * 64 for p in committed[:: max(1, len(committed) // 6)]]
        _SEEDS = seeds
    return _SEEDS


_DESCRS = [b"<f4", b"<f2", b"|f2", b">f2", b"f2", b"=f2", b"<E2", b"|b1", b">i8", b"<c16", b"|u1", b"<f3",
           b"<U2", b"<M8[s]", b"E2", b">E2", b"f4 ", b"<f4\n"]  # fmt: skip
_SHAPES = [b"()", b"(3,)", b"(2, 3)", b"(2,3)", b"(0, 9223372036854775807)", b"(9223372036854775807,)",
           b"(99999999999999999999,)", b"(1, 1, 1, 1, 1, 1, 1, 1, 1, 1,)", b"(-1,)", b"(3, )",
           b"(2 ,3)"]  # fmt: skip


@st.composite
def mutated(draw) -> bytes:
    """A real header changed a little: a byte, a token, its length field, its data; near-valid
    files as much as broken ones."""
    content = bytearray(draw(st.sampled_from(_seeds())))
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.integers(0, min(len(content), 140)))
        how = draw(
            st.sampled_from(["set", "insert", "delete", "cut", "length", "descr", "shape", "word", "data"])
        )
        if how == "set" and where < len(content):
            content[where] = draw(
                st.sampled_from([0, 9, 10, 11, 28, 32, 39, 40, 41, 44, 45, 48, 57, 0x80, 0xFF])
            )
        elif how == "insert":
            content[where:where] = draw(st.binary(min_size=1, max_size=4))
        elif how == "delete":
            del content[where : where + draw(st.integers(1, 4))]
        elif how == "cut":
            del content[where:]
        elif how == "length" and len(content) >= 12:
            wide = content[6] in (2, 3)
            field = draw(st.integers(0, 2**32 - 1 if wide else 2**16 - 1))
            if draw(st.booleans()):  # near the real length
                near = int.from_bytes(content[8 : 12 if wide else 10], "little") + draw(st.integers(-3, 3))
                field = min(max(0, near), 2**32 - 1 if wide else 2**16 - 1)  # (a length field's range)
            content[8 : 12 if wide else 10] = field.to_bytes(4 if wide else 2, "little")
        elif how in ("descr", "shape", "word"):
            old = {
                "descr": rb"'descr': '([^']*)'",
                "shape": rb"'shape': (\([^)]*\))",
                "word": rb"(False|True|, \})",
            }[how]
            m = re.search(old, content)
            if m:
                pool = {"descr": _DESCRS, "shape": _SHAPES, "word": [b"True", b"False", b", }", b",}", b"}"]}[
                    how
                ]
                content[m.start(1) : m.end(1)] = draw(st.sampled_from(pool))
        elif how == "data":
            if draw(st.booleans()):
                del content[len(content) - draw(st.integers(0, 8)) :]
            else:
                content += bytes(draw(st.integers(1, 64)))
    return bytes(content)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(files=st.lists(mutated(), min_size=1, max_size=8))
def test_mutated_real_headers_agree(tmp_path: Path, files: list[bytes]) -> None:
    names = []
    for i, content in enumerate(files):
        name = f"m{i}.npy"
        (tmp_path / name).write_bytes(content)
        names.append(name)
    assert_agree(tmp_path, names, deferred=None)


# -- the scan of a leaf with each reader ------------------------------------------------------------


def _leaf(tmp_path: Path) -> tuple[Path, list[str]]:
    leaf = tmp_path / "leaf"
    leaf.mkdir()
    names = []
    for i, (dtype, shape) in enumerate(
        [("float32", (2, 3)), ("float16", (4,)), ("int64", ()), ("bool", (0, 3))]
    ):
        name = f"Add.Default_Add-op{i}.0.0.{10 + i}.output.0.DefaultFormat.{dtype}.npy"
        np.save(leaf / name, np.zeros(shape, dtype=dtype))
        names.append(name)
    return leaf, names


def _both(leaf: Path, names: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple:
    ctx = ("run1", 0, "Net", 0, 0, "iteration")
    chunk = [(ctx, str(leaf), "rank_0/Net/0/0", names, [None] * len(names))]
    with_c = leaf_scan.scan_tensor_columns(chunk)
    with monkeypatch.context() as m:
        m.setattr(npy_header, "_npy_scan", None)
        assert scan_npy_headers(str(leaf), names) is None
        with_python = leaf_scan.scan_tensor_columns(chunk)
    return with_c, with_python


def test_leaf_scan_gives_the_same_columns_with_either_reader(tmp_path: Path, monkeypatch) -> None:
    leaf, names = _leaf(tmp_path)
    with_c, with_python = _both(leaf, names, monkeypatch)
    assert with_c == with_python
    [(_, columns, irregular, _)] = with_c
    assert not irregular and columns[0][1] == 4
    table, _ = leaf_scan.columns_table(with_c[0])
    assert table.column("shape").to_pylist() == [[2, 3], [4], [], [0, 3]]


def test_leaf_scan_with_deferred_and_bad_files_gives_the_same_columns(tmp_path: Path, monkeypatch) -> None:
    """The per-row path of the C scan: a file left to the Python (a datetime), a well-formed file under
    a bad name, truncated and garbled files, a MindSpore float16 header over float32 data."""
    leaf, names = _leaf(tmp_path)
    np.save(leaf / "Add.Default_Add-op9.0.0.1.output.0.DefaultFormat.npy", np.zeros(3, "<M8[s]"))
    np.save(leaf / "not a tensor name.npy", np.zeros(3))
    (leaf / "Add.Default_Add-op8.0.0.1.output.0.DefaultFormat.float32.npy").write_bytes(b"\x93NUMPY")
    (leaf / "Add.Default_Add-op7.0.0.1.output.0.DefaultFormat.float32.npy").write_bytes(b"garbage")
    wide = "Cast.Default_Cast-op6.0.0.1.output.0.DefaultFormat.float16.npy"
    _write_header(leaf / wide, {"descr": "<f2", "fortran_order": False, "shape": (3,)}, b"\0" * 12)
    more = sorted(p.name for p in leaf.iterdir() if p.name not in names)
    with_c, with_python = _both(leaf, [*names, *more], monkeypatch)
    assert with_c == with_python
    table, irregular = leaf_scan.columns_table(with_c[0])
    assert len(irregular) == 3 and table.num_rows == 6
    rows = {r["file_name"]: r for r in table.to_pylist()}
    assert (rows[wide]["stored_dtype"], rows[wide]["nbytes"], rows[wide]["dtype"]) == (
        "float32",
        12,
        "float16",
    )
    # a well-formed file under a bad name alone also takes the per-row path: the same columns
    with_c, with_python = _both(leaf, [*names, "not a tensor name.npy"], monkeypatch)
    assert with_c == with_python


# -- tensor file names parsed in C -------------------------------------------------------------------


def assert_names_agree(keys: list[str]) -> list:
    """The C name parser gives parse_tensor_name's fields wherever it answers (None: it leaves the
    name to parse_tensor_name)."""
    got = parse_tensor_names(keys)
    assert len(got) == len(keys)
    for key, fields in zip(keys, got, strict=True):
        try:
            want = tuple(parse_tensor_name(key))
        except TensorNameError:
            want = None
        if fields is not None:
            assert fields == want, (key, fields, want)
            assert [type(v) for v in fields] == [type(v) for v in want], key
    return got


def test_every_committed_tensor_name_is_parsed_in_c() -> None:
    keys = sorted({p.name for p in DATA.rglob("*.npy")})
    got = assert_names_agree(keys)
    assert sum(g is not None for g in got) >= 0.9 * len(keys) and len(keys) > 1000
    for key, fields in zip(keys, got, strict=True):
        if fields is None and key.isascii():  # only names parse_tensor_name refuses are left to it
            with pytest.raises(TensorNameError):
                parse_tensor_name(key)


_FIELD = st.one_of(
    st.sampled_from(
        ["", "0", "7", "00012", "123456789", "1234567890", "9" * 18, "9" * 19, "x1", "1x", "٣", "²"]
    ),
    st.sampled_from(["input", "output", "Output", "in put", "DefaultFormat", "NCHW", "FRACTAL_NZ", "ü"]),
    st.sampled_from(
        ["float32", "Float32", "FLOAT16", "bfloat16", "BFloat16", "int4", "Int4", "flöat32", "K"]
    ),
    st.sampled_from(
        [
            "Default_Add-op1",
            "Gradients_x",
            "recompute_Default_y",
            "Expand_",
            "Inference_z",
            "Parallel_q",
            "Default",
            "default_x",
            "conv1.weight",
            "Add",
            "a.b.c",
        ]
    ),
    st.text(alphabet=st.sampled_from("aZ09._-/ éİK\x00"), max_size=6),
)


@st.composite
def tensor_names(draw) -> str:
    fields = [draw(_FIELD) for _ in range(draw(st.integers(0, 11)))]
    if draw(st.booleans()):  # the real layout with some fields drawn
        choices = [
            ["0", "12"],
            ["0", "3"],
            ["1795302834568971"],
            ["input", "output"],
            ["0", "2"],
            ["DefaultFormat"],
        ]
        fields = [draw(_FIELD), draw(_FIELD)] + [draw(st.sampled_from([*c, draw(_FIELD)])) for c in choices]
        if draw(st.booleans()):
            fields.append(draw(st.sampled_from(["float32", "Int64", "BOOL", "string", draw(_FIELD)])))
    return ".".join(fields) + draw(st.sampled_from([".npy", ".npy", ".NPY", "npy", ""]))


@settings(max_examples=400, deadline=None)
@given(keys=st.lists(tensor_names(), min_size=1, max_size=20))
def test_generated_tensor_names_agree(keys: list[str]) -> None:
    assert_names_agree(keys)


def test_name_parser_bad_arguments_are_clear_errors() -> None:
    from ingest.formats import _npy_scan

    assert _npy_scan.names([3, b"x", None]) == [None, None, None]  # parse_tensor_name decides
    with pytest.raises(TypeError):
        _npy_scan.names(5)
    with pytest.raises(ValueError, match="bad token"):
        _npy_scan.tokens(["ü"])


def test_without_the_extension_the_python_reads_quietly(tmp_path: Path) -> None:
    """As after an install without a C compiler: no traceback, no warning, the same columns."""
    leaf, names = _leaf(tmp_path)
    chunk = [(("run1", 0, "Net", 0, 0, "iteration"), str(leaf), "rank_0/Net/0/0", names, [None] * len(names))]
    want = leaf_scan.scan_tensor_columns(chunk)
    code = (
        "import sys, json; sys.modules['ingest.formats._npy_scan'] = None\n"  # `import` now fails
        "from ingest.formats import npy_header\n"
        "from ingest.formats.mindspore import npy_name\n"
        "from ingest.readers import leaf_scan\n"
        "assert npy_header._npy_scan is None and npy_name._c_module is None\n"
        "assert npy_header.scan_npy_headers('.', ['x']) is None\n"
        "assert npy_name.parse_tensor_names(['x']) == [None]\n"
        "chunk = json.loads(sys.stdin.read())\n"
        "[(ctx, columns, irregular, _)] = leaf_scan.scan_tensor_columns([tuple(c) for c in chunk])\n"
        "hexed = [[c[0], c[1], *(None if b is None else b.hex() for b in c[2:])] for c in columns]\n"
        "print(json.dumps(hexed))\n"
    )
    out = subprocess.run(
        [sys.executable, "-W", "error", "-c", code],
        input=json.dumps(chunk), capture_output=True, text=True, cwd=REPO,
        env={k: v for k, v in os.environ.items() if k != "DUMPCAT_PURE_PYTHON_HEADERS"},
    )  # fmt: skip
    assert out.returncode == 0 and out.stderr == "", out.stderr
    [(_, columns, _, _)] = want
    hexed = [[c[0], c[1], *(None if b is None else b.hex() for b in c[2:])] for c in columns]
    assert json.loads(out.stdout) == hexed and len(hexed) == 20
