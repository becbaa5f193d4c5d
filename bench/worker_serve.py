"""`python -m cli serve` with smaller PostgreSQL pools, so that several workers fit in one server's connections.

    python -m bench.worker_serve --connections N serve --port … --db … --model demo

A worker opens two pools on PostgreSQL (writes, and autocommit reads), each of 30 connections
by default: up to 60 per worker. Two workers under 200 users already passed the 100 connections a
default PostgreSQL allows ("sorry, too many clients already"), which also starves every other
client of that server. The benchmark caps them here (as `DURABLE_CHAT_POOL_SIZE` would), at `N`
connections per worker, split between the two pools, all kept open (an overflow connection is
closed on return and opened again, ~10 ms of the server's CPU each: see `bench.pool`). `N = 60`
is what a worker opens anyway.
"""

from __future__ import annotations

import sys
from typing import Any

from sqlalchemy.engine import URL

import store.engine

_original = store.engine.create_async_engine


def cap(connections: int) -> None:
    """Make every PostgreSQL engine the store creates use at most `connections / 2` connections."""
    per_pool = max(2, connections // 2)

    def create(url: URL, **options: Any) -> Any:
        if url.get_backend_name() == "postgresql":
            options.update(pool_size=per_pool, max_overflow=0)
        return _original(url, **options)

    store.engine.create_async_engine = create


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "--connections":
        print("usage: python -m bench.worker_serve --connections N serve [serve options]", file=sys.stderr)
        return 2
    cap(int(argv[1]))
    from cli import main as cli_main

    return cli_main(argv[2:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
