"""The terminal chat keeps logs out of the conversation (`--log-file`), and `threads --db`."""

from __future__ import annotations

import re
from pathlib import Path

from .test_cli import run_cli

NOISY_APP = """\
import logging
import warnings
from collections.abc import AsyncIterator

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage
from pydantic_ai.models.function import AgentInfo, FunctionModel

from agent import ChatApp

logging.getLogger("pydantic_ai").warning("BANNER: pydantic-ai says hello at import")
warnings.warn("a library's warning at import", UserWarning, stacklevel=1)


async def answer(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    logging.getLogger("pydantic_ai.models").warning("RUN-LOG: a warning during the run")
    logging.getLogger("noisy_app").error("RUN-ERROR: the user's own module logs")
    yield "Quiet answer."


app = ChatApp(agent=Agent(FunctionModel(stream_function=answer), name="noisy"))
"""

LOG_LINES = ("BANNER", "RUN-LOG", "RUN-ERROR", "a library's warning")


def _chat(tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    (tmp_path / "noisy_app.py").write_text(NOISY_APP)
    url = f"sqlite+aiosqlite:///{tmp_path / 'chat.db'}"
    result = run_cli(
        "chat", "--app", "noisy_app:app", "--db", url, *extra, cwd=tmp_path, input="Hello there\n/quit\n"
    )
    return result.returncode, result.stdout, result.stderr


def test_no_log_line_reaches_the_conversation_by_default(tmp_path: Path) -> None:
    code, stdout, stderr = _chat(tmp_path)

    assert code == 0, stderr
    assert "assistant> Quiet answer." in stdout
    for line in LOG_LINES:
        assert line not in stdout + stderr, (line, stdout, stderr)


def test_log_file_gets_every_log_line_and_the_conversation_none(tmp_path: Path) -> None:
    log_file = tmp_path / "logs" / "chat.log"

    code, stdout, stderr = _chat(tmp_path, "--log-file", str(log_file))

    assert code == 0, stderr
    assert "assistant> Quiet answer." in stdout
    logged = log_file.read_text()
    for line in LOG_LINES:
        assert line in logged, (line, logged)
        assert line not in stdout + stderr, (line, stdout, stderr)


def test_log_file_dash_is_stderr(tmp_path: Path) -> None:
    code, stdout, stderr = _chat(tmp_path, "--log-file", "-")

    assert code == 0, stderr
    assert "BANNER: pydantic-ai says hello at import" in stderr
    assert "RUN-ERROR" in stderr
    for line in LOG_LINES:
        assert line not in stdout, (line, stdout)


def test_threads_reads_the_database_given_with_db(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'elsewhere.db'}"
    chatted = run_cli("chat", "--user", "alice", "--db", url, cwd=tmp_path, input="hello\n/quit\n")
    assert chatted.returncode == 0, chatted.stderr
    found = re.search(r"--thread (\S+);", chatted.stdout)
    assert found is not None, chatted.stdout

    listed = run_cli("threads", "--user", "alice", "--db", url, cwd=tmp_path)
    default = run_cli("threads", "--user", "alice", cwd=tmp_path)  # the default database: not that one

    assert (listed.returncode, listed.stderr) == (0, "")
    assert [row.split()[0] for row in listed.stdout.splitlines()[1:]] == [found.group(1)]
    assert (default.returncode, default.stdout) == (0, "no threads for user 'alice'\n")
