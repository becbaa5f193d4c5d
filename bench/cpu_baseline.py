"""What a user would deploy instead: pydantic-ai's own `VercelAIAdapter` serving the demo shop's agent.

    python -m bench.cpu_baseline --port N --db URL      (the secret from $DURABLE_CHAT_SECRET)

The same agent (`agent.demo.build_agent` on the demo model, no delay) with the same deps (the
shop's business data on the database at `--db`, which `lookup_order` reads), served on
`POST /api/ai-sdk/chat` by `VercelAIAdapter.dispatch_request`, the way pydantic-ai documents it,
on uvicorn and Starlette with uvicorn's defaults. No persistence: the client sends the whole
conversation with every turn (the AI SDK's `useChat` does), nothing is stored. The bearer token is
checked as the server checks it, so both sides pay for authentication. The database is migrated
and seeded by `bench.cpu` before this starts.
"""

from __future__ import annotations

import argparse
import os
import uuid

import uvicorn
from pydantic_ai.ui.vercel_ai import VercelAIAdapter
from sqlalchemy.ext.asyncio import create_async_engine
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from agent import RunRecords, RunScope, ToolLedger
from agent.demo import build_agent
from agent.demo.business import BusinessData
from agent.demo.model import demo_model
from agent.demo.tools import ShopDeps
from bench.web_tokens import InvalidToken, verify_token
from store import Ledger

__all__ = ("create_app",)

SECRET_ENV = "DURABLE_CHAT_SECRET"


def create_app(secret: str, database_url: str) -> Starlette:
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
        thread_id, run_id = str(uuid.uuid4()), str(uuid.uuid4())
        # The shop's deps as the server builds them; only `business` is used by `lookup_order`.
        scope = RunScope(
            thread_id=thread_id,
            run_id=run_id,
            user_id=user_id,
            attempt=1,
            records=RunRecords(),
            ledger=ToolLedger(ledger, thread_id, run_id),
            engine=engine,
        )
        return await VercelAIAdapter[ShopDeps, str].dispatch_request(
            request, agent=agent, deps=ShopDeps(business=business, scope=scope)
        )

    return Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/api/ai-sdk/chat", chat, methods=["POST"]),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--db", required=True, help="the database with the shop's business tables")
    arguments = parser.parse_args()
    app = create_app(os.environ[SECRET_ENV], arguments.db)
    # uvicorn's defaults, access log included, as `durable-chat serve` runs it.
    uvicorn.run(app, host=arguments.host, port=arguments.port, lifespan="off")


if __name__ == "__main__":
    main()
