"""Files: a 20 MB upload to a real server, a turn's store share with 20 attachments, storage per attached MB.

What each part measures is prose in `docs/benchmarks.md` (section `files`).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import sys
import time
from pathlib import Path

import httpx
import sqlalchemy as sa
from pydantic_ai.conversation import Conversation
from pydantic_ai.messages import (
    BinaryContent,
    ModelRequest,
    ModelResponse,
    TextPart,
    UserContent,
    UserPromptPart,
)

from agent import FileResolver, ThreadFiles, file_reference
from agent.demo import shop_app
from bench.harness.options import parser, publish
from bench.harness.reports import Clock, command_line, environment, table
from bench.harness.servers import SECRET, ServerProcess, folder, ours_argv, server_env, serving
from bench.harness.stats import median
from bench.harness.turns import bare_turn, bench_runtime, queued
from store import Database, NewFile
from web import issue_token

MB = 1024 * 1024
UPLOAD_MB = 20
ATTACHMENTS = 20
TURN_FILES = 3
WARM_UP_MB = 4
"""The first upload of the warmed server: it pays the one-off growth (see the section's notes)."""
_LIMITS = {"DURABLE_CHAT_MAX_FILE_MB": str(3 * UPLOAD_MB), "DURABLE_CHAT_FILE_QUOTA_MB": "10000"}


def pdf(size: int) -> bytes:
    """`size` bytes a sniffer takes for a PDF, different every call (no upload is deduplicated)."""
    head = b"%PDF-1.7\n"
    return head + os.urandom(size - len(head))


async def upload(logs: Path, repeats: int) -> list[str]:
    size = UPLOAD_MB * MB
    ((cold, _),) = await _uploads(logs, "cold", [size])
    # The same first upload with 3x the bytes: a streaming server grows by the same one-off amount.
    ((big, _),) = await _uploads(logs, "big", [3 * size])
    (small, _), (first, _), *later = await _uploads(logs, "warm", [WARM_UP_MB * MB, size, *[size] * repeats])
    direct = await _direct(logs, repeats)
    upload_rate, direct_rate = UPLOAD_MB / median(took for _, took in later), UPLOAD_MB / median(direct)
    rows = [
        ("server memory: a fresh server's first 20 MB upload over idle", cold),
        ("server memory: a fresh server's first 60 MB upload over idle", big),
        (f"server memory: a fresh server's first upload, {WARM_UP_MB} MB, over idle", small),
        ("server memory: the 20 MB upload after it (target ≤ 2 MB)", first),
        ("server memory: each later 20 MB upload over before it (max of runs)", max(kb for kb, _ in later)),
    ]
    return table(
        ["20 MB upload", "value"],
        [
            *([label, f"{kilobytes / 1024:.1f} MB"] for label, kilobytes in rows),
            ["upload throughput (median)", f"{upload_rate:.0f} MB/s"],
            ["the same bytes to the backend directly (median)", f"{direct_rate:.0f} MB/s"],
            ["direct / upload (target ≤ 2x)", f"{direct_rate / upload_rate:.2f}x"],
        ],
        "lr",
    )


async def _uploads(logs: Path, name: str, sizes: list[int]) -> list[tuple[float, float]]:
    """A fresh server's uploads of `sizes` bytes, one after another: the kB each grew its resident set by
    (its peak over before it), and its seconds."""
    url = f"sqlite+aiosqlite:///{logs / f'upload-{name}.db'}"
    headers = {"Authorization": f"Bearer {issue_token(SECRET, 'bench')}"}
    async with (
        serving(f"ours-{name}", ours_argv(url), server_env(_LIMITS), logs) as server,
        httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=120) as client,
    ):
        thread_id = (await client.post("/api/threads", json={})).json()["thread_id"]
        path = f"/api/threads/{thread_id}/files"

        async def measured(data: bytes) -> tuple[float, float]:
            baseline = server.status("VmRSS") or 0
            done = asyncio.Event()
            sampler = asyncio.create_task(_peak_rss(server, done))
            started = time.perf_counter()
            answer = await client.post(path, files={"file": ("big.pdf", data, "application/pdf")})
            took = time.perf_counter() - started
            done.set()
            peak = max(baseline, await sampler)
            answer.raise_for_status()
            return peak - baseline, took

        return [await measured(pdf(size)) for size in sizes]


async def _peak_rss(server: ServerProcess, done: asyncio.Event) -> int:
    """The server's largest resident set (kB) seen until `done`, sampled every 2 ms."""
    peak = 0
    while not done.is_set():
        peak = max(peak, server.status("VmRSS") or 0)
        await asyncio.sleep(0.002)
    return peak


async def _direct(logs: Path, repeats: int) -> list[float]:
    seconds: list[float] = []
    async with await Database.connect(f"sqlite+aiosqlite:///{logs / 'direct.db'}") as db:
        for index in range(repeats + 1):
            data = pdf(UPLOAD_MB * MB)
            started = time.perf_counter()
            await db.files.blobs.put(f"bench/{index}", io.BytesIO(data), len(data))
            if index:  # the first is a warm-up
                seconds.append(time.perf_counter() - started)
    return seconds


async def turn_and_storage(logs: Path, repeats: int) -> list[str]:
    async with await Database.connect(f"sqlite+aiosqlite:///{logs / 'turn.db'}") as db:
        plain = await db.threads.create(user_id="bench", title="plain")
        attached = await db.threads.create(user_id="bench", title="attached")
        before = await _stored_bytes(db)
        references: list[UserContent] = []
        for index in range(ATTACHMENTS):
            new = _new_file(attached.thread_id, pdf(MB), f"invoice-{index}.pdf")
            references.append(file_reference(await db.files.save(new)))
        for thread, extra in ((plain.thread_id, []), (attached.thread_id, references)):
            first = [
                ModelRequest(parts=[UserPromptPart(["Look at these", *extra])]),
                ModelResponse(parts=[TextPart("I see.")]),
            ]
            await db.conversations.save(Conversation(conversation_id=thread, messages=first))
        per_mb = (await _stored_bytes(db) - before) / (ATTACHMENTS * MB)
        share: dict[str, list[float]] = {"plain": [], "attached": []}
        for number in range(repeats + 2):
            for label, thread in (("plain", plain.thread_id), ("attached", attached.thread_id)):
                started = time.perf_counter()
                conversation = await db.conversations.load(thread)
                assert conversation is not None
                conversation.messages = [
                    *conversation.messages,
                    ModelRequest(parts=[UserPromptPart(f"question {number}")]),
                    ModelResponse(parts=[TextPart(f"answer {number}")]),
                ]
                await db.conversations.save(conversation)
                if number >= 2:
                    share[label].append(time.perf_counter() - started)
        resolving: list[float] = []
        loaded = await db.conversations.load(attached.thread_id)
        assert loaded is not None
        for _ in range(max(3, repeats // 5)):
            resolver = FileResolver(ThreadFiles(db.files, attached.thread_id, "bench"))
            started = time.perf_counter()
            await resolver.resolve(loaded.messages)
            resolving.append(time.perf_counter() - started)
    plain_ms, attached_ms = median(share["plain"]) * 1000, median(share["attached"]) * 1000
    return [
        *table(
            ["a turn's store share (load + save, median)", "value"],
            [
                ["thread with no attachments", f"{plain_ms:.2f} ms"],
                [f"thread with {ATTACHMENTS} attachments of 1 MB", f"{attached_ms:.2f} ms"],
                ["ratio (target ≤ 1.2x)", f"{attached_ms / plain_ms:.2f}x"],
                [
                    f"handing the {ATTACHMENTS} files to the model (read + BinaryContent, median)",
                    f"{median(resolving) * 1000:.1f} ms",
                ],
            ],
            "lr",
        ),
        "",
        *table(
            ["storage", "value"],
            [["database bytes per attached 1 MB file (chunks + conversation)", f"{per_mb:.3f} MB"]],
            "lr",
        ),
    ]


Side = tuple[str, int]
"""A side of the turn benchmark and how many files its turn attaches."""

_SIDES = {
    "ours": "durable-chat (the step; the bytes the upload just stored handed over)",
    "restarted": "durable-chat, the files stored by another process (read back from the database)",
    "bare": "the same turn unpersisted (pydantic-ai; files as bytes in memory)",
}


async def turn_versus_unpersisted(logs: Path, repeats: int) -> list[str]:
    """The demo's turn with `TURN_FILES` files of 1 MB attached, through the step (stored by reference;
    the bytes just stored handed to the model request, or read back when another process stored
    them, as after a restart), beside the same turn with the bytes in memory and nothing stored."""
    async with bench_runtime(shop_app(delay=0), "SQLite", logs, "step", None) as runtime:
        db = runtime.db
        times: dict[Side, list[float]] = {}
        ratios: dict[Side, list[float]] = {}  # each turn over the unpersisted one right after it
        # Another server process: none of its uploads in hand.
        async with await Database.connect(db.engine.url) as other:
            for index in range(repeats + 1):  # the first round is a warm-up
                for count, uploader in ((0, db), (TURN_FILES, db), (TURN_FILES, other)):
                    side = "ours" if uploader is db else "restarted"
                    files = [pdf(MB) for _ in range(count)]
                    thread = await db.threads.create(user_id="bench", title="files")
                    file_ids = [
                        (await uploader.files.save(_new_file(thread.thread_id, data))).file_id
                        for data in files
                    ]
                    ours = await queued(runtime, thread.thread_id, file_ids=file_ids)
                    in_memory = [BinaryContent(data, media_type="application/pdf") for data in files]
                    pair = {"ours": ours, "bare": bare_turn(runtime, files=in_memory)}
                    took: dict[str, float] = {}
                    for first in ("ours", "bare") if index % 2 else ("bare", "ours"):  # alternating
                        started = time.perf_counter()
                        await pair[first]()
                        took[first] = time.perf_counter() - started
                    if index:
                        times.setdefault((side, count), []).append(took["ours"])
                        times.setdefault(("bare", count), []).append(took["bare"])
                        ratios.setdefault((side, count), []).append(took["ours"] / took["bare"])
    rows: list[list[str]] = []
    for count in (TURN_FILES, 0):
        what = f"{count} files of 1 MB" if count else "no files"
        rows += [
            [f"{what}: {_SIDES[side]}", f"{median(times[side, count]) * 1000:.1f} ms"]
            for side in ("ours", "restarted", "bare")
            if (side, count) in times
        ]
        rows += [
            [
                f"{what}: ratio, {side} / unpersisted{' (target ≤ 1.3x)' if count and side == 'ours' else ''}",
                f"{median(ratios[side, count]):.2f}x",
            ]
            for side in ("ours", "restarted")
            if (side, count) in times
        ]
    return [
        *table(["the demo's turn (median)", "value"], rows, "lr"),
        "",
        "Each ratio is the median of the pairs' (a turn over the unpersisted one run beside it, the pair",
        "alternating which goes first).",
    ]


def _new_file(thread_id: str, data: bytes, name: str = "invoice.pdf") -> NewFile:
    return NewFile(
        thread_id=thread_id,
        user_id="bench",
        name=name,
        media_type="application/pdf",
        source=io.BytesIO(data),
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
    )


async def _stored_bytes(db: Database) -> int:
    """Bytes of file chunks and conversation entries the database holds."""
    async with db.engine.connect() as connection:
        return int(
            await connection.scalar(
                sa.text(
                    "SELECT (SELECT coalesce(sum(length(data)), 0) FROM file_chunks)"
                    " + (SELECT coalesce(sum(length(message)), 0) FROM conversation_entries)"
                )
            )
            or 0
        )


async def main(argv: list[str]) -> None:
    arguments = parser("bench.files", __doc__, postgres="explicit").parse_args(argv)
    repeats = 2 if arguments.quick else 5
    clock = Clock()
    with folder("files", keep=arguments.keep_logs) as logs:
        uploads = await upload(logs, repeats)
        turns = await turn_and_storage(logs, repeats * 6)
        versus = await turn_versus_unpersisted(logs, repeats * 3)
    notes = [
        f"SQLite, files in the database; throughput over {repeats} uploads after the first",
        clock.line(),
    ]
    lines = [
        *environment(command_line("bench.files", argv), notes=notes),
        "",
        *uploads,
        "",
        *turns,
        "",
        *versus,
        "",
    ]
    publish(arguments, {"files": "\n".join(lines)}, full=not arguments.quick)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
