"""The arguments every benchmark takes, defined once, and whether a run writes its sections."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from .reports import DOCS, write_section

POSTGRES_ENV = "DURABLE_CHAT_TEST_POSTGRES_URL"


def parser(
    module: str,
    doc: str | None,
    *,
    quick: str | None = "a short run, to check the benchmark works; writes nothing unless --write",
    postgres: Literal["optional", "required", "explicit"] = "optional",
    strict: bool = False,
    sections: bool = True,
) -> argparse.ArgumentParser:
    """`python -m module`'s parser with the shared options; the benchmark adds its own.

    `postgres`: `optional` also measures PostgreSQL, from `$DURABLE_CHAT_TEST_POSTGRES_URL` unless
    `--postgres URL` or `--no-postgres`; `required` likewise, but the benchmark needs it; `explicit`
    measures it only when `--postgres URL` is given (one database per run). `sections`: it writes
    sections of `docs/benchmarks.md` (`--write`, `--output`).
    """
    found = argparse.ArgumentParser(
        prog=f"python -m {module}", description=(doc or "").strip().split("\n")[0]
    )
    if quick is not None:
        found.add_argument("--quick", action="store_true", help=quick)
    default = None if postgres == "explicit" else os.environ.get(POSTGRES_ENV)
    found.add_argument(
        "--postgres",
        metavar="URL",
        default=default,
        help="a PostgreSQL server (postgresql+asyncpg://…) to make scratch databases on, each dropped after"
        + ("" if postgres == "explicit" else f" (default: ${POSTGRES_ENV})"),
    )
    if postgres == "optional":
        found.add_argument("--no-postgres", dest="postgres", action="store_const", const=None)
    if sections:
        found.add_argument(
            "--write",
            action=argparse.BooleanOptionalAction,
            default=None,
            help="write the sections to --output (default: a full run writes, a partial one does not)",
        )
        found.add_argument("--output", type=Path, default=DOCS, help="the document the sections go to")
    found.add_argument("--keep-logs", action="store_true", help="keep the servers' logs and the SQLite files")
    if strict:
        found.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return found


def writes(arguments: argparse.Namespace, *, full: bool) -> bool:
    """Whether to write the sections: as `--write`/`--no-write` say, else only a `full` run does."""
    return full if arguments.write is None else bool(arguments.write)


def publish(arguments: argparse.Namespace, sections: Mapping[str, str], *, full: bool) -> None:
    """Print the sections (by name), and write them to `--output` when the run writes (`writes`)."""
    print("", *sections.values(), sep="\n", flush=True)
    if writes(arguments, full=full):
        for name, text in sections.items():
            write_section(arguments.output, name, text)
        print(f"wrote {', '.join(sections)} in {arguments.output}", flush=True)
