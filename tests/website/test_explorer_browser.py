"""The round explorer's static page (docs/explorer/round.html, specdec/explorer.py) in a real
browser: Debian's chromium, headless, from disk, nothing but file: allowed (browser.py).

One click at a time through the whole round -- draft, verify, each position, the residual or
bonus, commit, rollback, then back to the start -- and at every step what the page shows
equals the steps embedded in it: each position's u, min(1, p/q), p, q and verdict, the drawn
token and its u, both caches' pointers. tests/unit/test_explorer.py checks those steps against
the round itself. Without chromium these tests are skipped, except in CI (CI=true), where
they fail (browser.require_chromium).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .browser import Checker, launch, require_chromium

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "explorer" / "round.html"


@pytest.fixture(scope="module")
def checker():
    require_chromium("the round explorer's browser test")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = launch(playwright)
        tab = Checker(chromium)
        yield tab
        tab.close()
        chromium.close()


def embedded(page) -> dict:
    return json.loads(page.text_content("#round-data"))


def shown(page) -> dict:
    """What the page shows now: the step's kind, each row's cells (text and data-value), the
    pointers, the drawn token."""
    return page.evaluate("""() => {
      const value = td => td.hasAttribute("data-value") ? JSON.parse(td.dataset.value) : null;
      const rows = [...document.querySelectorAll("tr[data-pos]")].map(tr =>
        Object.fromEntries([...tr.querySelectorAll("td[data-field]")].map(td =>
          [td.dataset.field, {text: td.textContent, value: value(td)}])));
      const cache = name => {
        const c = document.querySelector(`.cache[data-cache="${name}"]`);
        return c && {committed: +c.querySelector(".committed").textContent,
                     end: +c.querySelector(".end").textContent,
                     kept: c.querySelectorAll(".slot.kept").length,
                     slots: c.querySelectorAll(".slot").length};
      };
      const drawn = document.querySelector(".drawn");
      return {kind: document.querySelector(".step-title").dataset.kind, rows,
              target: cache("target"), draft: cache("draft"),
              drawn: drawn && {token: +drawn.dataset.token, u: +drawn.dataset.u},
              next: document.querySelector("button.next").textContent,
              nextDisabled: document.querySelector("button.next").disabled};
    }""")


def check_step(now: dict, steps: list, s: int) -> None:
    step = steps[s]
    assert now["kind"] == step["kind"], f"step {s}: shows {now['kind']}, expected {step['kind']}"
    for name in ("target", "draft"):
        ptr = step[name]
        assert now[name]["committed"] == ptr["committed"] and now[name]["end"] == ptr["end"], (
            f"step {s} ({step['kind']}): {name} cache shows {now[name]}, expected {ptr}"
        )
        # the slots drawn: [0, committed) kept, [committed, end) temporary
        assert (now[name]["kept"], now[name]["slots"]) == (ptr["committed"], ptr["end"])
    drafts, verify = steps[1]["drafts"], steps[2]
    settled = {t["i"]: t for t in steps[: s + 1] if t["kind"] == "position"}
    for i, row in enumerate(now["rows"]):
        if s >= 1:
            assert row["q"]["value"] == drafts[i]["q"]
            assert row["text"]["value"] == drafts[i]["token"]
            assert row["q"]["text"] == f"{drafts[i]['q']:.4f}"
        else:
            assert row["q"]["text"] == row["text"]["text"] == ""
        if s >= 2:  # the verification pass scored every draft
            assert row["p"]["value"] == verify["p"][i] and row["a"]["value"] == verify["a"][i]
            assert row["a"]["text"] == f"{verify['a'][i]:.4f}"
        else:
            assert row["p"]["text"] == row["a"]["text"] == ""
        if i in settled:
            t = settled[i]
            assert row["u"]["value"] == t["u"] and row["u"]["text"] == f"{t['u']:.4f}"
            assert row["verdict"]["text"] == t["verdict"]
            assert row["a"]["value"] == t["a"]
            # the verdict is the rule itself: accept iff u < min(1, p/q)
            assert (t["verdict"] == "accept") == (t["u"] < t["a"])
        else:
            assert row["u"]["text"] == ""
            never = any(i in t.get("never_examined", []) for t in settled.values())
            assert row["verdict"]["text"] == ("never examined" if never else "")
    drawn = next((t["drawn"] for t in steps[: s + 1] if "drawn" in t), None)
    assert now["drawn"] == (drawn and {"token": drawn["token"], "u": drawn["u"]})


def test_click_through_the_whole_round(checker):
    page = checker.page
    checker.problems.clear()
    page.goto(PAGE.as_uri(), wait_until="load")
    data = embedded(page)
    steps = data["steps"]
    kinds = [t["kind"] for t in steps]
    assert kinds[:3] == ["start", "draft", "verify"] and kinds[-2:] == ["commit", "rollback"]
    assert "position" in kinds
    labels = []
    for s in range(len(steps)):
        now = shown(page)
        check_step(now, steps, s)
        labels.append(now["next"])
        if s < len(steps) - 1:
            page.click("button.next")
    assert shown(page)["nextDisabled"]
    # the buttons say what comes: draft, verify, each position in turn, then commit, roll back
    positions = [f"Settle position {t['i'] + 1}" for t in steps if t["kind"] == "position"]
    bonus = ["Draw the bonus"] if "bonus" in kinds else []
    assert labels == [
        "Draft",
        "Verify (one target pass)",
        *positions,
        *bonus,
        "Commit",
        "Roll back",
        "End of the round",
    ], labels
    # back, one step at a time, to the start: every step shown again as it was
    for s in range(len(steps) - 1, 0, -1):
        page.click("button.back")
        check_step(shown(page), steps, s - 1)
    page.click("button.next")
    page.click("button.restart")
    check_step(shown(page), steps, 0)
    assert checker.problems == [], checker.problems


def test_the_page_passes_the_site_checks(checker):
    """No console or script error, nothing requested from the network, no dead link."""
    check = checker.check(PAGE)
    assert check.problems == []
