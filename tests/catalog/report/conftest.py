"""One headless Chromium for every report test of the session (tests/report_browser.py): each test
opens its own page in it, and `Browser.open` drops what an earlier page logged."""

from __future__ import annotations

import pytest

from tests.report_browser import Browser


@pytest.fixture(scope="session")
def browser():
    with Browser() as b:
        yield b
