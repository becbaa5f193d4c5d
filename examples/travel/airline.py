"""A stand-in for an airline's booking API, for the travel desk example: run it beside the server.

    python airline.py --port 9100 --data airline.json

`GET /flights?destination=…` searches a small timetable; `POST /bookings` books a seat and honours
the `Idempotency-Key` header as a real payment or booking API does (Stripe's, say): a repeated key
answers the booking it made the first time instead of booking again. Bookings are kept in a JSON
file, so they survive a restart of either process. `--hold SECONDS` makes it answer a booking that
long after storing it (`PUT /hold {"seconds": …}` changes it while running), so a test can kill the
caller between the booking and its answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

FLIGHTS = [
    {
        "flight_id": "TP-101",
        "origin": "Paris",
        "destination": "Lisbon",
        "departs": "2026-12-04T08:10",
        "price": 129.0,
    },
    {
        "flight_id": "TP-205",
        "origin": "Paris",
        "destination": "Lisbon",
        "departs": "2026-12-04T17:45",
        "price": 189.0,
    },
    {
        "flight_id": "LH-330",
        "origin": "Paris",
        "destination": "Berlin",
        "departs": "2026-12-05T09:00",
        "price": 99.0,
    },
    {
        "flight_id": "BA-777",
        "origin": "Paris",
        "destination": "London",
        "departs": "2026-12-06T12:30",
        "price": 149.0,
    },
]


def create_airline(data: Path, *, hold: float = 0.0) -> Starlette:
    """The airline API, keeping its bookings in `data`."""
    holding = {"seconds": hold}
    booking_one = asyncio.Lock()  # one booking at a time reads, adds to and writes the file

    def load() -> dict[str, dict[str, object]]:
        return json.loads(data.read_text()) if data.exists() else {}

    def store(bookings: dict[str, dict[str, object]]) -> None:
        # Written aside, then renamed over the file: a reader finds the old bookings or the new ones.
        scratch = data.with_name(f".{data.name}.writing")
        scratch.write_text(json.dumps(bookings, indent=2))
        scratch.replace(data)

    async def search(request: Request) -> JSONResponse:
        destination = request.query_params.get("destination", "").strip().lower()
        return JSONResponse({"flights": [f for f in FLIGHTS if str(f["destination"]).lower() == destination]})

    async def book(request: Request) -> JSONResponse:
        key = request.headers.get("idempotency-key")
        if not key:
            return JSONResponse({"error": "an Idempotency-Key header is required"}, status_code=400)
        body = await request.json()
        flight = next((f for f in FLIGHTS if f["flight_id"] == body.get("flight_id")), None)
        async with booking_one:
            bookings = load()
            if key in bookings:
                return JSONResponse(bookings[key])  # the same request again: the same booking, not a new one
            if flight is None:
                return JSONResponse({"error": f"no flight {body.get('flight_id')!r}"}, status_code=404)
            booking = {
                "booking_ref": f"BK-{secrets.token_hex(3).upper()}",
                "flight_id": flight["flight_id"],
                "passenger": body.get("passenger"),
                "tenant": request.headers.get("x-tenant"),
                "price": flight["price"],
            }
            bookings[key] = booking
            await asyncio.to_thread(store, bookings)
        await asyncio.sleep(holding["seconds"])
        return JSONResponse(booking, status_code=201)

    async def set_hold(request: Request) -> JSONResponse:
        holding["seconds"] = float((await request.json())["seconds"])
        return JSONResponse(holding)

    async def list_bookings(request: Request) -> JSONResponse:
        return JSONResponse({"bookings": list(load().values())})

    return Starlette(
        routes=[
            Route("/flights", search, methods=["GET"]),
            Route("/bookings", book, methods=["POST"]),
            Route("/bookings", list_bookings, methods=["GET"]),
            Route("/hold", set_hold, methods=["PUT"]),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=9100)
    parser.add_argument("--data", type=Path, default=Path("airline.json"))
    parser.add_argument(
        "--hold", type=float, default=0.0, help="seconds between storing a booking and answering"
    )
    args = parser.parse_args()
    uvicorn.run(
        create_airline(args.data, hold=args.hold), host="127.0.0.1", port=args.port, log_level="warning"
    )


if __name__ == "__main__":
    main()
