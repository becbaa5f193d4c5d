"""`durable-chat purge`: the age parser, fuzzed, and the command run as a real process."""

from __future__ import annotations

import argparse
import re
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from inline_snapshot import snapshot

from cli.purge import MAX_AGE, parse_age
from store import Database, NewRun
from store.schema import ThreadRow, metadata, now_utc

from .test_cli import run_cli, run_cli_reader_gone

_threads = metadata.tables[ThreadRow.__tablename__]
_UNIT = {"d": timedelta(days=1), "h": timedelta(hours=1), "m": timedelta(minutes=1)}


@pytest.mark.parametrize(
    ("text", "age"),
    [("90d", timedelta(days=90)), ("12h", timedelta(hours=12)), ("30m", timedelta(minutes=30))],
)
def test_an_age_is_a_number_and_a_unit(text: str, age: timedelta) -> None:
    assert parse_age(text) == age


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "",
            snapshot(
                "'' is not an age: write a whole number and a unit, d (days), h (hours) or m (minutes), such as 90d, 12h or 30m"
            ),
        ),
        (
            "90",
            snapshot(
                "'90' is not an age: write a whole number and a unit, d (days), h (hours) or m (minutes), such as 90d, 12h or 30m"
            ),
        ),
        (
            "3M",
            snapshot(
                "'3M' is not an age: write a whole number and a unit, d (days), h (hours) or m (minutes), such as 90d, 12h or 30m"
            ),
        ),
        (
            "-1d",
            snapshot(
                "'-1d' is not an age: write a whole number and a unit, d (days), h (hours) or m (minutes), such as 90d, 12h or 30m"
            ),
        ),
        ("0d", snapshot("'0d' is not a positive age: it would purge every thread")),
        ("36501d", snapshot("'36501d' is too old: at most 36500d")),
    ],
)
def test_a_bad_age_says_what_is_expected(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as raised:
        parse_age(text)
    assert str(raised.value) == message


@given(st.one_of(st.text(), st.from_regex(r"-?[0-9]{1,14}[dhmDHMw]?", fullmatch=True)))
@example("1.5d")
@example(" 90d")
@example("90 d")
@example("\u0669\u0660d")  # Arabic-Indic digits, which int() would take
@example("0000000000001d")
@example("1000000000d")  # ten digits of days: more than a timedelta holds
@example("9" * 5000 + "d")  # more digits than int() converts
def test_any_text_is_an_exact_age_or_a_clear_refusal(text: str) -> None:
    match = re.fullmatch(r"0*([0-9]*)([dhm])", text)
    # More than 12 significant digits is too old in any unit; int() would refuse thousands of them.
    # Counted in whole minutes: a timedelta of that many days may not even exist.
    minutes = (
        None
        if match is None or len(match.group(1)) > 12
        else int(match.group(1) or "0") * (_UNIT[match.group(2)] // timedelta(minutes=1))
    )
    if minutes is not None and 0 < minutes <= MAX_AGE // timedelta(minutes=1):
        assert parse_age(text) == timedelta(minutes=minutes)
    else:
        with pytest.raises(argparse.ArgumentTypeError, match=f"^{re.escape(repr(text))} is "):
            parse_age(text)


@given(st.integers(min_value=1, max_value=36500 * 24 * 60), st.sampled_from(["d", "h", "m"]))
def test_every_whole_age_within_the_bound_is_accepted(number: int, unit: str) -> None:
    age = number * _UNIT[unit]
    if age > MAX_AGE:
        with pytest.raises(argparse.ArgumentTypeError):
            parse_age(f"{number}{unit}")
    else:
        assert parse_age(f"{number}{unit}") == age


@pytest.mark.anyio
async def test_purge_lists_then_erases_the_old_threads(database_url: str, tmp_path: Path) -> None:
    async with await Database.connect(database_url) as db:
        old = await db.threads.create(user_id="alice", title="old")
        new = await db.threads.create(user_id="alice", title="new")
        busy = await db.threads.create(user_id="alice", title="busy")
        await db.runs.queue(NewRun(thread_id=busy.thread_id, kind="message", content="queued, never driven"))
        async with db.engine.begin() as connection:
            await connection.execute(
                _threads.update()
                .where(_threads.c.thread_id.in_([old.thread_id, busy.thread_id]))
                .values(updated_at=now_utc() - timedelta(days=120))
            )

    dry = run_cli("purge", "--older-than", "90d", "--db", database_url, "--dry-run", cwd=tmp_path)
    real = run_cli("purge", "--older-than", "90d", "--db", database_url, cwd=tmp_path)
    again = run_cli("purge", "--older-than", "90d", "--db", database_url, cwd=tmp_path)

    assert (dry.returncode, real.returncode, again.returncode) == (0, 0, 0), dry.stderr + real.stderr
    assert "Traceback" not in dry.stderr + real.stderr + again.stderr
    line = rf"thread {old.thread_id} \(user 'alice', idle since \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC\)"
    since = r"idle since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC"
    kept = "; kept 1 as old with a run queued or running, which a purge never erases"
    assert re.fullmatch(rf"would remove {line}\nwould remove 1 thread {since}{kept}\n", dry.stdout), (
        dry.stdout
    )
    assert re.fullmatch(rf"removed {line}\nremoved 1 thread {since}{kept}\n", real.stdout), real.stdout
    assert re.fullmatch(rf"removed 0 threads {since}{kept}\n", again.stdout), again.stdout
    async with await Database.connect(database_url) as db:
        left = await db.threads.list(user_id="alice", limit=10)
    assert {t.thread_id for t in left} == {new.thread_id, busy.thread_id}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--older-than", "90 days"], "argument --older-than: '90 days' is not an age: write a whole number"),
        (["--older-than", "0m"], "argument --older-than: '0m' is not a positive age"),
        ([], "the following arguments are required: --older-than"),
    ],
)
def test_a_bad_older_than_is_a_usage_error_that_erases_nothing(
    tmp_path: Path, args: list[str], expected: str
) -> None:
    database = tmp_path / "x.db"
    result = run_cli("purge", *args, "--db", f"sqlite+aiosqlite:///{database}", cwd=tmp_path)

    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("usage: durable-chat purge")
    assert f"durable-chat purge: error: {expected}" in result.stderr
    assert not database.exists()


@pytest.mark.anyio
async def test_a_purge_whose_reader_left_still_erases_everything_quietly(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    async with await Database.connect(url) as db:
        old = [await db.threads.create(user_id="alice", title=f"old {n}") for n in range(5)]
        async with db.engine.begin() as connection:
            await connection.execute(_threads.update().values(updated_at=now_utc() - timedelta(days=120)))

    # `durable-chat purge --older-than 90d | head -0`: the first line meets a broken pipe.
    result = run_cli_reader_gone("purge", "--older-than", "90d", "--db", url, cwd=tmp_path)

    assert result.returncode == 0
    assert "Traceback" not in result.stderr
    assert "Error" not in result.stderr
    assert result.stderr.startswith("INFO store.threads: purged 5 threads")
    async with await Database.connect(url) as db:
        assert await db.threads.list(user_id="alice", limit=10) == []
    assert len(old) == 5


def test_purge_of_an_unreachable_database_is_one_line(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'missing' / 'x.db'}"
    result = run_cli("purge", "--older-than", "90d", "--db", url, cwd=tmp_path)

    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("durable-chat: error: cannot open SQLite database")
