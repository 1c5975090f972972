"""Stored dtypes that are not numpy dtype names, in a module of their own: the statistics kernel
(ingest/statistics/kernel.py) and the tensor reader (ingest/formats/tensor_data.py) both test for them, and a
helper process must be able to without importing ml_dtypes."""

# Stored dtypes that are not numpy dtype names: packed, `ml_dtypes` or raw bytes, decoded by
# ingest.formats.dtypes (imported only when such a tensor comes, so a helper starts with numpy alone).
# bfloat16 is read directly as 16-bit patterns unless a device layout must be converted first.
SPECIAL_STORED = frozenset(
    {"int4", "uint1", "complex32", "raw", "bfloat16", "float8_e5m2", "float8_e4m3fn", "float8_e8m0fnu",
     "float8_e4m3fnuz", "float8_e5m2fnuz"}
)  # fmt: skip
