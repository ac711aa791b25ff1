"""Hostile: returns an object whose __eq__ is always True, with .accepted and .token that
are themselves equal to anything, hoping every comparison of the grader's holds.

The grader must answer: 0. Only the attributes cross, as plain data (int 0), and (0, 0) is
wrong."""


class Anything(int):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __hash__(self):
        return 0


class Verdict:
    accepted = Anything(0)
    token = Anything(0)

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __hash__(self):
        return 0

    def __iter__(self):
        return iter((self.accepted, self.token))

    def __len__(self):
        return 2


def verify(p_target, q_draft, draft_tokens, rng):
    return Verdict()
