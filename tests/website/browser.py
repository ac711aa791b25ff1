"""The course website seen in a real browser: Debian's chromium, headless, driven by Playwright
(no browser download), with every request that is not a file: URL blocked, as when the site is
opened from disk with the network off.

`Checker.check` opens one page and returns what is wrong with it, in words: console errors,
script errors, failed or blocked requests, images with no width, formulas left as raw TeX,
links to a file or an anchor that is not there. The tests (test_site_browser.py) run it over
every page of site/, and over small pages made to break each rule.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

CHROMIUM = "/usr/bin/chromium"  # Debian's package (`make browser` installs it)
# without these flags chromium tries to reach Google's servers at start-up, and hangs offline
# (tests/install/test_jupyterlab.py starts it with these alone: its page talks to 127.0.0.1)
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
# the resolver rule makes sure that nothing but file: can load, whatever the page asks for
CHROMIUM_ARGS = [*CHROMIUM_FLAGS, "--host-resolver-rules=MAP * ~NOTFOUND"]

# TeX that MathJax should have typeset: $…$, $$…$$, \(…\), \[…\] (code and rendered math are
# taken out of the text first, so `$OUT` in a shell line is not one)
RAW_MATH = re.compile(r"\$\$|\$[^\s$][^$\n]{0,200}?\$|\\\(|\\\[")

# the page's text without code, scripts or typeset math; its images once loaded (lazy ones
# too); its links as the browser resolves them; the facts the site's tests ask about
PAGE_FACTS_JS = """async () => {
  if (window.MathJax && window.MathJax.startup && window.MathJax.startup.promise) {
    await window.MathJax.startup.promise;
  }
  const images = [...document.images];
  images.forEach(img => { img.loading = "eager"; });
  await Promise.all(images.map(img => img.complete ? null :
      new Promise(done => {
        img.addEventListener("load", done);
        img.addEventListener("error", done);
      })));
  const body = document.body.cloneNode(true);
  body.querySelectorAll("pre, code, script, style, textarea, mjx-container, .highlight")
      .forEach(e => e.remove());
  return {
    text: body.textContent,
    brokenImages: images.filter(img => img.naturalWidth === 0)
        .map(img => img.getAttribute("src")),
    images: images.length,
    links: [...document.querySelectorAll("a[href]")].map(a => a.href),
    formulas: document.querySelectorAll(".math").length,
    untypeset: [...document.querySelectorAll(".math")]
        .filter(e => !e.querySelector("mjx-container")).map(e => e.textContent.slice(0, 60)),
    searchBox: document.querySelectorAll('form[action$="search.html"] input[name="q"]').length,
    highlighted: document.querySelectorAll("div.highlight pre span[class]").length,
    title: document.title,
  };
}"""


@dataclass
class PageCheck:
    url: str
    problems: list[str] = field(default_factory=list)
    facts: dict = field(default_factory=dict)


def chromium_missing_reason() -> str | None:
    """Why the browser test cannot run here, or None."""
    if not Path(CHROMIUM).exists() and not shutil.which("chromium"):
        return "no chromium: `make browser` installs Debian's package (apt-get, as root)"
    try:
        import playwright  # noqa: F401
    except ImportError:
        return "no playwright: `make test` installs it (the dev extra)"
    return None


def require_chromium(what: str) -> None:
    """Skip the calling test where chromium or Playwright is missing, but fail it in CI
    (CI=true), where a skipped browser test would hide that nothing was checked."""
    import pytest

    reason = chromium_missing_reason()
    if reason and os.environ.get("CI") == "true":
        pytest.fail(f"{what} cannot run in CI: {reason}")
    if reason:
        pytest.skip(reason)


def launch(playwright):
    """Debian's chromium, headless (Playwright's own browser builds are never downloaded)."""
    return playwright.chromium.launch(executable_path=shutil.which("chromium") or CHROMIUM,
                                      args=CHROMIUM_ARGS)


class Checker:
    """One browser tab that opens pages from disk, every request that is not file: aborted
    (and recorded). A tab, not one per page: opening a tab costs what checking a page does."""

    def __init__(self, browser):
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.route("**/*", self._only_files)
        self.problems: list[str] = []  # of the page being checked
        self.page = self.context.new_page()
        self.page.on("console", lambda m: m.type == "error"
                     and self.problems.append(f"console error: {m.text}"))
        self.page.on("pageerror", lambda e: self.problems.append(f"script error: {e}"))
        self.page.on("requestfailed", lambda r: self.problems.append(
            f"request failed: {r.url} ({r.failure})"))

    def _only_files(self, route) -> None:
        if route.request.url.startswith("file:"):
            route.continue_()
        else:
            self.problems.append(f"blocked request to the network: {route.request.url}")
            route.abort()

    def close(self) -> None:
        self.context.close()

    def check(self, path: Path) -> PageCheck:
        """Open one page from disk; every problem it shows, in words."""
        check = PageCheck(path.as_uri())
        self.problems.clear()
        page = self.page
        page.goto(check.url, wait_until="load", timeout=30_000)
        redirect = re.search(r'http-equiv="refresh" content="0; url=([^"]+)"', path.read_text())
        if redirect:  # site/index.html: the course map is docs/index.html
            page.wait_for_url((path.parent / redirect.group(1)).as_uri(), timeout=30_000)
        facts = page.evaluate(PAGE_FACTS_JS)
        page.goto("about:blank")  # what the page still had to say is said now, not on the next
        check.problems = problems = list(self.problems)
        problems += [f"image with no width: {src}" for src in facts.pop("brokenImages")]
        problems += [f"formula not typeset: {tex!r}" for tex in facts.pop("untypeset")]
        text = facts.pop("text")
        problems += [f"raw TeX in the text: {m.group(0)!r} in "
                     f"{text[max(0, m.start() - 30):m.end() + 30]!r}"
                     for m in RAW_MATH.finditer(text)]
        links = facts.pop("links")
        problems += sorted({p for p in map(dead_link, links) if p})
        facts["links"] = [h for h in links if h.startswith("file:")]
        check.facts = facts
        return check


@cache
def anchors_of(path: Path) -> frozenset[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    return frozenset(re.findall(r'\b(?:id|name)="([^"]+)"', text))


def dead_link(href: str) -> str | None:
    """What is wrong with a link, or None. Only file: links are the site's own; a link to
    the web (a paper, an issue) is not followed."""
    parts = urlsplit(href)
    if parts.scheme != "file":
        return None
    path = Path(unquote(parts.path))
    if not path.exists():
        return f"dead link: {href}"
    if path.is_dir():
        return f"link to a folder (a browser lists it; the site needs a page): {href}"
    fragment = unquote(parts.fragment)
    if fragment and path.suffix == ".html" and fragment not in anchors_of(path):
        return f"dead anchor: {href}"
    return None
