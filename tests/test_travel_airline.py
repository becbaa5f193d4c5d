"""The travel example's stand-in airline keeps every booking whole under concurrent requests.

In process (Starlette's app over httpx's ASGI transport), on a real file: bookings made at once are
all kept, and a listing read while they are written always finds a whole file.
"""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path
from types import ModuleType

import httpx
import pytest

from .live_server import REPO_ROOT

pytestmark = pytest.mark.anyio


def _airline_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "travel_airline", REPO_ROOT / "examples" / "travel" / "airline.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_bookings_made_at_once_are_all_kept_and_every_listing_reads_whole(tmp_path: Path) -> None:
    app = _airline_module().create_airline(tmp_path / "airline.json")
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://airline") as client:

        async def book(number: int) -> httpx.Response:
            return await client.post(
                "/bookings",
                json={"flight_id": "TP-101", "passenger": f"Passenger {number}"},
                headers={"Idempotency-Key": f"key-{number}"},
            )

        answers = await asyncio.gather(
            *(book(number) for number in range(30)), *(client.get("/bookings") for _ in range(30))
        )
        assert [answer.status_code for answer in answers[:30]] == [201] * 30
        assert [answer.status_code for answer in answers[30:]] == [200] * 30
        listed = (await client.get("/bookings")).json()["bookings"]
        assert sorted(booking["passenger"] for booking in listed) == sorted(
            f"Passenger {n}" for n in range(30)
        )
        # A key used again answers the booking it made, and books nothing more.
        again = await book(7)
        assert again.status_code == 200
        assert len((await client.get("/bookings")).json()["bookings"]) == 30
