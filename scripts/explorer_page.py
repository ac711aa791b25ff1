"""Write the round explorer's static page (specdec/explorer.py): one real round of the bundled
pair, step by step, as a self-contained HTML file (inline script and data, no network).

    python scripts/explorer_page.py [OUT]     # default: docs/explorer/round.html

The committed page is checked against the code by tests/unit/test_explorer.py: rerun this
after changing specdec/explorer.py or the bundled pair.
"""

from __future__ import annotations

import sys
from pathlib import Path

from specdec.explorer import bundled_round, page_html

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "explorer" / "round.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    explored = bundled_round()
    out.write_text(page_html(explored), encoding="utf-8")
    meta = explored["meta"]
    print(
        f"round {meta['round']} of {meta['rounds']}: {meta['accepted']} of {meta['k']} "
        f"accepted, {len(explored['steps'])} steps -> {out}"
    )
