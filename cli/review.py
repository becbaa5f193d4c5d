"""`durable-chat review`: the review queue in the terminal, one call at a time, y/n/e.

It decides through the database as the reviewer's endpoints do (`agent.decide` with the reviewer's
roles); a decision that completes a run's set queues the resume run, which a running server drives.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence

from .output import say

__all__ = ("review_queue",)


def review_queue(
    database_url: str, reviewer: str, roles: Sequence[str], ask: Callable[[str], str] = input
) -> int:
    """Show each pending call for `roles`, oldest first, and decide it as `reviewer`."""
    if not roles:
        say("durable-chat review needs at least one --role")
        return 2
    return asyncio.run(_review(database_url, reviewer, frozenset(roles), ask))


async def _review(database_url: str, reviewer: str, roles: frozenset[str], ask: Callable[[str], str]) -> int:
    from agent import InvalidArguments, decide
    from store import Database, StoreError

    async with await Database.connect(database_url) as db:
        items = await db.reviews.queue(roles, status="pending", limit=100)
        if not items:
            say(f"nothing to review for {', '.join(sorted(roles))}")
            return 0
        for item in items:
            approval = item.approval
            say(f"{item.user_id} · {item.thread_title or approval.thread_id} · for {approval.reviewers}")
            if approval.expires_at is not None:
                say(f"  expires {approval.expires_at:%Y-%m-%d %H:%M} UTC")
            say(f"  {approval.tool_name} {json.dumps(approval.args, ensure_ascii=False)}")
            while True:
                try:
                    answer = ask("Approve? [y/n/e/s(kip)/q] ").strip().lower()
                except EOFError:
                    return 0
                if answer in {"q", "quit"}:
                    return 0
                if answer in {"s", "skip", ""}:
                    break
                override: dict[str, object] | None = None
                reason: str | None = None
                if answer in {"e", "edit"}:
                    edited: object = json.loads(ask("Arguments (JSON): ") or "null")
                    if not isinstance(edited, dict):
                        say("(the arguments must be a JSON object)")
                        continue
                    pairs: list[tuple[object, object]] = list(edited.items())  # pyright: ignore[reportUnknownArgumentType]  # a JSON object
                    override = {str(key): value for key, value in pairs}
                elif answer in {"n", "no"}:
                    reason = ask("Reason: ").strip() or None
                elif answer not in {"y", "yes"}:
                    continue
                try:
                    await decide(
                        db,
                        approval.thread_id,
                        approval.tool_call_id,
                        decision="rejected" if answer in {"n", "no"} else "approved",
                        decided_by=reviewer,
                        override_args=override,
                        reason=reason,
                        reviewer_roles=roles,
                    )
                except InvalidArguments as error:
                    say(f"(not accepted: {error})")
                    continue
                except StoreError as error:
                    say(f"(cannot decide: {error})")
                say("  decided")
                break
    return 0
