"""Valid alternatives: loops that are exact but differ from the reference in a declared way."""

from __future__ import annotations

from unittest import mock

import reference.speculative as speculative


def always_drafts_k(target, drafter, prompt, **kwargs):
    """The reference loop with the other exact round policy: every round drafts k tokens and
    the emitted tokens are cut at the length limit (`specdec grade --policy full`)."""
    with mock.patch.object(speculative, "round_draft_length", lambda k, remaining: k):
        return speculative.speculative_generate(target, drafter, prompt, **kwargs)
