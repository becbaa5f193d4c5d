"""Files: a 20 MB upload to a real server, a turn's store share with 20 attachments, storage per attached MB.

`python -m bench.files [--quick]` writes the section `files` of `docs/benchmarks.md`.

- Upload: the server's resident memory sampled while it receives a 20 MB PDF (growth over its idle
  baseline, after two warm-up uploads), and the upload's throughput beside writing the same bytes
  to the same backend directly (`Files.blobs.put`, in this process, on a database of its own).
- Turn: the store's share of a turn (load the thread, save the turn's two messages) on a thread
  whose history attaches 20 files of 1 MB each, beside the same thread without them; and beside it
  the cost of handing the files to the model (`FileResolver`: reading all 20 and making them
  `BinaryContent`), which only a model request pays.
- Storage: bytes the database holds (file chunks and conversation entries) per attached 1 MB file.
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
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserContent, UserPromptPart

from agent import FileResolver, ThreadFiles, file_reference
from bench.harness.options import parser, writes
from bench.harness.reports import Clock, command_line, environment, table, write_section
from bench.harness.servers import SECRET, ServerProcess, folder, ours_argv, server_env, serving
from bench.harness.stats import median
from store import Database, NewFile
from web import issue_token

MB = 1024 * 1024
UPLOAD_MB = 20
ATTACHMENTS = 20


def pdf(size: int) -> bytes:
    """`size` bytes a sniffer takes for a PDF, different every call (no upload is deduplicated)."""
    head = b"%PDF-1.7\n"
    return head + os.urandom(size - len(head))


async def upload(logs: Path, repeats: int) -> list[str]:
    url = f"sqlite+aiosqlite:///{logs / 'upload.db'}"
    headers = {"Authorization": f"Bearer {issue_token(SECRET, 'bench')}"}
    growths: list[float] = []
    seconds: list[float] = []
    async with (
        serving("ours", ours_argv(url), server_env(), logs) as server,
        httpx.AsyncClient(base_url=server.base_url, headers=headers, timeout=120) as client,
    ):
        thread_id = (await client.post("/api/threads", json={})).json()["thread_id"]
        path = f"/api/threads/{thread_id}/files"
        idle = server.status("VmRSS") or 0
        for _ in range(2):  # warm-up: the code paths and the pools, at full size
            answer = await client.post(
                path, files={"file": ("w.pdf", pdf(UPLOAD_MB * MB), "application/pdf")}
            )
            answer.raise_for_status()
        warmed = server.status("VmRSS") or 0
        for _ in range(repeats):
            data = pdf(UPLOAD_MB * MB)
            baseline = server.status("VmRSS") or 0
            done = asyncio.Event()
            sampler = asyncio.create_task(_peak_rss(server, done))
            started = time.perf_counter()
            answer = await client.post(path, files={"file": ("big.pdf", data, "application/pdf")})
            seconds.append(time.perf_counter() - started)
            done.set()
            peak = max(baseline, await sampler)
            answer.raise_for_status()
            growths.append((peak - baseline) / 1024)
    direct = await _direct(logs, repeats)
    upload_rate = UPLOAD_MB / median(seconds)
    direct_rate = UPLOAD_MB / median(direct)
    return [
        *table(
            ["20 MB upload", "value"],
            [
                [
                    "server memory: the two warm-up uploads over the idle server",
                    f"{(warmed - idle) / 1024:.1f} MB",
                ],
                [
                    "server memory: peak during an upload over before it (max of runs)",
                    f"{max(growths):.1f} MB",
                ],
                ["upload throughput (median)", f"{upload_rate:.0f} MB/s"],
                ["the same bytes to the backend directly (median)", f"{direct_rate:.0f} MB/s"],
                ["direct / upload", f"{direct_rate / upload_rate:.2f}x"],
            ],
            "lr",
        ),
    ]


async def _peak_rss(server: ServerProcess, done: asyncio.Event) -> int:
    """The server's largest resident set (kB) seen until `done`, sampled every 2 ms."""
    peak = 0
    while not done.is_set():
        peak = max(peak, server.status("VmRSS") or 0)
        await asyncio.sleep(0.002)
    return peak


async def _direct(logs: Path, repeats: int) -> list[float]:
    db = await Database.connect(f"sqlite+aiosqlite:///{logs / 'direct.db'}")
    try:
        seconds: list[float] = []
        for index in range(repeats + 1):
            data = pdf(UPLOAD_MB * MB)
            started = time.perf_counter()
            await db.files.blobs.put(f"bench/{index}", io.BytesIO(data), len(data))
            if index:  # the first is a warm-up
                seconds.append(time.perf_counter() - started)
        return seconds
    finally:
        await db.aclose()


async def turn_and_storage(logs: Path, repeats: int) -> list[str]:
    db = await Database.connect(f"sqlite+aiosqlite:///{logs / 'turn.db'}")
    try:
        plain = await db.threads.create(user_id="bench", title="plain")
        attached = await db.threads.create(user_id="bench", title="attached")
        before = await _stored_bytes(db)
        references: list[UserContent] = []
        for index in range(ATTACHMENTS):
            data = pdf(MB)
            new = NewFile(
                thread_id=attached.thread_id,
                user_id="bench",
                name=f"invoice-{index}.pdf",
                media_type="application/pdf",
                source=io.BytesIO(data),
                size=len(data),
                sha256=hashlib.sha256(data).hexdigest(),
            )
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
    finally:
        await db.aclose()
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


async def _stored_bytes(db: Database) -> int:
    """Bytes of file chunks and conversation entries the database holds."""
    async with db.engine.connect() as connection:
        chunks = (
            await connection.execute(sa.text("SELECT coalesce(sum(length(data)), 0) FROM file_chunks"))
        ).scalar()
        entries = (
            await connection.execute(
                sa.text("SELECT coalesce(sum(length(message)), 0) FROM conversation_entries")
            )
        ).scalar()
    return int(chunks or 0) + int(entries or 0)


async def main(argv: list[str]) -> None:
    arguments = parser("bench.files", __doc__, postgres="explicit").parse_args(argv)
    repeats = 2 if arguments.quick else 5
    clock = Clock()
    with folder("files", keep=arguments.keep_logs) as logs:
        uploads = await upload(logs, repeats)
        turns = await turn_and_storage(logs, repeats * 6)
    lines = [
        *environment(
            command_line("bench.files", argv),
            notes=[
                f"SQLite, files in the database; {repeats} measured uploads after 2 warm-ups",
                clock.line(),
            ],
        ),
        "",
        *uploads,
        "",
        *turns,
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if writes(arguments, full=not arguments.quick):
        write_section(arguments.output, "files", text)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
