"""Files attached to messages: checking the ids a message names, and showing attachments in a history."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import quote

from agent import FILE_URL
from store import StoredFile

from .errors import ApiError
from .services import Services

__all__ = ("annotate_attachments", "attached_files", "file_url")

MAX_ATTACHMENTS = 20
"""The most files one message may carry."""


async def attached_files(s: Services, thread_id: str, user_id: str, file_ids: Sequence[str]) -> list[str]:
    """The ids a message attaches, each once, after checking every one is a file of that thread of that user.

    Raises:
        ApiError: 404 `not_found` for an id that is not (another thread's or user's file, or none).
    """
    if not file_ids:
        return []
    present = {f.file_id for f in await s.db.files.list(thread_id, user_id=user_id)}
    for file_id in file_ids:
        if file_id not in present:
            raise ApiError.not_found(f"no file {file_id[:200]!r}")
    return list(dict.fromkeys(file_ids))


def file_url(thread_id: str, file_id: str) -> str:
    """The endpoint that answers a file's bytes."""
    return f"/api/threads/{quote(thread_id, safe='')}/files/{quote(file_id, safe='')}"


def annotate_attachments(
    thread_id: str, messages: object, files: Sequence[StoredFile]
) -> list[dict[str, object]]:
    """Mark each file reference in `messages` (the history as JSON) with its attachment, and list them.

    Each reference (an `image-url` or `document-url` part of a user prompt whose `url` is a
    `durable-chat-file://` one) gains `"attachment": {"file_id", "name", "media_type", "size",
    "removed", "url"}`; `removed` is true once the file was deleted. Returns every attachment, in order.
    """
    present = {f.file_id for f in files}
    found: list[dict[str, object]] = []
    for item in _references(messages):
        url = str(item.get("url", ""))
        file_id = url.removeprefix(FILE_URL)
        described = item.get("vendor_metadata")
        meta: dict[str, object] = {}
        if isinstance(described, dict):
            inner = described.get("durable_chat_file")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if isinstance(inner, dict):
                meta = {str(k): v for k, v in inner.items()}  # pyright: ignore[reportUnknownVariableType, reportUnknownArgumentType]
        attachment: dict[str, object] = {
            "file_id": file_id,
            "name": meta.get("name", "file"),
            "media_type": item.get("media_type"),
            "size": meta.get("size", 0),
            "removed": file_id not in present,
            "url": file_url(thread_id, file_id),
        }
        item["attachment"] = attachment
        found.append(attachment)
    return found


def _references(messages: object) -> list[dict[str, object]]:
    found: list[dict[str, object]] = []
    if not isinstance(messages, list):
        return found
    for message in messages:  # pyright: ignore[reportUnknownVariableType]
        if not isinstance(message, dict):
            continue
        for part in message.get("parts", []):  # pyright: ignore[reportUnknownVariableType, reportUnknownMemberType]
            if not isinstance(part, dict) or part.get("part_kind") != "user-prompt":  # pyright: ignore[reportUnknownMemberType]
                continue
            content = part.get("content")  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            if not isinstance(content, list):
                continue
            for item in content:  # pyright: ignore[reportUnknownVariableType]
                if isinstance(item, dict) and str(item.get("url", "")).startswith(FILE_URL):  # pyright: ignore[reportUnknownMemberType, reportUnknownArgumentType]
                    found.append(item)  # pyright: ignore[reportUnknownArgumentType]
    return found
