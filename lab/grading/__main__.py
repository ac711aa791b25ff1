"""`python -m lab.grading PATH.py:function`: `specdec grade` without the rest of the CLI."""

from lab.grading import main

raise SystemExit(main())
