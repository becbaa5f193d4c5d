"""What a user would deploy instead of ours: pydantic-ai's own `VercelAIAdapter` serving the shop's agent.

    python -m bench.harness.adapter --port N --db URL [--app plain]   (the secret from $DURABLE_CHAT_SECRET)

`--app plain`: the agent of `bench/harness/plain_app.py` instead, with its deps (none).

The same agent and deps, stored nothing: the client resends the conversation each turn, as `useChat`
does. The bearer token is checked as ours checks it.
"""

from __future__ import annotations

import argparse
import os

import uvicorn
from pydantic_ai import Agent
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent.demo import BusinessData, ShopDeps, build_agent, demo_model
from store import Ledger
from web import InvalidToken, verify_token

from .plain_app import build_agent as build_plain_agent
from .turns import bare_scope


def create_app(secret: str, database_url: str, *, plain: Agent[None, str] | None = None) -> Starlette:
    """The shop's agent, or `plain` (the plain app's, whose deps are none), served on `/api/ai-sdk/chat`."""
    engine = create_async_engine(database_url)
    business = BusinessData(engine)
    agent = build_agent(demo_model(delay=0))
    ledger = Ledger(engine)

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def chat(request: Request) -> Response:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        try:
            if scheme.lower() != "bearer":
                raise InvalidToken("unauthorized", "a bearer token is needed")
            user_id = verify_token(secret, token.strip()).user_id
        except InvalidToken:
            return JSONResponse({"error": {"code": "unauthorized"}}, status_code=401)
        if plain is not None:
            return await VercelAIAdapter[None, str].dispatch_request(request, agent=plain, deps=None)
        # The shop's deps as the server builds them; only `business` is used by `lookup_order`.
        scope = bare_scope(ledger, engine, user_id)
        deps = ShopDeps(business=business, scope=scope)
        return await VercelAIAdapter[ShopDeps, str].dispatch_request(request, agent=agent, deps=deps)

    routes = [Route("/healthz", healthz, methods=["GET"]), Route("/api/ai-sdk/chat", chat, methods=["POST"])]
    return Starlette(routes=routes)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", default="", help="the database with the shop's business tables")
    parser.add_argument("--app", choices=["shop", "plain"], default="shop")
    arguments = parser.parse_args()
    plain = build_plain_agent() if arguments.app == "plain" else None
    app = create_app(os.environ["DURABLE_CHAT_SECRET"], arguments.db, plain=plain)
    # No lifespan, as `python -m cli serve` has none of theirs to run.
    uvicorn.run(app, host=arguments.host, port=arguments.port, lifespan="off")
