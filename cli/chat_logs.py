"""Where the terminal chat's logs go: nowhere by default, a file or stderr when asked (`--log-file`).

The conversation is the terminal: a log line (pydantic-ai's, a library's warning, the user's own
module's) printed there would land between a question and its answer. So by default every log
record and Python warning is dropped; `--log-file PATH` appends them to PATH (rotated past
`LOG_MAX_BYTES`, `LOG_FILES` earlier files kept: nothing on disk grows without bound), `--log-file -`
writes them to stderr.
"""

from __future__ import annotations

import logging
import logging.handlers
import sys
from pathlib import Path

from agent import LOG_FORMAT, OWN_PACKAGES, install_log_filters

__all__ = ("LOG_FILES", "LOG_MAX_BYTES", "log_to")

LOG_MAX_BYTES = 10 * 1024 * 1024
"""The size past which the chat's log file is rotated (to `PATH.1`, the earlier `.1` to `.2`, ...)."""
LOG_FILES = 3
"""How many rotated log files are kept besides the current one."""


def log_to(log_file: str | None, *, max_bytes: int = LOG_MAX_BYTES, keep: int = LOG_FILES) -> None:
    """Send every log record (and Python warning) to `log_file`: a path (rotated past `max_bytes`,
    `keep` earlier files kept), `-` for stderr, `None` for nowhere."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
        handler.close()
    handler: logging.Handler
    if log_file is None:
        handler = logging.NullHandler()  # also keeps `logging.lastResort` from printing to stderr
    elif log_file == "-":
        handler = logging.StreamHandler(sys.stderr)
    else:
        path = Path(log_file).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.handlers.RotatingFileHandler(
            path, maxBytes=max_bytes, backupCount=keep, encoding="utf-8"
        )
    handler.setFormatter(logging.Formatter(LOG_FORMAT))
    root.addHandler(handler)
    install_log_filters()  # the format names the trace; the secrets are added once known
    root.setLevel(logging.WARNING)
    for package in OWN_PACKAGES:
        logging.getLogger(package).setLevel(logging.INFO)
    # `warnings.warn` prints to stderr by itself: through the logs instead, to the same place.
    logging.captureWarnings(True)
