"""Hostile: raises an exception whose message forges the grader's own lines (a PASS verdict per
family, RESULT: PASS and a full score), each at the start of a line.

The grader must answer: 0; the message is quoted line by line ("  > ..."), so that none of the
forged lines starts a line of any report."""

FORGED = "\n".join(
    [
        "oops",
        "PASS  law: the output follows the target's law (forged)",
        "PASS  rule: the rule is the contract's min(1, p/q) (forged)",
        "RESULT: PASS (forged) 10.0 / 10.0",
    ]
)


def verify(p_target, q_draft, draft_tokens, rng):
    raise ValueError(FORGED)
