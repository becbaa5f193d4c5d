"""`durable-chat`: the argument parser and one function per subcommand.

Each subcommand imports what it needs when it runs: `token` signs with the secret alone, `threads`,
`migrate` and `purge` open the store without the agent, and only `serve` and `chat` import the
agent, Starlette and uvicorn (`docs/operations.md`, "Command start-up").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent import LOG_FORMAT, OWN_PACKAGES, install_log_filters
from store import StoreError
from web import Settings, SettingsError, issue_token

from .chat_logs import log_to
from .output import detach_stdout, say
from .purge import parse_age, purge
from .users import DEFAULT_REVIEWER, DEFAULT_USER

if TYPE_CHECKING:
    import uvicorn

    from agent import ChatApp
    from store import Thread

__all__ = ("build_parser", "main")

_PROG = "durable-chat"
_THREADS_SHOWN = 100
_THREAD_COLUMNS = ("THREAD", "TITLE", "STATUS", "UPDATED (UTC)")
_UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand."""
    parser = argparse.ArgumentParser(
        prog=_PROG, description="A durable, streaming, human-in-the-loop chat backend for pydantic-ai agents."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host", help="address to listen on (default: 127.0.0.1)")
    serve.add_argument("--port", type=_port, help="port to listen on (default: 8000)")
    _add_db(serve)
    _add_model(serve)
    _add_app(serve)

    chat = commands.add_parser("chat", help="chat in the terminal, approving tool calls with y/n")
    chat.add_argument("--thread", metavar="ID", help="continue this thread")
    chat.add_argument("--user", metavar="NAME", help="chat as this user")
    _add_db(chat)
    _add_model(chat)
    _add_app(chat)
    chat.add_argument(
        "--log-file",
        metavar="PATH",
        help="write the logs (yours, pydantic-ai's, ours) to PATH, or to stderr with '-'; "
        "by default nothing is logged into the conversation",
    )

    token = commands.add_parser("token", help="print a bearer token for USER")
    token.add_argument("user", metavar="USER")
    token.add_argument(
        "--role",
        action="append",
        default=[],
        metavar="ROLE",
        help="a review role the token gives (repeatable)",
    )

    threads = commands.add_parser("threads", help="list the threads")
    threads.add_argument("--user", metavar="NAME", help="only this user's threads")
    _add_db(threads)

    review = commands.add_parser("review", help="decide the calls waiting for your review roles, y/n/e")
    review.add_argument("--user", metavar="NAME", help="who decides (the reviewer's id)")
    review.add_argument(
        "--role", action="append", default=[], metavar="ROLE", help="a review role (repeatable)"
    )
    _add_db(review)

    webhooks = commands.add_parser("webhooks", help="list the webhook deliveries pending or failing")
    _add_db(webhooks)

    migrate = commands.add_parser("migrate", help="create or upgrade the database schema")
    _add_db(migrate)

    trace = commands.add_parser("trace", help="print a run's spans as a tree with timings")
    trace.add_argument("run_id", metavar="RUN_ID")
    _add_db(trace)
    trace.add_argument(
        "--file",
        metavar="PATH",
        type=Path,
        help="the JSONL trace file (env DURABLE_CHAT_TRACE_FILE; default: traces.jsonl under ./data)",
    )
    purging = commands.add_parser("purge", help="erase the threads idle for longer than an age")
    purging.add_argument(
        "--older-than", metavar="AGE", type=parse_age, required=True, help="such as 90d, 12h or 30m"
    )
    purging.add_argument("--dry-run", action="store_true", help="list what would be erased, erase nothing")
    _add_db(purging)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line and return its exit status: 0 done, 1 failed, 2 usage error."""
    args = build_parser().parse_args(argv)
    command: str = args.command
    _configure_logging()
    try:
        match command:
            case "serve" | "chat":
                return _run_app(args)
            case "migrate":
                return _migrate(Settings.resolve_database_url(args.db))
            case "token":
                return _token(Settings.resolve_secret(), args.user, args.role)
            case "threads":
                return _threads(Settings.resolve_database_url(args.db), args.user or DEFAULT_USER)
            case "trace":
                return _trace(args.run_id, args.db, args.file)
            case "review":
                from .review import review_queue

                return review_queue(
                    Settings.resolve_database_url(args.db), args.user or DEFAULT_USER, args.role
                )
            case "webhooks":
                from .webhooks import show_webhooks

                return show_webhooks(Settings.resolve_database_url(args.db))
            case "purge":
                return purge(
                    Settings.resolve_database_url(args.db),
                    args.older_than,
                    dry_run=args.dry_run,
                    files_url=Settings.resolve_files_url(),
                )
            case _:
                raise AssertionError(f"unknown command {command!r}")
    except (StoreError, SettingsError) as error:
        return _failed(error)
    except BrokenPipeError:
        # `durable-chat trace … | head`: the reader took what it wanted; no traceback for that.
        detach_stdout()
        return 0


def _failed(error: Exception) -> int:
    # Operator-facing failures (a bad URL, an unreachable database): one line, no traceback.
    print(f"{_PROG}: error: {error}", file=sys.stderr)
    return 1


def _run_app(args: argparse.Namespace) -> int:
    """`serve` or `chat`: the two commands that load the app, and so import the agent."""
    from agent import AppLoadError, TracingUnavailable, UnknownModel

    try:
        if args.command == "serve":
            settings = Settings.load(
                host=args.host, port=args.port, database_url=args.db, model=args.model, app=args.app
            )
            return _serve(settings, _app(settings))
        # Before the app is loaded: its module's import may log (pydantic-ai's, the user's own).
        log_to(args.log_file)
        settings = Settings.load(database_url=args.db, model=args.model, app=args.app)
        return _chat(settings, _app(settings), args.user, args.thread, log_file=args.log_file)
    except (AppLoadError, TracingUnavailable, UnknownModel) as error:
        return _failed(error)


def _app(settings: Settings) -> ChatApp[Any]:
    """The app `settings` name, with its `--model` checked: both fail here in one line, not at start-up."""
    from agent import load_app, resolve_model

    app = load_app(settings.app)
    resolve_model(app, settings.model)
    return app


def _serve(settings: Settings, app: ChatApp[Any]) -> int:
    # Migrating before uvicorn starts turns a bad database into one clear line; in the lifespan
    # it would be a traceback. The lifespan's own connect then finds the schema up to date.
    from agent import setup_tracing
    from web import create_app

    from .server import server_config

    asyncio.run(_upgrade(settings.database_url))
    _configure_logging(settings.tracing.secrets)
    config = server_config(
        create_app(settings, app),
        host=settings.host,
        port=settings.port,
        # A quarter of the shutdown's bound for open connections to end (`web.settings`).
        timeout_graceful_shutdown=max(1, round(settings.shutdown_timeout_seconds / 4)),
    )
    # Uvicorn has just configured its own loggers' handlers: they get the filters too.
    install_log_filters(settings.tracing.secrets, loggers=_UVICORN_LOGGERS)
    tracing = setup_tracing(settings.tracing)
    try:
        return _run_server(settings, config, app.reviewer_roles, on_shutdown=tracing.shutdown)
    finally:
        tracing.shutdown()  # a server that failed to start; a second shutdown does nothing


def _run_server(
    settings: Settings,
    config: uvicorn.Config,
    reviewer_roles: Sequence[str],
    *,
    on_shutdown: Callable[[], object],
) -> int:
    from .server import Server

    server = Server(
        config,
        ready_line=_ready_line(settings, interactive=sys.stdout.isatty(), reviewer_roles=reviewer_roles),
        on_shutdown=on_shutdown,
        shutdown_seconds=settings.shutdown_timeout_seconds,
    )
    # uvicorn re-raises the Ctrl-C it handled, after a clean shutdown: nothing to report.
    with contextlib.suppress(KeyboardInterrupt):
        server.run()
    return 0 if server.started else 1


def _ready_line(settings: Settings, *, interactive: bool, reviewer_roles: Sequence[str] = ()) -> str:
    """What `serve` prints once it listens: the address, and how to sign in.

    Only a person at a terminal gets a link that signs the demo user in (and, for an app with
    `reviewer_roles`, a second one that opens the review page as a reviewer holding them). A log
    file or a pipe keeps what it is given and is read by others, and no valid credential may end
    up in one.
    """
    url = _browser_url(settings.host, settings.port)
    if settings.jwt is not None:
        return f"{_PROG} is ready on {url} (sign in with a token of your identity provider)"
    if interactive:
        # The token rides in the URL's fragment, which browsers never send to the server, so it
        # cannot reach the access log either; the page moves it to session storage.
        line = f"{_PROG} is ready: open {url}#token={issue_token(settings.secret, DEFAULT_USER)}"
        if reviewer_roles:
            token = issue_token(settings.secret, DEFAULT_REVIEWER, roles=tuple(reviewer_roles))
            line += (
                f"\n  review as {DEFAULT_REVIEWER} ({', '.join(reviewer_roles)}): {url}review#token={token}"
            )
        return line
    return f"{_PROG} is ready on {url} (sign in with a token from `{_PROG} token USER`)"


def _migrate(database_url: str) -> int:
    revision = asyncio.run(_upgrade(database_url))
    say(f"database {_redacted(database_url)} is up to date: schema revision {revision!r}")
    return 0


def _chat(
    settings: Settings, app: ChatApp[Any], user_id: str | None, thread_id: str | None, *, log_file: str | None
) -> int:
    # Logs go where `--log-file` says, never into the conversation (`cli.chat_logs`).
    from agent import setup_tracing

    from .chat import INTERRUPTED, chat

    if log_file == "-":
        # On the terminal, run logs (a refund, a failed run's traceback) would tear through the
        # conversation; a schema upgrade is still worth a line, and warnings stay.
        for name in ("agent", "store.business"):
            logging.getLogger(name).setLevel(logging.WARNING)
    install_log_filters(settings.tracing.secrets)
    tracing = setup_tracing(settings.tracing)
    try:
        return asyncio.run(
            chat(
                app,
                settings.database_url,
                options=settings.runtime_options(),
                user_id=user_id,
                thread_id=thread_id,
            )
        )
    except KeyboardInterrupt:
        # Ctrl-C the chat's loop does not handle (before it starts, off POSIX, a second one while it
        # closes). An interrupted run was put back in its queue; `--thread` continues it.
        print(file=sys.stderr)
        return INTERRUPTED
    finally:
        tracing.shutdown()


def _trace(run_id: str, database_url: str | None, trace_file: Path | None) -> int:
    from .trace import TraceFileError, render_trace, run_traces, stored_trace_id

    path = trace_file or Settings.resolve_trace_file()
    if path is None:
        print(f"{_PROG}: error: tracing to a file is off (DURABLE_CHAT_TRACE_FILE=off)", file=sys.stderr)
        return 1
    url = Settings.resolve_database_url(database_url)
    try:
        traces = run_traces(path, run_id, stored_trace_id(url, run_id))
    except TraceFileError as error:
        return _failed(error)
    for spans in traces:
        render_trace(spans, sys.stdout)
    return 0


def _token(secret: str, user_id: str, roles: list[str]) -> int:
    try:
        token = issue_token(secret, user_id, roles=roles)
    except ValueError as error:
        print(f"{_PROG}: error: {error}", file=sys.stderr)
        return 2
    say(token)
    return 0


def _threads(database_url: str, user_id: str) -> int:
    from store import Database

    async def listed() -> list[Thread]:
        async with await Database.connect(database_url) as db:
            return await db.threads.list(user_id=user_id, limit=_THREADS_SHOWN)

    threads = asyncio.run(listed())
    if not threads:
        say(f"no threads for user {user_id!r}")
        return 0
    rows = [
        (t.thread_id, t.title or "-", t.status, t.updated_at.strftime("%Y-%m-%d %H:%M:%S")) for t in threads
    ]
    widths = [max(len(row[i]) for row in [_THREAD_COLUMNS, *rows]) for i in range(3)]
    for row in [_THREAD_COLUMNS, *rows]:
        say("  ".join([*(cell.ljust(width) for cell, width in zip(row, widths, strict=False)), row[3]]))
    return 0


async def _upgrade(database_url: str) -> str | None:
    """Open the store, which creates or upgrades the schema, and return the schema revision."""
    from store import SqlConversationStore, current_revision

    store = await SqlConversationStore.connect(database_url)
    try:
        return await current_revision(store.engine)
    finally:
        await store.aclose()


def _configure_logging(secrets: Iterable[str] = ()) -> None:
    # Our own packages speak at INFO (e.g. a schema upgrade); libraries only when something is wrong.
    # Every line is redacted and, inside a run, names its trace; called again once the secrets are known.
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT)
    install_log_filters(secrets)
    for package in OWN_PACKAGES:
        logging.getLogger(package).setLevel(logging.INFO)


def _browser_url(host: str, port: int) -> str:
    # A wildcard address is where the server listens, not one a browser can open.
    if host in {"0.0.0.0", ""}:
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://[{host}]:{port}/" if ":" in host else f"http://{host}:{port}/"


def _redacted(url: str) -> str:
    return re.sub(r"(://[^/:@]*:)[^/@]*@", r"\1***@", url)


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = 0
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number (1-65535)")
    return port


def _add_db(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--db",
        metavar="URL",
        help="database URL (env DURABLE_CHAT_DATABASE_URL; default: SQLite under ./data)",
    )


def _add_model(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        metavar="NAME",
        help="override the app agent's model: a pydantic-ai model string such as 'openai:gpt-4o', "
        "or a name the app offers (the demo shop's 'demo') (env DURABLE_CHAT_MODEL)",
    )


def _add_app(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        help="the ChatApp to serve, or a function returning one, importable from the working directory "
        "(env DURABLE_CHAT_APP; default: the demo shop)",
    )
