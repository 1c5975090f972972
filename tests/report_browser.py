"""Open a report in headless Chromium and say how it went: load time, console messages, every
request the page made, a screenshot. The tests, `bench/bench_report.py` and
`bench/report_screenshots.py` use it to check the page as a person's browser shows it.

Needs Selenium (the `test` extra) and Debian's `chromium` and `chromium-driver` (`.ci/run`
installs them). The browser runs with its resolver pointed nowhere, so nothing it could try to
fetch leaves the machine; the page must not try (the requests are recorded).
"""

from __future__ import annotations

import base64
import json
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Browser", "BrowserMissing", "PageLoad"]

_ARGS = (
    "--headless=new",
    "--no-sandbox",  # CI runs as root
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--hide-scrollbars",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-sync",
    "--disable-features=Translate,OptimizationHints,MediaRouter",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
)


class BrowserMissing(RuntimeError):
    """Chromium, its driver or Selenium is not installed."""


@dataclass
class PageLoad:
    """What opening a page gave."""

    url: str
    load_seconds: float  # navigation start -> end of the load event
    rendered_seconds: float  # navigation start -> every figure drawn (the page's 'dumpcat-rendered' mark)
    console: list[dict] = field(default_factory=list)  # browser log entries: level, message
    requests: list[str] = field(default_factory=list)  # every URL the page asked for
    screenshot: bytes | None = None  # PNG

    @property
    def errors(self) -> list[dict]:
        return [e for e in self.console if e.get("level") == "SEVERE"]

    @property
    def network_requests(self) -> list[str]:
        """Requests that would leave the page: anything but the file itself and data: URLs."""
        return [u for u in self.requests if not (u.startswith("data:") or u.split("#")[0] == self.url)]


def _find(*names: str) -> str:
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserMissing(
        f"{' or '.join(names)} not found: install Debian's chromium and chromium-driver "
        "(apt-get install -y chromium chromium-driver; .ci/run does)"
    )


class Browser:
    """One headless Chromium driven by chromedriver; `open` a page as often as needed."""

    def __init__(self, width: int = 1400, height: int = 1000) -> None:
        try:
            from selenium import webdriver
            from selenium.webdriver.chrome.service import Service
        except ImportError as exc:  # pragma: no cover - the test extra installs it
            raise BrowserMissing("selenium is not installed: pip install -e '.[test]'") from exc
        options = webdriver.ChromeOptions()
        options.binary_location = _find("chromium", "chromium-browser")
        for arg in (*_ARGS, f"--window-size={width},{height}"):
            options.add_argument(arg)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
        # The driver's path is given, so Selenium never looks one up (Selenium Manager stays idle).
        self.driver = webdriver.Chrome(options=options, service=Service(_find("chromedriver")))
        self.driver.set_page_load_timeout(60)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.driver.quit()

    def open(
        self, path: str | Path, *, screenshot: bool = False, scale: float = 1.0, timeout: float = 60
    ) -> PageLoad:
        """Load the file, wait until its figures are drawn, and collect what happened."""
        d = self.driver
        d.get_log("browser")  # drop what an earlier page left
        d.get_log("performance")
        url = Path(path).resolve().as_uri()
        d.get(url)  # returns after the load event
        deadline = time.monotonic() + timeout
        while d.execute_script("return document.documentElement.dataset.rendered") != "true":
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url}: figures not drawn after {timeout} s")
            time.sleep(0.02)
        timing = d.execute_script(
            "const n = performance.getEntriesByType('navigation')[0];"
            "const m = performance.getEntriesByName('dumpcat-rendered');"
            "return [n.loadEventEnd, m.length ? m[0].startTime : null];"
        )
        requests = []
        for entry in d.get_log("performance"):
            message = json.loads(entry["message"])["message"]
            if message.get("method") == "Network.requestWillBeSent":
                requests.append(message["params"]["request"]["url"])
        load = PageLoad(
            url=url,
            load_seconds=timing[0] / 1000,
            rendered_seconds=max(timing[0], timing[1] or 0) / 1000,
            console=[{"level": e["level"], "message": e["message"]} for e in d.get_log("browser")],
            requests=requests,
        )
        if screenshot:
            load.screenshot = self.screenshot(scale)
        return load

    def screenshot(self, scale: float = 1.0) -> bytes:
        """A PNG of the whole page (not only the window), `scale` times its CSS size."""
        d = self.driver
        width, height = d.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight];"
        )
        shot = d.execute_cdp_cmd(
            "Page.captureScreenshot",
            {
                "format": "png",
                "captureBeyondViewport": True,
                "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": scale},
            },
        )
        return base64.b64decode(shot["data"])

    def text(self, css: str) -> list[str]:
        """The visible text of every element matching a CSS selector."""
        from selenium.webdriver.common.by import By

        return [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css)]
