"""One real round of speculative decoding, step by step: draft, verify, settle each position,
commit and roll back (notebook 06, docs/algorithm.md "One round, step by step").

The round is a real one: `speculative_generate` on a pair, with `trace=True`. The trace holds
every row and verdict but not the uniforms that verify drew, so the run's verify is the
reference's own, wrapped to keep the generator's state as verify starts (`VerifyRecorder`).
`replay_verify` draws the same uniforms again from a copy of that state, in verify's order --
per position one u for the accept test, then one u for the residual (or bonus) draw -- and
refuses to go on unless its decisions are the round's (accepted count and token).

    explored = explore_round(target, draft, prompt, k=4, seed=7)   # {"meta": ..., "steps": ...}
    page_html(explored)          # a self-contained page: inline script, no network, no kernel
    show_round(explored)         # in a notebook: a widget in JupyterLab, else that page

`round_steps` is the pure core: a RoundTrace and its replayed draws -> a JSON-able list of
steps, each with what the page shows at that step (values, verdicts, both caches' pointers).
The page and the widget run the same script (EXPLORER_JS) over the same list.
"""

from __future__ import annotations

import copy
import html
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from reference.drafters import ModelDrafter
from reference.model import GPT
from reference.records import RoundTrace
from reference.sampling import SamplingParams
from reference.speculative import speculative_generate
from reference.tokenizer import EOS, decode, encode, token_text
from reference.verification import acceptance_probability, residual_distribution, verify
from specdec.bundled import load_bundled_pair

TOP = 5  # entries of the residual (or bonus row) listed
# notebook 06's run of the bundled pair (a code prompt of the kind it was trained on); the
# page shows its first round that accepts drafts and rejects one, as the notebook does
BUNDLED_PROMPT = "class Stack:\n    def push(self, item):\n        "
BUNDLED = dict(k=4, seed=7, temperature=0.8, max_new_tokens=60)


class VerifyRecorder:
    """A `verify_fn` for `speculative_generate`: the reference's verify, which first keeps a
    copy of the generator's state. Same draws, same verdicts as the loop's own verify: only
    the states are added (one per round, in order)."""

    def __init__(self) -> None:
        self.states: list[dict] = []

    def __call__(self, p_target, q_draft, draft_tokens, rng: np.random.Generator):
        self.states.append(copy.deepcopy(rng.bit_generator.state))
        return verify(p_target, q_draft, draft_tokens, rng)


def generator_at(state: dict) -> np.random.Generator:
    """A fresh generator in a saved state (the state's own bit generator, e.g. PCG64)."""
    bit_generator = getattr(np.random, state["bit_generator"])()
    bit_generator.state = copy.deepcopy(state)
    return np.random.Generator(bit_generator)


@dataclass(frozen=True)
class Draws:
    """What verify drew in one round, replayed: the accept-test uniform of each examined
    position, then the uniform of the last draw (residual after a rejection, else bonus)."""

    accept_u: list[float]  # [examined]
    accepted: int
    token: int
    token_u: float  # in [0, 1): the token is the first id whose CDF exceeds token_u * mass
    token_row: np.ndarray  # [V] float64: the residual norm(max(0, p - q)), or the bonus row


def replay_verify(r: RoundTrace, state: dict) -> Draws:
    """verify's decisions drawn again from `state` (its generator as verify started), read in
    verify's order (reference/verification.py); raises if they are not the round's."""
    rng = generator_at(state)
    p, q, tokens = r.p_rows, r.q_rows, r.draft_tokens
    accept_u: list[float] = []
    for i, x in enumerate(tokens):
        u = float(rng.random())  # accepts(): u < min(1, p/q)
        accept_u.append(u)
        if not u < acceptance_probability(p[i, x], q[i, x]):
            return checked(r, Draws(accept_u, i, *cdf_draw(residual_distribution(p[i], q[i]), rng)))
    bonus = p[len(tokens)].astype(np.float64)
    return checked(r, Draws(accept_u, len(tokens), *cdf_draw(bonus, rng)))


def cdf_draw(row: np.ndarray, rng: np.random.Generator) -> tuple[int, float, np.ndarray]:
    # row [V] -> (token, u, row): sample_token's draw (reference/sampling.py draw_from_cdf)
    cdf = np.cumsum(row, dtype=np.float64)
    u = float(rng.random())
    token = int(min(np.searchsorted(cdf, u * cdf[-1], side="right"), len(cdf) - 1))
    return token, u, row


def checked(r: RoundTrace, d: Draws) -> Draws:
    if (d.accepted, d.token) != (r.accepted, r.token):
        raise ValueError(
            f"the replayed uniforms give accepted={d.accepted}, token={d.token}, but the round "
            f"had accepted={r.accepted}, token={r.token}: the state is not the one its verify "
            f"started from (record it with VerifyRecorder)"
        )
    return d


def top_entries(row: np.ndarray, show: Callable[[int], str], n: int = TOP) -> list[dict]:
    # row [V] -> its n largest entries, largest first
    ids = np.argsort(-row, kind="stable")[:n]
    return [{"token": int(i), "text": show(int(i)), "prob": float(row[i])} for i in ids]


def pointers(target: tuple[int, int], draft: tuple[int, int] | None) -> dict:
    # (committed, end) of each cache: slots [0, committed) kept, [committed, end) temporary
    out = {"target": {"committed": target[0], "end": target[1]}}
    out["draft"] = None if draft is None else {"committed": draft[0], "end": draft[1]}
    return out


def round_steps(r: RoundTrace, draws: Draws, show: Callable[[int], str] = token_text) -> list:
    """A RoundTrace and its replayed draws -> the steps of the round, JSON-able: start, draft,
    verify (the one target pass), one step per examined position, the bonus if every draft
    was accepted, commit, rollback. Each step carries both caches' pointers after it."""
    k = len(r.draft_tokens)
    t0, t1, t2 = r.target_cache
    d0, d1, d2 = r.draft_cache or (0, 0, 0)
    has_draft = r.draft_cache is not None

    def ptr(target, draft):
        return pointers(target, draft if has_draft else None)

    p_x, q_x, a_x = r.p_of_drafts, r.q_of_drafts, r.acceptance_probabilities
    steps = [
        {
            "kind": "start",
            "title": "Start of the round",
            "text": f"{r.context_len} committed tokens; the target has cached {t0} of them, "
            f"the draft model {d0}. The rest is fed this round (the catch-up).",
            **ptr((t0, t0), (d0, d0)),
        },
        {
            "kind": "draft",
            "title": f"Draft: {k} tokens from q",
            "text": "The draft model proposes x1..xk one after another, each sampled from its "
            "row q_i; its cache writes temporary slots.",
            "drafts": [
                {"token": int(x), "text": show(int(x)), "q": float(q_x[i])}
                for i, x in enumerate(r.draft_tokens)
            ],
            **ptr((t0, t0), (d0, d1)),
        },
        {
            "kind": "verify",
            "title": "Verify: one target pass",
            "text": f"One target forward over the catch-up tokens and the {k} drafts gives the "
            f"{k + 1} rows p_1..p_{k + 1}; its cache writes temporary slots.",
            "p": [float(v) for v in p_x],
            "a": [float(v) for v in a_x],
            **ptr((t0, t1), (d0, d1)),
        },
    ]
    for i, u in enumerate(draws.accept_u):
        accept = i < draws.accepted
        x = int(r.draft_tokens[i])
        rule = f"u = {u:.4f} {'<' if accept else '>='} min(1, p/q) = {a_x[i]:.4f}: " + (
            "accepted."
            if accept
            else "rejected. The drafts after it are never "
            "examined; the token comes from the residual norm(max(0, p - q)) instead "
            "(its CDF, in id order, inverted at a second uniform)."
        )
        step = {
            "kind": "position",
            "title": f"Position {i + 1}: x{i + 1} = {show(x)!r}",
            "text": f"Accept x{i + 1} with probability min(1, p(x)/q(x)), by one fresh "
            f"uniform u. {rule}",
            "i": i,
            "token": x,
            "token_text": show(x),
            "p": float(p_x[i]),
            "q": float(q_x[i]),
            "a": float(a_x[i]),
            "u": u,
            "verdict": "accept" if accept else "reject",
            **ptr((t0, t1), (d0, d1)),
        }
        if not accept:
            step["residual"] = top_entries(draws.token_row, show)
            step["drawn"] = {"token": draws.token, "text": show(draws.token), "u": draws.token_u}
            step["never_examined"] = list(range(i + 1, k))
        steps.append(step)
    if draws.accepted == k:
        steps.append(
            {
                "kind": "bonus",
                "title": "Bonus: every draft accepted",
                "text": f"All {k} drafts accepted: one more token from the bonus row "
                f"p_{k + 1} (its CDF, in id order, inverted at a uniform): the "
                f"verification pass computed that row anyway.",
                "row": top_entries(draws.token_row, show),
                "drawn": {"token": draws.token, "text": show(draws.token), "u": draws.token_u},
                **ptr((t0, t1), (d0, d1)),
            }
        )
    steps += [
        {
            "kind": "commit",
            "title": f"Commit: keep {draws.accepted} accepted drafts",
            "text": f"commit() moves each cache's committed pointer over the catch-up tokens and "
            f"the accepted drafts: the target's to {t2}, the draft's to {d2}.",
            "emitted": [{"token": int(t), "text": show(int(t))} for t in r.emitted],
            **ptr((t2, t1), (d2, d1)),
        },
        {
            "kind": "rollback",
            "title": "Roll back the rest",
            "text": "rollback() drops the temporary slots left: a pointer moves, nothing is "
            f"copied. The new token {show(r.token)!r} has no K/V yet: the next round "
            "feeds it first.",
            **ptr((t2, t2), (d2, d2)),
        },
    ]
    return steps


def explore_round(
    target: GPT,
    draft: GPT,
    prompt: str = BUNDLED_PROMPT,
    *,
    k: int = BUNDLED["k"],
    seed: int = BUNDLED["seed"],
    temperature: float = BUNDLED["temperature"],
    max_new_tokens: int = BUNDLED["max_new_tokens"],
    round_index: int | None = None,
) -> dict:
    """Run the pair (ModelDrafter, byte-level text) with a recording verify and return one
    round as {"meta": ..., "steps": round_steps(...)}. round_index None: the first round
    that accepts some drafts and rejects one (both kinds of verdict and a residual)."""
    recorder = VerifyRecorder()
    sampling = SamplingParams(temperature=temperature)
    ids = encode(prompt)
    result = speculative_generate(
        target,
        ModelDrafter(draft),
        ids,
        k=k,
        max_new_tokens=max_new_tokens,
        rng=np.random.default_rng(seed),
        sampling=sampling,
        eos_id=EOS,
        trace=True,
        verify_fn=recorder,
    )
    trace = result.trace
    if round_index is None:
        mixed = [n for n, r in enumerate(trace) if 0 < r.accepted < len(r.draft_tokens)]
        round_index = mixed[0] if mixed else 0
    r = trace[round_index]
    draws = replay_verify(r, recorder.states[round_index])
    context = np.concatenate([ids, np.asarray(result.tokens, dtype=np.int64)])[: r.context_len]
    meta = {
        "round": round_index + 1,
        "rounds": len(trace),
        "k": len(r.draft_tokens),
        "seed": seed,
        "temperature": temperature,
        "prompt": prompt,
        "context": decode(context),
        "context_len": r.context_len,
        "accepted": r.accepted,
        "token": r.token,
        "token_kind": r.token_kind,
    }
    return {"meta": meta, "steps": round_steps(r, draws)}


def bundled_round() -> dict:
    """The round the static page and notebook 06 show: the bundled pair, BUNDLED settings."""
    return explore_round(*load_bundled_pair())


# --- the view: one script for the static page and the widget --------------------------------

EXPLORER_CSS = """
.sd-round { font: 14px/1.4 system-ui, sans-serif; max-width: 60em; color: #222; }
.sd-round h3 { margin: 0.3em 0; }
.sd-round .controls button { margin-right: 0.4em; padding: 0.3em 0.8em; }
.sd-round table { border-collapse: collapse; margin: 0.6em 0; }
.sd-round td, .sd-round th { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: right; }
.sd-round tr.current { outline: 2px solid #1f77b4; }
.sd-round .accept { color: #1a7f37; font-weight: bold; }
.sd-round .reject { color: #c62828; font-weight: bold; }
.sd-round .never { color: #888; }
.sd-round pre { background: #f4f4f4; padding: 0.4em; white-space: pre-wrap; }
.sd-round .cache { font-family: monospace; margin: 0.2em 0; }
.sd-round .slot { display: inline-block; width: 0.6em; height: 1em; margin-right: 1px; }
.sd-round .kept { background: #999; } .sd-round .temp { background: #f0a030; }
"""

# mountRound(el, data): the whole view, drawn again from data.steps[s] on every click
EXPLORER_JS = r"""
function mountRound(el, data) {
  const steps = data.steps, meta = data.meta;
  const k = steps[1].drafts.length;
  let s = 0;
  const fmt = x => (x === null || x === undefined) ? "" : x.toFixed(4);
  const esc = t => String(t).replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;",
                                                        ">": "&gt;", '"': "&quot;"})[c]);
  const next = {draft: "Draft", verify: "Verify (one target pass)", position: "Settle position",
                bonus: "Draw the bonus", commit: "Commit", rollback: "Roll back"};
  el.innerHTML = `<div class="sd-round">
    <h3>Round ${meta.round} of ${meta.rounds} (k = ${meta.k}, temperature ${meta.temperature},
      seed ${meta.seed})</h3>
    <pre class="context"></pre>
    <div class="controls"><button class="back">Back</button><button class="next"></button>
      <button class="restart">Restart</button> <span class="where"></span></div>
    <h3 class="step-title"></h3><p class="step-text"></p>
    <div class="caches"></div>
    <table><thead><tr><th>i</th><th>x_i</th><th>q(x)</th><th>p(x)</th><th>min(1, p/q)</th>
      <th>u</th><th>verdict</th></tr></thead><tbody></tbody></table>
    <div class="draw"></div></div>`;
  const $ = sel => el.querySelector(sel);
  $(".context").textContent = meta.context;
  $("tbody").innerHTML = [...Array(k).keys()].map(i => `<tr data-pos="${i}">
    <td>${i + 1}</td>` + ["text", "q", "p", "a", "u", "verdict"].map(f =>
    `<td data-field="${f}"></td>`).join("") + "</tr>").join("");
  function cell(i, f, value, shown) {
    const td = el.querySelector(`tr[data-pos="${i}"] td[data-field="${f}"]`);
    td.textContent = shown === undefined ? fmt(value) : shown;
    if (value === null) td.removeAttribute("data-value");
    else td.setAttribute("data-value", JSON.stringify(value));
    td.className = f === "verdict" ? (shown === "accept" ? "accept" :
        shown === "reject" ? "reject" : shown ? "never" : "") : "";
  }
  function table(rows) {
    return "<table><tr><th>token</th><th>probability</th></tr>" + rows.map(e =>
      `<tr><td>${esc(JSON.stringify(e.text))}</td><td>${fmt(e.prob)}</td></tr>`).join("") +
      "</table>";
  }
  function cache(name, ptr) {
    if (!ptr) return "";
    const slots = [...Array(ptr.end).keys()].map(j =>
      `<span class="slot ${j < ptr.committed ? "kept" : "temp"}"></span>`).join("");
    return `<div class="cache" data-cache="${name}">${name} cache: committed
      <b class="committed">${ptr.committed}</b> end <b class="end">${ptr.end}</b>
      <br>${slots}</div>`;
  }
  function draw() {
    const step = steps[s];
    $(".step-title").textContent = step.title;
    $(".step-title").setAttribute("data-kind", step.kind);
    $(".step-text").textContent = step.text;
    $(".where").textContent = `step ${s + 1} of ${steps.length}`;
    $(".back").disabled = s === 0;
    $(".next").disabled = s === steps.length - 1;
    const up = steps[s + 1];
    $(".next").textContent = up ? next[up.kind] + (up.kind === "position" ? ` ${up.i + 1}` : "")
                                : "End of the round";
    for (let i = 0; i < k; i++) {
      const shown = s >= 1, scored = s >= 2;
      cell(i, "text", shown ? steps[1].drafts[i].token : null,
           shown ? JSON.stringify(steps[1].drafts[i].text) : "");
      cell(i, "q", shown ? steps[1].drafts[i].q : null);
      cell(i, "p", scored ? steps[2].p[i] : null);
      cell(i, "a", scored ? steps[2].a[i] : null);
      const settled = steps.slice(0, s + 1).find(t => t.kind === "position" && t.i === i);
      const skipped = steps.slice(0, s + 1).some(t => (t.never_examined || []).includes(i));
      cell(i, "u", settled ? settled.u : null);
      cell(i, "verdict", settled ? settled.verdict : null,
           settled ? settled.verdict : skipped ? "never examined" : "");
      el.querySelector(`tr[data-pos="${i}"]`).className =
        step.kind === "position" && step.i === i ? "current" : "";
    }
    const last = steps.slice(0, s + 1).find(t => t.drawn);
    $(".draw").innerHTML = !last ? "" :
      (last.kind === "bonus" ? "<h3>Bonus row p_k+1, top entries</h3>" + table(last.row)
       : "<h3>Residual norm(max(0, p - q)), top entries</h3>" + table(last.residual)) +
      `<p class="drawn" data-token="${last.drawn.token}" data-u="${last.drawn.u}">drawn with
       u = ${fmt(last.drawn.u)}: <b>${esc(JSON.stringify(last.drawn.text))}</b></p>`;
    if (step.emitted) $(".draw").innerHTML += "<p class='emitted'>emitted this round: " +
      esc(JSON.stringify(step.emitted.map(e => e.text).join(""))) + "</p>";
    $(".caches").innerHTML = cache("target", step.target) + cache("draft", step.draft) +
      '<div class="legend">one box per slot: <span class="slot kept"></span> committed, ' +
      '<span class="slot temp"></span> written this round, not committed (yet)</div>';
  }
  $(".next").onclick = () => { if (s < steps.length - 1) { s++; draw(); } };
  $(".back").onclick = () => { if (s > 0) { s--; draw(); } };
  $(".restart").onclick = () => { s = 0; draw(); };
  draw();
}
"""


def page_html(explored: dict) -> str:
    """A self-contained page: the steps as JSON and the script inline, nothing loaded."""
    data = json.dumps(explored, ensure_ascii=True).replace("</", "<\\/")
    meta = explored["meta"]
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>One round, step by step (round {meta["round"]})</title>
<style>{EXPLORER_CSS}</style></head>
<body>
<h1>One round of speculative decoding, step by step</h1>
<p>A real round of the bundled target/draft pair ({html.escape(meta["token_kind"])} round:
{meta["accepted"]} of {meta["k"]} drafts accepted). Click <b>Next</b> to draft, verify, settle
each position with its uniform u, then commit and roll back both caches.</p>
<div id="round"></div>
<script type="application/json" id="round-data">{data}</script>
<script>{EXPLORER_JS}
mountRound(document.getElementById("round"),
           JSON.parse(document.getElementById("round-data").textContent));
</script>
</body></html>
"""


def explorer_widget(explored: dict):
    """The same view as an anywidget (JupyterLab); ImportError with the way out if missing."""
    return widget_class()(data=explored)


@cache
def widget_class():
    # one class per process (defined on first use: anywidget is an optional dependency)
    try:
        import anywidget
        import traitlets
    except ImportError as e:
        raise ImportError(
            "the round explorer widget needs anywidget: pip install 'specdec-lab[notebook]' "
            "(or show the static page: show_round(explored, widget=False))"
        ) from e

    class RoundExplorer(anywidget.AnyWidget):
        _esm = (
            EXPLORER_JS + "\nexport default { render({ model, el }) "
            "{ mountRound(el, model.get('data')); } };\n"
        )
        _css = EXPLORER_CSS
        data = traitlets.Dict().tag(sync=True)

    return RoundExplorer


def show_round(explored: dict, widget: bool | None = None):
    """What a notebook cell displays: the widget where a Jupyter server runs the kernel
    (JupyterLab sets JPY_SESSION_NAME) and anywidget is installed; otherwise the static page
    in an iframe, which needs no widget support (a headless run, the website, VS Code).
    widget True or False forces one of the two."""
    from IPython.display import HTML

    if widget is None:
        widget = bool(os.environ.get("JPY_SESSION_NAME")) and widget_available()
    if widget:
        return explorer_widget(explored)
    page = html.escape(page_html(explored), quote=True)
    return HTML(
        f'<div><iframe srcdoc="{page}" title="one round, step by step" '
        f'style="width: 100%; height: 900px; border: 1px solid #ccc"></iframe></div>'
    )


def widget_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("anywidget") is not None
