"""Build the course website (`make site`; docs/site.md): Sphinx + MyST-NB over docs/ and the
committed notebooks, with their outputs (nothing is executed), offline. Then open
site/index.html from disk.

    python scripts/build_site.py [OUT]     # default: site/

Any Sphinx warning fails the build (a dead link, a page left out of the navigation): the
browser test (tests/website) checks the pages that a clean build writes.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def build_site(out: Path) -> tuple[float, int]:
    """Build into `out`; returns (seconds, pages written)."""
    from sphinx.cmd.build import build_main

    # Sphinx writes into build/site/html, then the pages replace `out`: MyST-NB puts the
    # notebooks' images beside its output folder (build/site/jupyter_execute), and a build
    # that fails leaves the last good site where it was
    work = ROOT / "build" / "site"
    start = time.perf_counter()
    # the source folder is the repository root (docs/site/conf.py says why); -E: every page
    # from scratch (a notebook's banner depends on the course map, which Sphinx does not
    # know); -W --keep-going: every warning is listed, then fails the build
    code = build_main(["-b", "html", "-c", str(ROOT / "docs/site"), "-d", str(work / "doctrees"),
                       "-E", "-q", "-W", "--keep-going", str(ROOT), str(work / "html")])
    if code:
        sys.exit(f"the site did not build (sphinx exit {code}): see the warnings above")
    shutil.rmtree(out, ignore_errors=True)
    shutil.move(work / "html", out)
    # _static/ holds the theme's files, two of them Jinja macros named .html: not pages
    pages = sum(1 for p in out.rglob("*.html") if "_static" not in p.relative_to(out).parts)
    return time.perf_counter() - start, pages


if __name__ == "__main__":
    out = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT / "site"
    seconds, pages = build_site(out)
    print(f"site: {pages} pages in {seconds:.0f} s -> {out / 'index.html'}")
