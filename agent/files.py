"""A thread's files in its conversation: references in the stored messages, bytes at request time.

A user message with files attached holds, besides its text, one `ImageUrl` or `DocumentUrl` per
file whose URL is `durable-chat-file://{file_id}` (`file_reference`): the stored conversation
keeps a few hundred bytes per file, never the file. `FileResolver` turns the references of a
request into what the model reads (an image or a PDF as `BinaryContent`, a text file as text, a
deleted file as a short placeholder) in `before_model_request`, which changes the request sent,
never the history. Tools reach the thread's files through `RunScope.files` (`ThreadFiles`).
The design note is "Files in the conversation" in `docs/files.md`.
"""

from __future__ import annotations

import hashlib
import io
import logging
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pydantic_ai.messages import (
    BinaryContent,
    DocumentUrl,
    ImageUrl,
    ModelMessage,
    ModelRequest,
    UserContent,
    UserPromptPart,
)

from store import Files, NewFile, NotFound, StoredFile

__all__ = (
    "FILE_URL",
    "Attachment",
    "FileResolver",
    "ThreadFiles",
    "attachment_of",
    "attachments_in",
    "file_reference",
    "removed_placeholder",
)

logger = logging.getLogger(__name__)

FILE_URL = "durable-chat-file://"
"""The scheme of a reference to a thread's file in a stored message."""

_METADATA = "durable_chat_file"
_BINARY = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"})


@dataclass(frozen=True)
class Attachment:
    """A file a user message refers to, as the reference describes it."""

    file_id: str
    name: str
    media_type: str
    size: int


def file_reference(stored: StoredFile | Attachment) -> ImageUrl | DocumentUrl:
    """The part a user message keeps for an attached file: its id, name, type and size, not its bytes."""
    metadata: dict[str, object] = {
        _METADATA: {"file_id": stored.file_id, "name": stored.name, "size": stored.size}
    }
    kind = ImageUrl if stored.media_type.startswith("image/") else DocumentUrl
    return kind(
        f"{FILE_URL}{stored.file_id}",
        media_type=stored.media_type,
        identifier=stored.file_id,
        vendor_metadata=metadata,
    )


def attachment_of(item: object) -> Attachment | None:
    """The file `item` (an item of a user prompt) refers to, if it is a reference (`file_reference`)."""
    if not isinstance(item, ImageUrl | DocumentUrl) or not item.url.startswith(FILE_URL):
        return None
    described = (item.vendor_metadata or {}).get(_METADATA)
    found: dict[str, object] = described if isinstance(described, dict) else {}  # pyright: ignore[reportUnknownVariableType]
    name, size = found.get("name"), found.get("size")
    return Attachment(
        file_id=item.url.removeprefix(FILE_URL),
        name=name if isinstance(name, str) else "file",
        media_type=item.media_type,
        size=size if isinstance(size, int) else 0,
    )


def attachments_in(messages: Sequence[ModelMessage]) -> list[Attachment]:
    """Every file the user messages of `messages` refer to, in order (a file attached twice, twice)."""
    found: list[Attachment] = []
    for message in messages:
        if not isinstance(message, ModelRequest):
            continue
        for part in message.parts:
            if isinstance(part, UserPromptPart) and not isinstance(part.content, str):
                found.extend(a for a in map(attachment_of, part.content) if a is not None)
    return found


def removed_placeholder(name: str) -> str:
    """What the model reads in place of a file deleted since it was attached."""
    return f"[file removed: {name}]"


class ThreadFiles:
    """The files of a run's thread, for its tools (`scope.files`): list, read, and save new ones."""

    def __init__(self, files: Files | None, thread_id: str, user_id: str) -> None:
        self._files = files
        self.thread_id = thread_id
        self.user_id = user_id

    async def list(self) -> list[StoredFile]:
        """The thread's files, oldest first."""
        if self._files is None:
            return []
        return await self._files.list(self.thread_id, user_id=self.user_id)

    async def get(self, file_id: str) -> StoredFile:
        """One file of the thread.

        Raises:
            store.NotFound: No such file in this thread (deleted, or another thread's).
        """
        if self._files is None:
            raise NotFound(f"no file {file_id!r}")
        return await self._files.get(file_id, thread_id=self.thread_id, user_id=self.user_id)

    async def find(self, file_ids: Iterable[str]) -> dict[str, StoredFile]:
        """Those of `file_ids` that are files of the thread, by id, in one query (others left out)."""
        if self._files is None:
            return {}
        return await self._files.get_many(file_ids, thread_id=self.thread_id, user_id=self.user_id)

    async def read(self, file: str | StoredFile) -> bytes:
        """The bytes of one file of the thread (by id, or as `get` or `list` gave it), whole.

        Raises:
            store.NotFound: No such file in this thread, or it was deleted meanwhile.
        """
        stored = await self.get(file) if isinstance(file, str) else file
        if self._files is None or stored.thread_id != self.thread_id or stored.user_id != self.user_id:
            raise NotFound(f"no file {stored.file_id!r}")
        return await self._files.read_bytes(stored)

    async def read_many(self, files: Sequence[StoredFile]) -> dict[str, bytes]:
        """The bytes of each of `files` (as `find`, `get` or `list` gave them), whole, by file id, in one
        trip; files not of the thread, or deleted meanwhile, are left out."""
        if self._files is None:
            return {}
        mine = [f for f in files if f.thread_id == self.thread_id and f.user_id == self.user_id]
        return await self._files.read_many(mine)

    async def save(self, name: str, data: bytes, *, media_type: str) -> StoredFile:
        """Store a file a tool made (a report, say) in the thread; the client downloads it as any other.

        The name and type are the tool's word: trusted code, not checked as an upload is.
        """
        if self._files is None:
            raise RuntimeError("this run has no file store")
        new = NewFile(
            thread_id=self.thread_id,
            user_id=self.user_id,
            name=name,
            media_type=media_type,
            source=io.BytesIO(data),
            size=len(data),
            sha256=hashlib.sha256(data).hexdigest(),
        )
        return await self._files.save(new)


class FileResolver:
    """Replaces the file references of a model request with the files' content, once per run and file.

    The files a request refers to and the run has not resolved yet are found in one query, less
    those `known` already (the rows the step holds for its message's attachments), and their bytes
    read in one trip (none for bytes this process stored lately: `store.Files.read_many`).
    """

    def __init__(self, files: ThreadFiles, known: Sequence[StoredFile] = ()) -> None:
        self._files = files
        self._known = {stored.file_id: stored for stored in known}
        self._resolved: dict[str, UserContent] = {}
        # The last request's messages when none held a reference: a run's later requests resend
        # them (the same objects), and only what follows them is looked at again.
        self._plain: list[ModelMessage] = []

    async def resolve(self, messages: list[ModelMessage]) -> list[ModelMessage]:
        """`messages` with every reference resolved; the same list when none holds one."""
        plain = self._plain
        known = len(plain)
        if known > len(messages) or not all(map(operator.is_, messages[:known], plain)):  # walked in C
            known = 0
        referring = _referring(messages[known:])
        if not referring:
            self._plain = list(messages)
            return messages
        self._plain = []
        await self._load(attachments_in([m for m in messages if id(m) in referring]))
        resolved: list[ModelMessage] = []
        for message in messages:
            if id(message) in referring:
                parts = [
                    self._part(part) if isinstance(part, UserPromptPart) else part for part in message.parts
                ]
                message = replace(message, parts=parts)
            resolved.append(message)
        return resolved

    def _part(self, part: UserPromptPart) -> UserPromptPart:
        if isinstance(part.content, str):
            return part
        content: list[UserContent] = []
        for item in part.content:
            attachment = attachment_of(item)
            content.append(item if attachment is None else self._resolved[attachment.file_id])
        return replace(part, content=content)

    async def _load(self, attachments: list[Attachment]) -> None:
        """Resolve those of `attachments` the run has not resolved yet."""
        new = {a.file_id: a for a in attachments if a.file_id not in self._resolved}
        if not new:
            return
        unknown = [file_id for file_id in new if file_id not in self._known]
        rows = {**self._known, **(await self._files.find(unknown) if unknown else {})}
        found = [rows[file_id] for file_id in new if file_id in rows]
        read = await self._files.read_many(found)
        for file_id, attachment in new.items():
            stored, data = rows.get(file_id), read.get(file_id)
            self._resolved[file_id] = (
                self._removed(attachment) if stored is None or data is None else _content(stored, data)
            )

    def _removed(self, attachment: Attachment) -> str:
        logger.info(
            "file %s of thread %s is gone; the model reads a placeholder",
            attachment.file_id,
            self._files.thread_id,
        )
        return removed_placeholder(attachment.name)


def _content(stored: StoredFile, data: bytes) -> UserContent:
    """What the model reads of a file: an image or a PDF as `BinaryContent`, any other file as text."""
    if stored.media_type in _BINARY:
        return BinaryContent(data, media_type=stored.media_type, identifier=stored.name)
    return f"[file: {stored.name}]\n{data.decode('utf-8', errors='replace')}"


def _referring(messages: list[ModelMessage]) -> set[int]:
    """The identities of the requests of `messages` holding a file reference.

    One comprehension over every part, no call per message: each model request resends the whole
    history, and only a prompt of several items (text and files) can hold a reference.
    """
    return {
        id(message)
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
        and not isinstance(part.content, str)
        and any(attachment_of(item) is not None for item in part.content)
    }
