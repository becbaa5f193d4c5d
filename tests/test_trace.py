"""`durable-chat trace RUN_ID`, run as a real process on the trace file a real chat process wrote."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from pathlib import Path

import httpx
from inline_snapshot import snapshot

from .live_server import SseEvent, auth, live_server, read_events, sqlite_url
from .test_api import finished, new_thread, send
from .test_cli import run_cli

FULL_TRACES = {"DURABLE_CHAT_TRACE_SAMPLE": "1", "DURABLE_CHAT_TRACE_STORE": "1"}
_DURATION = re.compile(r"  \d+\.\d ms")


def normalized(output: str) -> list[str]:
    """The tree with durations as `N ms` and hex ids as `<id>`; timing-dependent store writes left out."""
    lines = [
        re.sub(r"[0-9a-f]{32}|[0-9a-f-]{36}", "<id>", _DURATION.sub("  N ms", line))
        for line in output.splitlines()
    ]
    return [line for line in lines if "store.append_events" not in line]


def run_ids(database: Path) -> list[str]:
    with sqlite3.connect(database) as connection:
        return [row[0] for row in connection.execute("SELECT run_id FROM runs ORDER BY created_at")]


def test_trace_prints_a_paused_run_with_its_decision_then_the_resume(tmp_path: Path) -> None:
    chat = run_cli(
        "chat", cwd=tmp_path, input="Please refund ORD-5678, it arrived broken\ny\n/quit\n", env=FULL_TRACES
    )
    assert chat.returncode == 0, chat.stderr
    assert "Refunded $99.98 for ORD-5678" in chat.stdout
    paused, resumed = run_ids(tmp_path / "data" / "durable-chat.db")

    first = run_cli("trace", paused, cwd=tmp_path)
    second = run_cli("trace", resumed, cwd=tmp_path)

    assert (first.returncode, second.returncode) == (0, 0), first.stderr + second.stderr
    assert normalized(first.stdout) == snapshot(
        [
            "trace <id> (run_id <id>, attempt 1, status awaiting_approval)",
            "  run  N ms",
            "    invoke_agent support  N ms",
            "      chat demo  N ms",
            "      execute_tool lookup_order  N ms",
            "      chat demo  N ms",
            "        store.checkpoint  N ms",
            "    store.checkpoint  N ms",
            "  approval  N ms",
            "    store.decide  N ms",
        ]
    )
    assert normalized(second.stdout) == snapshot(
        [
            "trace <id> (run_id <id>, attempt 1, status completed)",
            "  run  N ms",
            "    store.claim_run  N ms",
            "    store.load  N ms",
            "    store.list_approvals  N ms",
            "    invoke_agent support  N ms",
            "      execute_tool issue_refund  N ms",
            "      chat demo  N ms",
            "        store.checkpoint  N ms",
            "    store.checkpoint  N ms",
        ]
    )
    # The header names the run's own trace: the one its row holds.
    with sqlite3.connect(tmp_path / "data" / "durable-chat.db") as connection:
        [(trace_id,)] = connection.execute("SELECT trace_id FROM runs WHERE run_id = ?", (paused,))
    assert first.stdout.startswith(f"trace {trace_id} (run_id {paused}, ")


def span_line(
    name: str, trace_id: str, span_id: str, parent: str | None, start: int, end: int, **attributes: object
) -> str:
    return json.dumps(
        {
            "name": name,
            "trace_id": trace_id,
            "span_id": span_id,
            "parent_span_id": parent,
            "start_time_unix_nano": start,
            "end_time_unix_nano": end,
            "status": "ERROR" if attributes.pop("error", False) else "UNSET",
            "attributes": attributes,
        }
    )


def test_trace_of_a_run_outside_the_sample_shows_its_run_span_and_says_so(tmp_path: Path) -> None:
    chat = run_cli(
        "chat",
        cwd=tmp_path,
        input="Please refund ORD-5678, it arrived broken\ny\n/quit\n",
        env={"DURABLE_CHAT_TRACE_SAMPLE": "0"},
    )
    assert chat.returncode == 0, chat.stderr
    paused, _ = run_ids(tmp_path / "data" / "durable-chat.db")

    shown = run_cli("trace", paused, cwd=tmp_path)

    assert shown.returncode == 0, shown.stderr
    assert normalized(shown.stdout) == snapshot(
        [
            "trace <id> (run_id <id>, attempt 1, status awaiting_approval)",
            "  run  N ms",
            "  approval  N ms",
            "  (only the run's own span was recorded: its trace was not in the sample; DURABLE_CHAT_TRACE_SAMPLE sets the share of runs traced in full)",
        ]
    )


def test_trace_finds_every_attempt_by_its_run_span_and_survives_a_torn_line(tmp_path: Path) -> None:
    first, second, other = "a" * 32, "b" * 32, "c" * 32
    ms = 1_000_000
    lines = [
        span_line("store.claim_run", first, "0000000000000002", "0000000000000001", 1 * ms, 3 * ms),
        span_line(
            "run",
            first,
            "0000000000000001",
            None,
            0,
            20 * ms,
            error=True,
            **{"durable_chat.run_id": "run-1", "durable_chat.run.attempt": 1},
        ),
        span_line("run", other, "0000000000000009", None, 0, 5 * ms, **{"durable_chat.run_id": "run-2"}),
        span_line(
            "run",
            "d" * 32,
            "0000000000000010",
            None,
            0,
            ms,
            **{"durable_chat.run_id": "run-1", "durable_chat.run.started": False},
        ),
        span_line("chat demo", second, "0000000000000005", "0000000000000004", 2 * ms, 7_500_000),
        span_line("late child", second, "0000000000000006", "00000000000000ff", 8 * ms, 9 * ms),
        span_line(
            "run",
            second,
            "0000000000000004",
            None,
            30 * ms,
            42_250_000,
            **{
                "durable_chat.run_id": "run-1",
                "durable_chat.run.attempt": 2,
                "durable_chat.run.status": "completed",
            },
        ),
        '{"name": "torn line, a writer died here", "trace_id": "aaaa',
    ]
    trace_file = tmp_path / "spans.jsonl"
    trace_file.write_text("\n".join(lines) + "\n")
    empty_db = f"sqlite+aiosqlite:///{tmp_path / 'empty.db'}"

    result = run_cli("trace", "run-1", "--file", str(trace_file), "--db", empty_db, cwd=tmp_path)

    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == snapshot(
        [
            "trace aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa (run_id run-1, attempt 1)",
            "  run  20.0 ms  [error]",
            "    store.claim_run  2.0 ms",
            "trace bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb (run_id run-1, attempt 2, status completed)",
            "  late child  1.0 ms",
            "  run  12.2 ms",
            "    chat demo  5.5 ms",
        ]
    )


def test_trace_of_an_unknown_run_is_one_line(tmp_path: Path) -> None:
    trace_file = tmp_path / "spans.jsonl"
    trace_file.write_text(
        span_line("run", "a" * 32, "1" * 16, None, 0, 1, **{"durable_chat.run_id": "run-1"}) + "\n"
    )
    db = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"

    result = run_cli("trace", "no-such-run", "--file", str(trace_file), "--db", db, cwd=tmp_path)

    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr == f"durable-chat: error: no spans of run 'no-such-run' in {str(trace_file)!r}\n"


def test_trace_without_a_trace_file_is_one_line(tmp_path: Path) -> None:
    db = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"

    missing = run_cli("trace", "run-1", "--db", db, cwd=tmp_path)
    off = run_cli("trace", "run-1", "--db", db, cwd=tmp_path, env={"DURABLE_CHAT_TRACE_FILE": "off"})

    assert (missing.returncode, missing.stdout) == (1, "")
    assert missing.stderr == (
        f"durable-chat: error: cannot read the trace file {str(tmp_path / 'data' / 'traces.jsonl')!r}: "
        "No such file or directory\n"
    )
    assert (off.returncode, off.stdout) == (1, "")
    assert off.stderr == "durable-chat: error: tracing to a file is off (DURABLE_CHAT_TRACE_FILE=off)\n"


async def serve_a_looping_run(url: str, workdir: Path) -> tuple[str, list[SseEvent]]:
    """Run a real server on `url`, send a message that ends at the turn's limits, return its run and events."""
    with live_server(url, workdir, env={"OPENAI_API_KEY": "sk-e2e-0123456789", **FULL_TRACES}) as server:
        async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as client:
            token = server.token("alice")
            thread_id = await new_thread(client, token)
            # The demo model loops on this until the turn's limits end it, which the server logs at INFO.
            run_id = await send(
                client, token, thread_id, "Please loop forever on ORD-5678, sk-e2e-0123456789"
            )
            events = await read_events(client, thread_id, token, until=finished(run_id))
            settled = (await client.get(f"/api/threads/{thread_id}", headers=auth(token))).json()
            assert settled["status"] == "idle"
            # An address in a URL reaches uvicorn's access log, which is redacted too.
            missing = await client.get("/api/threads/bob@example.com", headers=auth(token))
            assert missing.status_code == 404
            return run_id, events


def test_a_served_run_is_traced_logged_and_streamed_with_one_trace_id(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path)
    run_id, events = asyncio.run(serve_a_looping_run(url, tmp_path))
    with sqlite3.connect(tmp_path / "chat.db") as connection:
        [(trace_id,)] = connection.execute("SELECT trace_id FROM runs WHERE run_id = ?", (run_id,))

    assert re.fullmatch(r"[0-9a-f]{32}", trace_id)
    assert {event.data["trace_id"] for event in events} == {trace_id}
    [stderr] = tmp_path.glob("stderr-*.txt")
    log = stderr.read_text()
    assert "Logging error" not in log
    # uvicorn's access log goes to standard output; httpx sent the address URL-encoded.
    access = (tmp_path / "stdout.txt").read_text()
    assert '"GET /api/threads/[email] HTTP/1.1" 404' in access
    assert "example.com" not in access
    [logged] = [line for line in log.splitlines() if "hit its usage limits" in line]
    assert logged.startswith(f"INFO agent.step: run {run_id} hit its usage limits")
    assert logged.endswith(f" trace_id={trace_id}")
    # The server flushed its spans at shutdown into the data directory; the key never reached them.
    spans_text = (tmp_path / "data" / "traces.jsonl").read_text()
    assert "sk-e2e-0123456789" not in spans_text
    shown = run_cli("trace", run_id, "--db", url, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    lines = normalized(shown.stdout)
    assert lines[:2] == ["trace <id> (run_id <id>, attempt 1, status completed)", "  run  N ms"]
    assert lines.count("      execute_tool lookup_order  N ms") >= 10
