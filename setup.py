"""Build hook for the optional C kernels; pyproject.toml holds the configuration.

- ingest.statistics._fused_stats, for ingest.statistics.kernel;
- ingest._compare_kernel, for ingest.compare_metrics (dumpcat compare's pair metrics);
- ingest.formats._npy_scan, for ingest.formats.npy_header.scan_npy_headers (a metadata ingest's headers).

All are optional: without a C compiler (or Python headers) the install still succeeds and each module
uses its pure-Python/numpy path instead (bit-identical statistics; pair metrics within a few ulps; the same
headers), only slower.
"""

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# No -ffast-math, and no contraction of x * x + s into a fused multiply-add: the lane sums must be
# exactly the IEEE additions the pure-numpy fallback performs, and the compare kernel's float32
# relative errors exactly numpy's float32 arithmetic.
_FLAGS = [] if sys.platform == "win32" else ["-O3", "-ffp-contract=off", "-fno-fast-math", "-std=c11"]


class _BuildExt(build_ext):
    """Say plainly, without a traceback, when the kernel cannot be built."""

    def run(self):
        try:
            super().run()
        except Exception as exc:
            _skipped(exc)

    def build_extension(self, ext):
        try:
            super().build_extension(ext)
        except Exception as exc:
            _skipped(exc, ext.name)


def _skipped(exc: BaseException, name: str = "the optional C kernels") -> None:
    print(
        f"NOTE: {name} (optional C kernel) was not built ({type(exc).__name__}: {exc}); "
        "dumpcat works without it and computes statistics and comparison metrics with numpy "
        "and reads npy headers in Python, only slower.",
        file=sys.stderr,
    )


setup(
    ext_modules=[
        Extension(
            "ingest.statistics._fused_stats",
            ["ingest/statistics/_fused_stats.c"],
            include_dirs=["ingest"],
            depends=["ingest/_float16.h"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
        Extension(
            "ingest._compare_kernel",
            ["ingest/_compare_kernel.c"],
            include_dirs=["ingest"],
            depends=["ingest/_float16.h"],
            # no traps on float flags: lets the compiler compute both sides of a select (vectorising),
            # without changing any result
            extra_compile_args=_FLAGS + ([] if sys.platform == "win32" else ["-fno-trapping-math"]),
            optional=True,
        ),
        Extension(
            "ingest.formats._npy_scan",
            ["ingest/formats/_npy_scan.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
    ],
    cmdclass={"build_ext": _BuildExt},
)
