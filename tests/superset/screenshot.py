"""Screenshot of a Superset chart over `dumpcat serve`, for the docs: docs/superset-chart.png.

Does what test_superset.py does, in a temp dir: a catalog of the committed nan_log dump served
by `dumpcat serve` (in-process, password login), Superset from its own venv (tests/superset/install.sh
builds it), the database added and a dataset on `stats` made through Superset's REST API, the chart
of harness.chart_form_data saved, then logged in through the login form in headless Chromium and the
chart's explore page captured (reduced to 256 colours).

    python tests/superset/screenshot.py                  # writes docs/superset-chart.png
    python tests/superset/screenshot.py --out chart.png
"""

from __future__ import annotations

import argparse
import io
import secrets
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from catalog.server.server import Server  # noqa: E402
from tests.conftest import nan_log_catalog  # noqa: E402
from tests.report_browser import Browser  # noqa: E402
from tests.superset import harness  # noqa: E402

OUT = ROOT / "docs" / "superset-chart.png"


def shoot(out: Path, width: int = 1600, height: int = 1000) -> Path:
    from PIL import Image

    user, password = "bi", secrets.token_urlsafe(12)
    with tempfile.TemporaryDirectory(prefix="dumpcat-superset-") as tmp:
        folder = Path(tmp)
        cat = nan_log_catalog(folder)
        srv = Server(cat, port=0, users={user: password}).start()
        try:
            with harness.Superset(folder / "superset") as superset:
                start = time.monotonic()
                superset.set_up().start()
                api = superset.api()
                database = harness.add_database(api, harness.sqlalchemy_uri(srv.port, user, password))
                chart = harness.save_chart(api, harness.create_dataset(api, database, "stats"))
                with Browser(width=width, height=height) as b:
                    harness.browser_login(b.driver, superset)
                    harness.open_chart(b.driver, superset, chart)
                    png = b.screenshot()
                print(f"Superset up and the chart drawn in {time.monotonic() - start:.0f} s", file=sys.stderr)
        finally:
            srv.stop()
    image = Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    image.save(out, optimize=True)
    shown = out.resolve().relative_to(ROOT) if out.resolve().is_relative_to(ROOT) else out
    print(f"{shown}: {image.width}x{image.height}, {out.stat().st_size / 1e3:.0f} KB")
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=OUT, help="PNG to write (default: docs/superset-chart.png)"
    )
    args = parser.parse_args(argv)
    try:
        shoot(args.out)
    except (harness.SupersetMissing, harness.SupersetFailed) as exc:
        raise SystemExit(str(exc)) from None


if __name__ == "__main__":
    main()
