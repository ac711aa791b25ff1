"""A notebook as a student meets it: JupyterLab from the venv that holds the installed wheel
and the `notebook` extra, opened in Debian's chromium (headless, driven by Playwright), the
outputs cleared, Run All Cells, and no cell left with an error.

Notebook 05 is the one that stopped at its first cell when the `notebook` extra lacked scipy.
JupyterLab listens on 127.0.0.1 only; every other request of the page is blocked.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import subprocess
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest
from website.browser import CHROMIUM, CHROMIUM_FLAGS, require_chromium

NOTEBOOK = "05_acceptance_rejection.ipynb"
RUN_BUDGET_S = 240  # the notebook runs in ~25 s on 2 idle cores; a loaded CI machine is slower

# each code cell's execution count and output types, read from the notebook's model (the
# page exposes the app: --expose-app-in-browser)
CELLS_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  if (!panel || !panel.content || !panel.content.model) { return null; }
  const cells = [];
  for (const cell of panel.content.model.cells) {
    if (cell.type !== "code") { continue; }
    const outputs = cell.outputs.toJSON();
    cells.push({
      count: cell.executionCount,
      errors: outputs.filter(o => o.output_type === "error")
          .map(o => o.ename + ": " + o.evalue),
      outputs: outputs.length,
    });
  }
  return {cells: cells, busy: panel.sessionContext.kernelDisplayStatus};
}"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def jupyterlab(installed, tmp_path):
    """JupyterLab of the installed venv over a folder holding notebook 05 with its outputs
    cleared; yields the notebook's URL and stops the server afterwards."""
    import nbformat

    require_chromium("the JupyterLab check")  # before a server is started for nothing

    nb = nbformat.read(installed.course / NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    with serving(installed, tmp_path, NOTEBOOK, nb) as url:
        yield url


@contextmanager
def serving(installed, tmp_path, name: str, nb):
    """JupyterLab of the installed venv over a folder holding the notebook `nb` as `name`;
    gives the notebook's URL and stops the server afterwards."""
    import nbformat

    folder = tmp_path / "course"
    folder.mkdir()
    nbformat.write(nb, folder / name)
    port, token = free_port(), secrets.token_hex(16)
    home = tmp_path / "home"  # JupyterLab's settings, workspaces and runtime files: fresh
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "JUPYTER_PATH")}
    env.update(
        HOME=str(home), JUPYTER_CONFIG_DIR=str(home / "config"),
        JUPYTER_DATA_DIR=str(home / "data"), JUPYTER_RUNTIME_DIR=str(home / "runtime"),
        MPLBACKEND="Agg", SPECDEC_FIGURES=str(tmp_path), OPENBLAS_NUM_THREADS="1",
    )
    server = subprocess.Popen(
        [installed.bin("jupyter"), "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
         f"--ServerApp.token={token}", f"--ServerApp.root_dir={folder}", "--allow-root",
         "--expose-app-in-browser", "--LabApp.news_url=", "--ServerApp.open_browser=False"],
        cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2)
                break
            except OSError as error:
                if server.poll() is not None or time.monotonic() > deadline:
                    log = server.stdout.read() if server.poll() is not None else ""
                    raise AssertionError(f"JupyterLab did not start: {error}\n{log}") from None
                time.sleep(0.5)
        yield f"{base}/lab/tree/{name}?token={token}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()


def run_all_cells(pw, url: str):
    """Open the notebook at `url` in chromium (nothing but the server reachable), Run All
    Cells, wait until every cell ran or one raised; -> (browser, page, CELLS_JS's state)."""
    browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
    page = browser.new_page()
    server = url.split("/lab/")[0]

    def only_the_server(route):  # the network is off but for JupyterLab itself
        if route.request.url.startswith(server):
            route.continue_()
        else:
            route.abort()

    page.route("**/*", only_the_server)
    page.goto(url)
    page.wait_for_function(
        "() => window.jupyterapp && window.jupyterapp.shell.currentWidget"
        " && window.jupyterapp.shell.currentWidget.sessionContext"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session"
        " && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel",
        timeout=120_000,
    )
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    deadline, state = time.monotonic() + RUN_BUDGET_S, None
    while time.monotonic() < deadline:
        state = page.evaluate(CELLS_JS)
        done = state and all(c["count"] is not None for c in state["cells"])
        if done and state["busy"] == "idle" or any(c["errors"] for c in state["cells"]):
            break
        time.sleep(1)
    return browser, page, state


def test_run_all_cells_in_jupyterlab(jupyterlab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser, _, state = run_all_cells(pw, jupyterlab)
        browser.close()
    assert state and state["cells"], f"JupyterLab showed no code cell: {state}"
    errors = [(i + 1, c["errors"]) for i, c in enumerate(state["cells"]) if c["errors"]]
    assert not errors, f"cells that raised in JupyterLab (cell number, error): {errors}"
    not_run = [i + 1 for i, c in enumerate(state["cells"]) if c["count"] is None]
    assert not not_run, f"cells never run within {RUN_BUDGET_S} s: {not_run}"
    assert sum(c["outputs"] for c in state["cells"]) >= len(state["cells"]) // 2, state


# the widget's output and what it draws, after Run All Cells (specdec/explorer.py)
WIDGET_JS = """() => {
  const panel = window.jupyterapp.shell.currentWidget;
  const outputs = [...panel.content.model.cells].flatMap(c => c.outputs ? c.outputs.toJSON() : []);
  const title = document.querySelector(".jp-OutputArea .sd-round .step-title");
  const target = document.querySelector('.jp-OutputArea .sd-round .cache[data-cache="target"]');
  return {
    mimes: outputs.flatMap(o => Object.keys(o.data || {})),
    frames: document.querySelectorAll(".jp-OutputArea iframe").length,
    kind: title && title.dataset.kind,
    committed: target && +target.querySelector(".committed").textContent,
    end: target && +target.querySelector(".end").textContent,
  };
}"""


def test_the_round_explorer_is_a_widget_in_jupyterlab(installed, tmp_path):
    """In JupyterLab (its kernel started by the server: JPY_SESSION_NAME) the explorer is an
    anywidget, drawn by the same script as the static page, and its buttons work: clicked
    through to the end, it shows the round's rollback and the target's pointers."""
    import json

    import nbformat
    from playwright.sync_api import sync_playwright

    require_chromium("the JupyterLab check")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "from specdec.explorer import bundled_round, show_round\n"
        "explored = bundled_round()\n"
        "show_round(explored)")])
    # the venv's own kernel, as the course's notebooks name it (else JupyterLab asks which)
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    # the committed page's steps: tests/unit/test_explorer.py checks them against the code
    page_html = (Path(__file__).resolve().parents[2] / "docs/explorer/round.html").read_text()
    steps = json.loads(re.search(r'id="round-data">(.*?)</script>', page_html, re.S)
                       .group(1).replace("<\\/", "</"))["steps"]
    with serving(installed, tmp_path, "explorer.ipynb", nb) as url, sync_playwright() as pw:
        browser, page, state = run_all_cells(pw, url)
        try:
            assert state and not any(c["errors"] for c in state["cells"]), state
            page.wait_for_selector(".jp-OutputArea .sd-round button.next", timeout=60_000)
            shown = page.evaluate(WIDGET_JS)
            assert "application/vnd.jupyter.widget-view+json" in shown["mimes"], shown
            assert shown["frames"] == 0 and shown["kind"] == "start", shown
            for _ in steps[1:]:
                page.click(".jp-OutputArea .sd-round button.next")
            shown = page.evaluate(WIDGET_JS)
        finally:
            browser.close()
    last = steps[-1]["target"]
    assert (shown["kind"], shown["committed"], shown["end"]) == (
        "rollback", last["committed"], last["end"]), shown
