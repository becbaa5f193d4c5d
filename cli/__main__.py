"""`python -m cli` runs the `durable-chat` command.

`python -m` puts the working directory first on the module path, where a user's project often has
an `agent.py`: it would hide durable-chat's own `agent` package before the command even starts. The
working directory is taken off the path first (unless it is durable-chat's own checkout); the
command's `--app` loader puts it back, behind our packages, and refuses a module that clashes.
"""

from __future__ import annotations

import sys
from pathlib import Path

_CHECKOUT = Path(__file__).resolve().parent.parent
if Path.cwd().resolve() != _CHECKOUT:
    sys.path[:] = [entry for entry in sys.path if Path(entry or ".").resolve() != Path.cwd().resolve()]

from .main import main  # noqa: E402  # only once the path is ours

raise SystemExit(main())
