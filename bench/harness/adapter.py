"""What a user would deploy instead of ours: pydantic-ai's own `VercelAIAdapter` serving the shop's agent.

    python -m bench.harness.adapter --port N --db URL [--app plain]   (the secret from $DURABLE_CHAT_SECRET)

`--app plain`: the agent of `bench/harness/plain_app.py` instead, with its deps (none).

The same agent and deps, stored nothing: the client resends the conversation each turn, as `useChat`
does. The bearer token is checked as ours checks it.
"""

from __future__ import annotations

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
from .servers import baseline_main
from .turns import bare_scope


def create_plain_app(secret: str, database_url: str) -> Starlette:
    """The same for the plain app's agent (`bench/harness/plain_app.py`), whose deps are none."""
    return create_app(secret, database_url, plain=build_plain_agent())


def create_app(secret: str, database_url: str, *, plain: Agent[None, str] | None = None) -> Starlette:
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
    baseline_main(__doc__, create_app, apps={"plain": create_plain_app})
