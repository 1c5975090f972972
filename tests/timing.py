"""Latency checks that load alone cannot fail.

Some tests must bound a latency: a bystander's `SELECT 1` while an attack runs, a tensor's
freshness under a watcher, a cancel that must stop a statement. The regressions they guard
against miss by a wide margin every time (a statement that waits out a timeout, a tensor that
waits for a reconciliation scan); a machine busy with another test file can miss once. So a
scenario whose only failure is a latency runs again, up to `ATTEMPTS` times in all, and passes on
the first attempt within bounds. A wrong answer or an error is a plain AssertionError and fails at
once: only `LatencyMiss` is retried.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
ATTEMPTS = 3


class LatencyMiss(AssertionError):
    """Only a latency bound was missed: the scenario may run again."""


def within(took: float, bound: float, what: object = "") -> None:
    """LatencyMiss unless `took` (seconds) is under `bound`."""
    if not took < bound:
        raise LatencyMiss(f"{took:.2f} s, bound {bound} s {what}")


def with_retries(scenario: Callable[[], T], attempts: int = ATTEMPTS) -> T:
    """`scenario()`, run again while it fails with LatencyMiss only (at most `attempts` runs)."""
    misses: list[str] = []
    for _ in range(attempts):
        try:
            return scenario()
        except LatencyMiss as exc:
            misses.append(str(exc))
    raise LatencyMiss(f"missed its latency bound in all {attempts} attempts: {misses}")


def latency_retried(test: Callable[..., None]) -> Callable[..., None]:
    """A test decorator: the whole test runs again (same fixtures) while it fails with LatencyMiss
    only. For tests whose scenario can run twice on its fixtures (a server, a catalog read)."""

    @functools.wraps(test)
    def run(*args: object, **kwargs: object) -> None:
        with_retries(lambda: test(*args, **kwargs))

    return run
