"""MindSpore 1.0-1.2 sync `.bin` names (mindspore-dump-formats §3.7) and msaccucmp conversion names
(msprobe-cann §3.3) parse; MindSpore's own npy names never pass for conversions."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.formats.mindspore.legacy_names import (
    LEGACY_DTYPES,
    ConvertedName,
    LegacyBinName,
    parse_converted_name,
    parse_legacy_bin_name,
)
from tests.conftest import DATA

MS210 = DATA / "ms210"


def test_reference_example_verbatim():
    name = (
        "Default--network-WithLossCell--_backbone-AlexNet--conv3-Conv2d--Conv2D-op107"
        "_output_0_shape_32_12_13_13_16_Float16_NC1HWC0.bin"
    )
    assert parse_legacy_bin_name(name) == LegacyBinName(
        kernel_name="Default/network-WithLossCell/_backbone-AlexNet/conv3-Conv2d/Conv2D-op107",
        io="output",
        slot=0,
        shape=(32, 12, 13, 13, 16),
        dtype_token="Float16",
        stored_dtype="float16",
        format="NC1HWC0",
    )


def test_host_dtype_label_and_input():
    n = parse_legacy_bin_name(
        "Default--network-WithLossCell--_backbone-LeNet5--fc1-Dense--MatMul-op12_input_1_shape_120_400"
        "_kNumberTypeFloat32_DefaultFormat.bin"
    )
    assert n is not None
    assert (n.kernel_name, n.io, n.slot) == (
        "Default/network-WithLossCell/_backbone-LeNet5/fc1-Dense/MatMul-op12",
        "input",
        1,
    )
    assert (n.shape, n.dtype_token, n.stored_dtype, n.format) == (
        (120, 400),
        "kNumberTypeFloat32",
        "float32",
        "DefaultFormat",
    )


def test_parameter_keeps_its_dots():
    n = parse_legacy_bin_name("conv1.weight_output_0_shape_6_1_5_5_Float32_DefaultFormat.bin")
    assert n is not None
    assert (n.kernel_name, n.shape, n.stored_dtype) == ("conv1.weight", (6, 1, 5, 5), "float32")


def test_constant():
    n = parse_legacy_bin_name("cst1_output_0_shape_2_kNumberTypeInt32_DefaultFormat.bin")
    assert n is not None
    assert (n.kernel_name, n.io, n.slot, n.shape, n.stored_dtype) == ("cst1", "output", 0, (2,), "int32")


def test_scalar_shape_0_is_the_empty_shape():
    n = parse_legacy_bin_name("global_step_output_0_shape_0_Int32_DefaultFormat.bin")
    assert n is not None and n.kernel_name == "global_step" and n.shape == ()
    zero_dim = parse_legacy_bin_name("x_output_0_shape_0_3_Float32_DefaultFormat.bin")
    assert zero_dim is not None and zero_dim.shape == (0, 3)


def test_underscores_in_name_and_format():
    n = parse_legacy_bin_name(
        "Default--network-WithLossCell--_backbone-ResNet--layer1_0-ResidualBlock--conv1_a-Conv2d--Conv2D-op3"
        "_input_1_shape_4_1_16_16_Float16_FRACTAL_Z.bin"
    )
    assert n is not None
    assert (
        n.kernel_name
        == "Default/network-WithLossCell/_backbone-ResNet/layer1_0-ResidualBlock/conv1_a-Conv2d/Conv2D-op3"
    )
    assert (n.io, n.slot, n.shape, n.format) == ("input", 1, (4, 1, 16, 16), "FRACTAL_Z")
    n = parse_legacy_bin_name("moments.fc_bias_output_0_shape_10_kNumberTypeFloat16_NC1HWC0_C04.bin")
    assert n is not None and (n.kernel_name, n.format) == ("moments.fc_bias", "NC1HWC0_C04")
    # a name that itself contains `_output_0_shape_`: the last one is the suffix
    n = parse_legacy_bin_name("a_output_0_shape_b_output_1_shape_3_Bool_DefaultFormat.bin")
    assert n is not None and (n.kernel_name, n.slot, n.stored_dtype) == ("a_output_0_shape_b", 1, "bool")


def test_every_dtype_spelling():
    for token, numpy_name in LEGACY_DTYPES.items():
        n = parse_legacy_bin_name(f"Add-op1_output_0_shape_2_2_{token}_FRACTAL_NZ.bin")
        assert n is not None, token
        assert (n.dtype_token, n.stored_dtype, n.format) == (token, numpy_name, "FRACTAL_NZ")
    assert {
        "kNumberTypeFloat32",
        "Float16",
        "Bool",
        "UInt64",
        "Complex128",
        "BFloat16",
    } <= LEGACY_DTYPES.keys()


def test_stored_dtypes_are_numpy_names():
    np = pytest.importorskip("numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for numpy_name in set(LEGACY_DTYPES.values()):
        dtype = ml_dtypes.bfloat16 if numpy_name == "bfloat16" else np.dtype(numpy_name)
        assert np.dtype(dtype).name == numpy_name


@pytest.mark.parametrize(
    "name",
    [
        "Conv2D-op1_output_0_shape_2_Float_DefaultFormat.bin",  # generic, width-less dtype
        "Conv2D-op1_output_0_shape_2_float32_DefaultFormat.bin",  # lowercase is not a 1.x spelling
        "Conv2D-op1_output_0_shape_2_Float32.bin",  # no format
        "Conv2D-op1_output_0_shape__Float32_DefaultFormat.bin",  # empty shape
        "Conv2D-op1_output_x_shape_2_Float32_DefaultFormat.bin",
        "Conv2D-op1_result_0_shape_2_Float32_DefaultFormat.bin",
        "Conv2D-op1_output_0_shape_2_Float32_DefaultFormat.npy",
        "_output_0_shape_2_Float32_DefaultFormat.bin",  # empty kernel name
        "Conv2D-op1_output_0_shape_2_Float32_DefaultFormat.bin.bak",
        "Conv2D-op1_output_99999999999_shape_2_Float32_DefaultFormat.bin",  # slot past int32
        "Conv2D.Conv2D-op12.0.0.1623124369613540.output.0.DefaultFormat.npy",
        "Conv2D.Conv2D-op12.12.3.1623124369613540",
    ],
)
def test_legacy_non_matches(name):
    assert parse_legacy_bin_name(name) is None


RAW = "Conv2D.Default_network-WithLossCell__backbone-AlexNet_conv3-Conv2d_Conv2D-op107.2.2.1623124369613540"


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        (
            f"{RAW}.output.0.32x12x13x13.npy",
            ConvertedName(RAW, "output", 0, (32, 12, 13, 13), None, None, "npy"),
        ),
        (
            f"{RAW}.input.2.5.npy",
            ConvertedName(RAW, "input", 2, (5,), None, None, "npy"),
        ),  # 1-D shape: digits only
        (f"{RAW}.output.0..npy", ConvertedName(RAW, "output", 0, (), None, None, "npy")),  # empty shape -> ()
        (
            f"{RAW}.output.0.32_1_13_13_16.float16.NC1HWC0.bin",
            ConvertedName(RAW, "output", 0, (32, 1, 13, 13, 16), "float16", "NC1HWC0", "bin"),
        ),
        (
            f"{RAW}.input.1.4_1_16_16.float16.FRACTAL_Z.bin",
            ConvertedName(RAW, "input", 1, (4, 1, 16, 16), "float16", "FRACTAL_Z", "bin"),
        ),
        (f"{RAW}.output.1.npy", ConvertedName(RAW, "output", 1, None, None, None, "plain")),
        # v1.2 raw names have no stream id (4 fields)
        (
            "Add.Add-op1.5.1623124369613540.input.0.npy",
            ConvertedName("Add.Add-op1.5.1623124369613540", "input", 0, None, None, None, "plain"),
        ),
        # offline-model name from msprobe-cann §2.4, numeric op name
        (
            "Add.8.5.1682067845380164.output.0.1x3x224x224.npy",
            ConvertedName("Add.8.5.1682067845380164", "output", 0, (1, 3, 224, 224), None, None, "npy"),
        ),
        # raw name with the newer `.bin` suffix (msprobe-cann §2.4)
        (
            "aclnnBatchMatMul_0_L2.aclnnBatchMatMul.65535.65535.1725960383079645.bin.output.0.2x3.npy",
            ConvertedName(
                "aclnnBatchMatMul_0_L2.aclnnBatchMatMul.65535.65535.1725960383079645.bin",
                "output",
                0,
                (2, 3),
                None,
                None,
                "npy",
            ),
        ),
        # raw file renamed through mapping.csv
        ("1218428936.output.0.2x3.npy", ConvertedName("1218428936", "output", 0, (2, 3), None, None, "npy")),
        # an op named "output" does not confuse the right-to-left reading
        (
            "Identity.output.1.2.1623124369613540.input.0.npy",
            ConvertedName("Identity.output.1.2.1623124369613540", "input", 0, None, None, None, "plain"),
        ),
        (f"/some/dir/{RAW}.output.0.4x4.npy", ConvertedName(RAW, "output", 0, (4, 4), None, None, "npy")),
    ],
)
def test_converted_names(name, expected):
    assert parse_converted_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        # MindSpore's own npy names: a format (and from v2.4 a dtype) after the slot
        f"{RAW}.output.0.DefaultFormat.npy",
        f"{RAW}.output.0.NC1HWC0.npy",
        f"{RAW}.output.0.FRACTAL_NZ.npy",
        f"{RAW}.output.0.ND.npy",
        f"{RAW}.output.0.NCHW.npy",
        f"{RAW}.output.0.DefaultFormat.Float32.npy",
        f"{RAW}.output.0.FRACTAL_NZ.bfloat16.npy",
        "Parameter.conv1.weight.0.0.1623124369613540.output.0.DefaultFormat.npy",
        "Conv2d.Conv2D-op107.2.2.1623124369613540.output.0.DefaultFormat.npy",  # docs r1.6 example
        # not conversions
        RAW,
        f"{RAW}.output.0.2x3",
        "76334610.npy",  # mapping.csv target
        "mapping.csv",
        f"{RAW}.output.0.2x3.float16.npy",
        f"{RAW}.output.0.2X3.npy",
        f"{RAW}.output.0.2x.npy",
        f"{RAW}.result.0.2x3.npy",
        f"{RAW}.output.zero.npy",
        f"{RAW}.output.99999999999.npy",  # slot past int32
        f"{RAW}.output.0.2x3.float16.bin",  # bin without format
        f"{RAW}.output.0.2x3.float16.NCHW.bin",  # bin shape uses '_'
        f"{RAW}.output.0.2_3.16.NCHW.bin",  # dtype must be a word
        "aclnnBatchMatMul_0_L2.aclnnBatchMatMul.65535.65535.1725960383079645.bin",  # a raw dump itself
        "conv1.weight_output_0_shape_6_1_5_5_Float32_DefaultFormat.bin",  # legacy sync bin
        "Conv2D.output.0.2x3.npy",  # raw part too short
        ".Conv2D-op1.1.2.output.0.npy",  # empty op type
        "Conv2D..1.2.output.0.npy",  # empty op name
        "Conv2D.Conv2D-op1.x.2.output.0.npy",  # non-numeric task id
    ],
)
def test_converted_non_matches(name):
    assert parse_converted_name(name) is None


def _ms210_npy_names() -> list[str]:
    return sorted({p.name for p in MS210.glob("*/dump/rank_0/*/*/*/*.npy")})


def test_real_mindspore_210_names_are_not_conversions():
    names = _ms210_npy_names()
    assert len(names) > 1000  # the committed dumps are there
    assert [n for n in names if parse_converted_name(n) is not None] == []
    assert [n for n in names if parse_legacy_bin_name(n) is not None] == []


def test_real_names_with_their_suffix_dropped_are_plain_conversions():
    """The same raw stems, given a plain msaccucmp tail instead of MindSpore's, do parse."""
    for name in _ms210_npy_names()[:50]:
        if name.count(".") < 8:
            continue  # mapping.csv targets
        stem = name.rsplit(".", 5)[0]  # drop `.{io}.{slot}.{format}.{dtype}.npy`
        io, slot = name.split(".")[-5:-3]
        assert parse_converted_name(f"{stem}.{io}.{slot}.npy") == ConvertedName(
            stem, io, int(slot), None, None, None, "plain"
        )


@settings(max_examples=300, deadline=None)
@given(
    st.text(alphabet="._-0123456789xXabcFloat16outputinshape_NC1HWC0DefaultkNumberTypenpybin/", max_size=80)
)
def test_any_text_parses_or_is_none(name):
    for parse in (parse_legacy_bin_name, parse_converted_name):
        result = parse(name)
        assert result is None or isinstance(result, LegacyBinName | ConvertedName)
