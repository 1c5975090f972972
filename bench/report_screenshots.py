"""Screenshots of `dumpcat report` for docs/report.md: one PNG per sample of test_report.py.

Each sample is ingested (and the compare pair compared) in a temp dir, its report written by the
CLI and opened in headless Chromium (tests/report_browser.py), and the whole page captured at 75%
of its size into docs/report/<sample>.png (reduced to 256 colours, a few hundred KB at most). The
paths of this machine on the page (the repository's and the temp dir's) are shown shortened to
`…/`, as the README's examples do; nothing else is touched.

    python bench/report_screenshots.py              # every sample
    python bench/report_screenshots.py nan_log      # some of them
"""

from __future__ import annotations

import argparse
import io
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from tests.catalog.report.test_report import SAMPLES, build_sample  # noqa: E402
from tests.report_browser import Browser  # noqa: E402

OUT = ROOT / "docs" / "report"

# Replace a machine path prefix by '…/' in every text node and attribute of the page.
_ELIDE = """
const prefixes = arguments[0];
const elide = s => prefixes.reduce((t, p) => t.split(p).join('…/'), s);
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let n = walker.nextNode(); n; n = walker.nextNode()) n.nodeValue = elide(n.nodeValue);
for (const e of document.querySelectorAll('[title]')) e.title = elide(e.title);
"""


def shoot(names: list[str], scale: float = 0.75) -> list[Path]:
    from PIL import Image

    OUT.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="dumpcat-shots-") as tmp, Browser(width=1400, height=1000) as b:
        for name in names:
            folder = Path(tmp) / name
            folder.mkdir()
            _, page = build_sample(name, folder)
            load = b.open(page)
            if load.errors or load.network_requests:
                raise SystemExit(f"{name}: console errors {load.errors}, requests {load.network_requests}")
            b.driver.execute_script(_ELIDE, [str(Path(tmp).resolve()) + "/", str(ROOT) + "/"])
            png = Image.open(io.BytesIO(b.screenshot(scale))).convert("RGB")
            png = png.quantize(colors=256, method=Image.Quantize.MEDIANCUT)
            path = OUT / f"{name}.png"
            png.save(path, optimize=True)
            print(f"{path.relative_to(ROOT)}: {png.width}x{png.height}, {path.stat().st_size / 1e3:.0f} KB")
            written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help=f"samples (default: all of {', '.join(SAMPLES)})")
    a = p.parse_args(argv)
    unknown = sorted(set(a.names) - set(SAMPLES))
    if unknown:
        p.error(f"unknown samples: {', '.join(unknown)}")
    shoot(a.names or list(SAMPLES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
