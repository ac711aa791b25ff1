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
    lookup = core.LookupDrafter(target.n_vocab, target.config.n_ctx)
    if name == "lookup":
        return lookup
    return core.HybridDrafter(lookup, core.ModelDrafter(draft, min_confidence))
