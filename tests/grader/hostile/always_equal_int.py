"""Hostile: returns ints that compare equal to anything (an int subclass whose __eq__ is
always True, __ne__ always False), hoping every `returned == expected` holds.

The grader must answer: 0. Results cross to the grader as plain data, so each becomes the
plain int 0, and (0, 0) is wrong."""


class Always(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __hash__(self):
        return 0

    def __lt__(self, other):
        return False

    def __gt__(self, other):
        return False


def verify(p_target, q_draft, draft_tokens, rng):
    return Always(0), Always(0)
