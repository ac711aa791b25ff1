"""`python -m specdec.grading PATH.py:function`: `specdec grade` without the rest of the CLI."""

from specdec.grading import main

raise SystemExit(main())
