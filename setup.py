"""Build hook for the optional C kernel of ingest.statistics.kernel; pyproject.toml holds the configuration.

The extension is optional: without a C compiler (or Python headers) the install still succeeds and
ingest.statistics.kernel uses its pure-numpy fallback, which gives bit-identical results, only slower.
"""

import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# No -ffast-math, and no contraction of x * x + s into a fused multiply-add: the lane sums must be
# exactly the IEEE additions the pure-numpy fallback performs.
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
            _skipped(exc)


def _skipped(exc: BaseException) -> None:
    print(
        f"NOTE: ingest.statistics._fused_stats (optional C kernel) was not built "
        f"({type(exc).__name__}: {exc}); "
        "dumpcat works without it and computes statistics with numpy, bit-identically but slower.",
        file=sys.stderr,
    )


setup(
    ext_modules=[
        Extension(
            "ingest.statistics._fused_stats",
            ["ingest/statistics/_fused_stats.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        )
    ],
    cmdclass={"build_ext": _BuildExt},
)
