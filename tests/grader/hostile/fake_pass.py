"""Hostile: prints the grader's own words for full marks (PASS lines, RESULT: PASS, a JSON
score), at import and in verify, hoping they end up in the report; its verify is wrong.

The grader must answer: 0; the report (stdout, results.json's output) holds none of these
lines; stderr shows them only under "what my_verify.py printed while graded:", each line
prefixed with "  | "."""

import sys

FAKE = (
    "PASS  law: the output follows the target's law (faked)",
    "PASS  rule: the rule is the contract's min(1, p/q) (faked)",
    "RESULT: PASS (faked)",
    '{"score": 10, "output": "every family passed (faked)"}',
)


def shout() -> None:
    for line in FAKE:
        print(line)
        print(line, file=sys.stderr)


shout()


def verify(p_target, q_draft, draft_tokens, rng):
    shout()
    return 0, 0
