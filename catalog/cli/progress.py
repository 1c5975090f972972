"""The progress bar of the long commands (`ingest`, `stats`, `compare`), on stderr.

It is the `on_progress` of the work (ingest/progress.py): counts advance it, `total(n)` gives it
the size of the work (so it shows a percentage and an ETA) and `phase(name)` says what is being
done when the count stands still (a batch committed, the flat files merged). It is shown when
stderr is a terminal, or as `--progress/--no-progress` say; tqdm is imported only then (the
start-up time of scripted commands), and so is the table printer that makes the label printable.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["ProgressBar", "show_progress"]


def show_progress(progress: bool | None) -> bool:
    """Whether to draw a bar: as asked, else when stderr is a terminal (never into a pipe or a log)."""
    if progress is not None:
        return progress
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


class ProgressBar:
    """A bar labelled `label` counting `unit`s, drawn only when `enabled`; use as a context manager
    and pass `on_progress` (None when disabled: the work then makes no calls at all)."""

    def __init__(self, label: str, unit: str, *, enabled: bool) -> None:
        self.label = label
        self.unit = unit
        self.enabled = enabled
        self._bar: Any = None

    def __enter__(self) -> ProgressBar:
        if self.enabled:
            from tqdm import tqdm

            from catalog.cli.output import printable

            self.label = printable(self.label)  # a run's name is anyone's text: no escapes drawn

            # drawn first by the first phase or total (`delay`), not as an empty count before them
            self._bar = tqdm(
                desc=self.label, unit=f" {self.unit}", file=sys.stderr, leave=False, dynamic_ncols=True,
                delay=1e-9,
            )  # fmt: skip
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._bar is not None:
            if exc_type is None:
                self._bar.refresh()  # the final count is drawn before the line is cleared
            self._bar.close()
            self._bar = None

    @property
    def on_progress(self) -> ProgressBar | None:
        """What to pass as the work's `on_progress`."""
        return self if self._bar is not None else None

    def __call__(self, n: int) -> None:
        self._bar.update(n)

    def total(self, n: int) -> None:
        """The work holds `n` units: the bar shows a percentage and an ETA from now on."""
        self._bar.total = n
        self._bar.refresh()

    def phase(self, name: str) -> None:
        """The work is now doing `name`; drawn at once, so that even a short phase is seen."""
        self._bar.set_description_str(f"{self.label}, {name}", refresh=True)
