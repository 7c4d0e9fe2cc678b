"""``python -m explorer.devtools.screenshots``: the pictures of docs/screenshots/, taken again.

Starts the app (``streamlit run app/main.py``) on a free local port, opens the Start page, a lesson
step and the Explorer in Debian's chromium through Playwright (requirements-dev.txt) under a light
and a dark colour scheme, and writes each as a PNG of at most 256 colours (a screenshot of the app
has far fewer), so that each stays small enough to keep in the repository.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ..server import launcher as serve

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
# What each picture shows: its name, the page's address, and the element to wait for.
SHOTS = (
    ("start", "", "text=Lessons"),
    ("lesson", "lessons?lesson=depthwise_blog&step=8", "text=The claim"),
    ("explorer", "explorer?preset=dw-blog-final-96", ".tvm-code"),
)
WIDTH, HEIGHT = 1280, 800
WAIT_MS = 120_000


def small_png(path: Path) -> int:
    """Rewrite ``path`` with a palette of at most 256 colours; its new size in bytes."""
    from PIL import Image  # Streamlit's own dependency

    with Image.open(path) as image:
        image.convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path.stat().st_size


def take(url: str, out: Path) -> list[tuple[Path, int]]:
    from playwright.sync_api import sync_playwright

    taken = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--headless", "--no-sandbox"])
        for scheme in ("light", "dark"):
            context = browser.new_context(color_scheme=scheme, viewport={"width": WIDTH, "height": HEIGHT})
            page = context.new_page()
            page.set_default_timeout(WAIT_MS)
            for name, path, ready in SHOTS:
                page.goto(f"{url}/{path}")
                page.locator(ready).first.wait_for()
                page.wait_for_function("() => !document.querySelector('[data-testid=\"stStatusWidget\"], "
                                       "[data-testid=\"stSkeleton\"], [data-stale=\"true\"]')")
                page.wait_for_timeout(1500)  # the last fragment's run and the fonts
                file = out / f"{name}-{scheme}.png"
                page.screenshot(path=file)
                taken.append((file, small_png(file)))
            context.close()
        browser.close()
    return taken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder of the PNGs (default: docs/screenshots)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    port = serve.free_port()
    class_db = Path(tempfile.mkdtemp(prefix="screenshots-")) / "class.sqlite3"  # no class of anyone's on the pictures
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(serve.APP_MAIN), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
         "--server.fileWatcherType", "none"], cwd=ROOT, env={**os.environ, "EXPLORER_CLASS_DB": str(class_db)},
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        url = serve.local_url(port, "127.0.0.1")
        serve.wait_healthy(url, server)
        for file, size in take(url, args.out):
            print(f"{file.relative_to(ROOT) if file.is_relative_to(ROOT) else file}: {size / 1024:.0f} KB")
    finally:
        server.terminate()
        server.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
