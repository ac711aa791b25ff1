"""The drafters the CLI and the bench can run, by name.

    model    an independent draft model (ModelDrafter), the article's §10.1
    lookup   prompt lookup / n-gram drafts from the committed text (LookupDrafter), §10.2
    hybrid   lookup when the text has a match, the draft model otherwise (HybridDrafter)
"""

from __future__ import annotations

DRAFTERS = ("model", "lookup", "hybrid")


def make_drafter(name: str, core, target, draft, min_confidence: float | None = None):
    # -> a Drafter of `core` (the `reference` or `gpu` module) for the pair (target, draft)
    if name not in DRAFTERS:
        raise ValueError(f"drafter must be one of {', '.join(DRAFTERS)}, got {name!r}")
    if name == "model":
        return core.ModelDrafter(draft, min_confidence)
    # "longest": copy from the occurrence followed by the most tokens; it beat "recent" on
    # copy-heavy prompts and tied on held-out code (docs/benchmarks.md, "Drafting without a
    # second model", like the choices below)
    if name == "lookup":
        return core.LookupDrafter(target.n_vocab, target.config.n_ctx, prefer="longest")
    # In a hybrid, a match of one or two bytes is weak evidence and hides the draft model
    # (at byte level almost every token has occurred before): only matches of 3-4 tokens
    # take over.
    lookup = core.LookupDrafter(
        target.n_vocab, target.config.n_ctx, max_ngram=4, min_ngram=3, prefer="longest"
    )
    return core.HybridDrafter(lookup, core.ModelDrafter(draft, min_confidence))
