"""The course website (`make site`, docs/site.md) in a real browser, every page, offline.

Debian's chromium (installed by `make browser`, which `make test` runs first) opens each page
of site/ from disk with every request that is not a file: URL blocked: no console error, no
failed request, every image with a width, every formula typeset by the bundled MathJax, every
link to a file or an anchor of the site resolved; the search finds "residual". The first
tests break each rule on a small page, to show that the check sees it.

The site is built once per session into site/, unless site/ is newer than everything it is
built from (then it is reused). Without chromium these tests are skipped, except in CI
(CI=true), where they fail.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from .browser import Checker, launch, require_chromium

ROOT = Path(__file__).resolve().parents[2]
SITE = ROOT / "site"
# what the site is built from: when one of these is newer than site/index.html, it is rebuilt
INPUTS = ["docs/**/*.md", "docs/**/*.png", "docs/explorer/*.html", "docs/site/**/*",
          "notebooks/*.ipynb",
          "notebooks/*.py", "notebooks/exercises/**/*", "README*.md", "scripts/build_site.py"]
# a 1x1 PNG, for the pages that break the rules
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360606060000000050001a5f645400000000049454e44ae426082"
)


def site_is_fresh() -> bool:
    index = SITE / "index.html"
    if not index.exists():
        return False
    built = index.stat().st_mtime
    return all(p.stat().st_mtime <= built for pattern in INPUTS for p in ROOT.glob(pattern))


@pytest.fixture(scope="module")
def browser():
    require_chromium("the site's browser test")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch(playwright)
        yield chromium
        chromium.close()


@pytest.fixture()
def checker(browser):
    tab = Checker(browser)
    yield tab
    tab.close()


@pytest.fixture(scope="module")
def site(browser) -> Path:
    if not site_is_fresh():
        start = time.perf_counter()
        subprocess.run([sys.executable, str(ROOT / "scripts/build_site.py"), str(SITE)],
                       cwd=ROOT, check=True)
        print(f"site built in {time.perf_counter() - start:.0f} s")
    return SITE


def site_pages(site: Path) -> list[Path]:
    # _static/ holds the theme's assets (two of them are Jinja macros named .html, not pages)
    return sorted(p for p in site.rglob("*.html") if "_static" not in p.relative_to(site).parts)


# --- the check itself: each rule broken on a small page --------------------------------------

def test_a_page_that_breaks_every_rule_is_flagged(checker, tmp_path):
    (tmp_path / "good.png").write_bytes(PIXEL)
    (tmp_path / "good.html").write_text('<html><body><h1 id="here">ok</h1></body></html>')
    bad = tmp_path / "bad.html"
    bad.write_text("""<!DOCTYPE html><html><head><meta charset="utf-8">
<script src="https://cdn.example.org/mathjax.js"></script></head><body>
<img src="good.png"><img src="missing.png">
<p>an untypeset formula $x^2$ and another \\(y\\); <code>$OUT</code> is a shell variable</p>
<p>Sphinx's markup for a formula, with no MathJax to typeset it:
<span class="math">\\(z\\)</span></p>
<a href="nowhere.html">dead</a> <a href="good.html#nope">dead anchor</a>
<a href="good.html#here">fine</a> <a href="https://example.org/">the web: not followed</a>
<script>console.error("boom")</script>
</body></html>""")
    problems = "\n".join(checker.check(bad).problems)
    for expected in [
        "blocked request to the network: https://cdn.example.org/mathjax.js",
        "image with no width: missing.png",
        "request failed: " + (tmp_path / "missing.png").as_uri(),
        "raw TeX in the text: '$x^2$'",
        "raw TeX in the text: '\\\\('",
        "formula not typeset: '\\\\(z\\\\)'",
        "dead link: " + (tmp_path / "nowhere.html").as_uri(),
        "dead anchor: " + (tmp_path / "good.html").as_uri() + "#nope",
        "console error: boom",
    ]:
        assert expected in problems, f"not flagged: {expected}\nflagged:\n{problems}"
    assert "$OUT" not in problems and "https://example.org/" not in problems


def test_a_clean_page_has_no_problems(checker, tmp_path):
    (tmp_path / "good.png").write_bytes(PIXEL)
    page = tmp_path / "page.html"
    page.write_text('<html><body><h1 id="top">ok</h1><img src="good.png">'
                    '<p>price: <code>$5</code></p><a href="page.html#top">top</a></body></html>')
    check = checker.check(page)
    assert check.problems == []
    assert check.facts["images"] == 1


# --- the built site ---------------------------------------------------------------------------

def test_every_page_of_the_site(checker, site):
    pages = site_pages(site)
    notebooks = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert len(pages) >= len(notebooks) + 20, f"only {len(pages)} pages in {site}"
    # each notebook's exercises: the exercises' README (| idea | `…/my_X.py:f` | NN | time |)
    readme = (ROOT / "notebooks/exercises/README.md").read_text(encoding="utf-8")
    exercises: dict[str, list[str]] = {}
    for name, nb in re.findall(r"`notebooks/exercises/(my_\w+\.py):\w+` \| (\d\d) \|", readme):
        exercises.setdefault(nb, []).append(name)
    assert exercises, "no exercise found in notebooks/exercises/README.md's table"
    failures, formulas, start = {}, 0, time.perf_counter()
    for path in pages:
        name = path.relative_to(site).as_posix()
        check = checker.check(path)
        facts, problems = check.facts, check.problems
        formulas += facts["formulas"]
        if name.startswith(("docs/", "notebooks/0", "notebooks/1", "README")):
            if not facts["searchBox"]:
                problems.append("no search box")
        if name.startswith(("notebooks/0", "notebooks/1")):
            stem = Path(name).stem
            if not facts["highlighted"]:
                problems.append("no highlighted code")
            if not facts["images"]:
                problems.append("no figure")
            if not any(h.endswith(f"/{stem}.ipynb") for h in facts["links"]):
                problems.append(f"no link to {stem}.ipynb")
            # a skeleton is a download (_downloads/…/my_X.py); else the exercises' page
            for exercise in exercises.get(stem[:2], ["exercises/README.html"]):
                if not any(h.endswith(f"/{exercise}") for h in facts["links"]):
                    problems.append(f"no link to {exercise}")
        if problems:
            failures[name] = problems
    print(f"{len(pages)} pages checked in {time.perf_counter() - start:.0f} s")
    assert not failures, "\n".join(f"{name}:\n  " + "\n  ".join(p) for name, p in failures.items())
    # the pages write their formulas in plain text; docs/site.md has one in TeX, so that the
    # bundled MathJax is shown to typeset offline
    assert formulas >= 1, "no page has a formula: nothing shows that math renders offline"


def test_no_page_loads_anything_from_the_web(site):
    """What the browser blocked was what it tried to load; this reads what the site refers
    to, loaded or not: no script, style sheet or font from another host."""
    tag = re.compile(r'<(?:script|link|img)\b[^>]*?\b(?:src|href)="(https?:[^"]*)"')
    css = re.compile(r"""url\(\s*['"]?(https?:[^'")]*)|@import\s+['"](https?:[^'"]*)""")
    found = {}
    for path in site.rglob("*"):
        if path.suffix in (".html", ".css"):
            text = path.read_text(encoding="utf-8", errors="replace")
            urls = tag.findall(text) if path.suffix == ".html" else css.findall(text)
            if urls:
                found[path.relative_to(site).as_posix()] = urls
    assert not found, found


def test_every_notebook_page_names_its_article_sections(site):
    for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")):
        html = (site / "notebooks" / f"{nb.stem}.html").read_text(encoding="utf-8")
        assert "course-banner" in html and "Teaches: §" in html, nb.stem


def test_the_navigation_follows_the_course_map(site):
    html = (site / "docs" / "index.html").read_text(encoding="utf-8")
    start = html.index("bd-docs-nav")
    nav = html[start:html.index("</nav>", start)]
    order = [nav.index(f'href="../notebooks/{nb.stem}.html"')
             for nb in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))]
    assert order == sorted(order), "the sidebar lists the notebooks out of order"
    for page in ["glossary.html", "notation.html", "../README.zh-CN.html",
                 "../notebooks/exercises/README.html", "../notebooks/exercises/README.zh-CN.html"]:
        assert f'href="{page}"' in nav, f"{page} is not in the sidebar"


def test_the_search_finds_residual(checker, site):
    page = checker.page
    page.goto((site / "search.html").as_uri() + "?q=residual")
    page.wait_for_selector("#search-results li a", timeout=30_000)
    found = page.eval_on_selector_all("#search-results li a", "as => as.map(a => a.href)")
    assert checker.problems == []
    assert any("05_acceptance_rejection.html" in href for href in found), found
