"""`python -m specdec.cli ...`: the `specdec` command, run from a checkout or a worktree."""

from specdec.cli import main

raise SystemExit(main())
