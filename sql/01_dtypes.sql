-- One dtype vocabulary for every producer.
--
-- Producers spell data types their own way: msprobe `torch.float32` (PyTorch) or `Float32`
-- (MindSpore), CANN raw dumps and stats CSVs `DT_FLOAT`, MindSpore 1.0-1.2 `.bin` names
-- `kNumberTypeFloat32` or `Float32`, MindSpore's npy names and statistic.csv `float32`. The
-- `dtype` column of `tensors`, `stats` and the views over them holds `dtype_name(...)` of the
-- producer's spelling: numpy's name of the type (float32, float16, float64, int64, bool,
-- complex64 ...), ml_dtypes' for the types numpy lacks (bfloat16, float8_e4m3fn, float8_e5m2,
-- int4 ...), so `WHERE dtype = 'bfloat16'` finds every producer's bfloat16 tensors. The
-- producer's own spelling stays in `producer_dtype`; how the bytes on disk decode is
-- `tensors.stored_dtype` (e.g. bfloat16 saved as float32 data by MindSpore 2.4+).
--
-- Types with no numpy or ml_dtypes name (CANN's qint8, hifloat8, string ...) keep the producer's
-- name, lower-cased and without its prefix.

-- The spelling lower-cased, without a producer's prefix: 'torch.', 'mindspore.', 'DT_', 'kNumberType'.
CREATE OR REPLACE MACRO dtype_key(spelling) AS
    regexp_replace(lower(trim(spelling)), '^(torch[.]|mindspore[.]|dt_|knumbertype)', '');

CREATE OR REPLACE MACRO dtype_name(spelling) AS
    CASE dtype_key(spelling)
        WHEN 'float' THEN 'float32'          -- CANN DT_FLOAT, torch.float
        WHEN 'double' THEN 'float64'         -- CANN DT_DOUBLE, torch.double
        WHEN 'half' THEN 'float16'           -- torch.half
        WHEN 'bf16' THEN 'bfloat16'          -- CANN DT_BF16
        WHEN 'long' THEN 'int64'             -- torch.long
        WHEN 'int' THEN 'int32'              -- torch.int
        WHEN 'short' THEN 'int16'            -- torch.short
        WHEN 'cfloat' THEN 'complex64'       -- torch.cfloat
        WHEN 'cdouble' THEN 'complex128'     -- torch.cdouble
        WHEN 'chalf' THEN 'complex32'        -- torch.chalf
        WHEN 'float8_e8m0' THEN 'float8_e8m0fnu'  -- CANN's names of ml_dtypes' types
        WHEN 'float6_e3m2' THEN 'float6_e3m2fn'
        WHEN 'float6_e2m3' THEN 'float6_e2m3fn'
        WHEN 'float4_e2m1' THEN 'float4_e2m1fn'
        -- a type number no table names (`DT_99`) keeps its spelling
        ELSE CASE WHEN regexp_matches(dtype_key(spelling), '^[0-9]+$') THEN spelling
                  ELSE dtype_key(spelling) END
    END;
