"""Tensor file names of every generation parse to the right fields (reference §3)."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.formats.mindspore.npy_name import (
    DTYPE_TOKENS,
    TensorNameError,
    op_type_of,
    parse_tensor_name,
    sanitize_v23,
    short_name,
)


def test_v24_cpu_capitalised_dtype():
    n = parse_tensor_name(
        "Conv2D.Default_network-WithLossCell__backbone-Net_conv1-Conv2d_Conv2D-op0.0.0.1795302018868475"
        ".input.1.DefaultFormat.Float32.npy"
    )
    assert n.op_type == "Conv2D"
    assert n.op_name == "Default_network-WithLossCell__backbone-Net_conv1-Conv2d_Conv2D-op0"
    assert (n.task_id, n.stream_id, n.timestamp_us) == (0, 0, 1795302018868475)
    assert (n.io, n.slot, n.format, n.dtype, n.era) == ("input", 1, "DefaultFormat", "float32", "v2.4+")


def test_v24_lowercase_dtype_and_device_format():
    n = parse_tensor_name(
        "MatMul.Default_network-WithLossCell__backbone-Net_fc-Dense_MatMul-op12.3.2.1719312345678901"
        ".output.0.FRACTAL_NZ.bfloat16.npy"
    )
    assert (n.task_id, n.stream_id, n.format, n.dtype) == (3, 2, "FRACTAL_NZ", "bfloat16")


def test_v23_without_dtype_token():
    n = parse_tensor_name(
        "Add.Default_network-WithLossCell__backbone-Net_Add-op0.0.0.1719312345678901.output.0.DefaultFormat.npy"
    )
    assert n.dtype is None and n.era == "v2.3" and n.format == "DefaultFormat"


def test_v13_short_name_docs_example():
    n = parse_tensor_name("Conv2d.Conv2D-op107.2.2.1623124369613540.output.0.DefaultFormat.npy")
    assert (n.op_type, n.op_name, n.task_id, n.stream_id) == ("Conv2d", "Conv2D-op107", 2, 2)
    assert n.era == "v1.3-2.2" and n.dtype is None


def test_v13_parameter_with_dots():
    n = parse_tensor_name("Parameter.conv1.weight.0.0.1623124369613540.output.0.DefaultFormat.npy")
    assert n.op_type == "Parameter" and n.op_name == "conv1.weight"


def test_parameter_with_dots_and_dtype():
    n = parse_tensor_name("Parameter.moments.fc.bias.0.0.17.output.0.DefaultFormat.float16.npy")
    assert n.op_name == "moments.fc.bias" and n.dtype == "float16"


def test_constants():
    n = parse_tensor_name("Parameter.data-3.0.0.1719312345678901.output.0.DefaultFormat.Int64.npy")
    assert n.op_name == "data-3" and n.dtype == "int64"
    old = parse_tensor_name("Parameter.cst12.0.0.1623124369613540.output.0.DefaultFormat.npy")
    assert old.op_name == "cst12"


def test_op_name_that_looks_like_a_dtype_is_not_eaten():
    # 8 fields + npy: the last one is the format even if it spells a dtype-like word.
    n = parse_tensor_name("Cast.Cast-op1.0.0.5.output.0.DefaultFormat.npy")
    assert n.format == "DefaultFormat" and n.dtype is None


@pytest.mark.parametrize(
    "name, reason",
    [
        ("statistic.csv", "not a .npy"),
        ("foo.npy", "at least 8"),
        ("Add.Add-op1.0.0.123.sideways.0.DefaultFormat.npy", "'input' or 'output'"),
        ("Add.Add-op1.0.0.12x3.output.0.DefaultFormat.npy", "timestamp"),
        ("Add.Add-op1.0.0.123.output.a.DefaultFormat.npy", "slot"),
        (".Add-op1.0.0.123.output.0.DefaultFormat.npy", "empty op type"),
        ("Add.Add-op1.0.0.5.output.\u00b2.DefaultFormat.npy", "slot"),  # a digit int() refuses
        ("Add.Add-op1.0.0.99999999999999999999999.output.0.DefaultFormat.npy", "timestamp .* out of range"),
        ("Add.Add-op1.0.0.5.output.2147483648.DefaultFormat.npy", "slot .* out of range"),  # > INT32
        ("Add.Add-op1." + "9" * 5000 + ".0.5.output.0.DefaultFormat.npy", "task id .* out of range"),
    ],
)
def test_bad_names_raise_with_reason(name, reason):
    with pytest.raises(TensorNameError, match=reason):
        parse_tensor_name(name)


def test_sanitise_and_short_name():
    full = "Default/network-WithLossCell/_backbone-AlexNet/conv3-Conv2d/Conv2D-op12"
    assert sanitize_v23(full) == "Default_network-WithLossCell__backbone-AlexNet_conv3-Conv2d_Conv2D-op12"
    assert sanitize_v23("a.b c\\d") == "a_b_c_d"
    assert short_name(full) == "Conv2D-op12"
    assert op_type_of(full) == "Conv2D"


# -- property-based: any name MindSpore could write parses back to what was written ---------

_op_type = st.from_regex(r"[A-Z][A-Za-z0-9]{0,20}", fullmatch=True)
_op_name = st.from_regex(r"[A-Za-z0-9_\-]{1,40}(\.[A-Za-z0-9_\-]{1,10}){0,3}", fullmatch=True)
_fmt = st.sampled_from(["DefaultFormat", "NCHW", "NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ", "ND"])
_dtype = st.one_of(
    st.none(), st.sampled_from(sorted(DTYPE_TOKENS)).map(lambda d: d if len(d) % 2 else d.title())
)


@given(
    op_type=_op_type,
    op_name=_op_name,
    task=st.integers(0, 2**32),
    stream=st.integers(0, 2**16),
    ts=st.integers(0, 2**62),
    io=st.sampled_from(["input", "output"]),
    slot=st.integers(0, 512),
    fmt=_fmt,
    dtype=_dtype,
)
def test_roundtrip_property(op_type, op_name, task, stream, ts, io, slot, fmt, dtype):
    name = f"{op_type}.{op_name}.{task}.{stream}.{ts}.{io}.{slot}.{fmt}"
    if dtype:
        name += f".{dtype}"
    n = parse_tensor_name(name + ".npy")
    assert (n.op_type, n.op_name, n.task_id, n.stream_id, n.timestamp_us) == (
        op_type,
        op_name,
        task,
        stream,
        ts,
    )
    assert (n.io, n.slot, n.format) == (io, slot, fmt)
    assert n.dtype == (dtype.lower() if dtype else None)


@given(st.text(max_size=120))
def test_fuzz_never_crashes(text):
    with contextlib.suppress(TensorNameError):
        parse_tensor_name(text)


def test_row_id_hasher_equals_reference_function():
    from ingest.ids import TensorIdHasher, tensor_row_id

    hasher = TensorIdHasher("run-é")
    for rel in ["rank_0/Net/0/0/a.npy", "x", "rank_1/Net/3/constants/Parameter.data-1.0.0.1.output.0.D.npy"]:
        assert hasher(rel) == tensor_row_id("run-é", rel) > 0
