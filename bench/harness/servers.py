"""Servers as processes: ours (`python -m cli serve`) and the baselines, started on a free port and
watched (CPU and memory from /proc, trouble in their logs), each from a copy of the source tree.

The machine's cores change speed for seconds at a time and are shared with other work: a server pinned
to its own core (`taskset`) has its CPU per turn measured apart from the clients', pinned to the other.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Generator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from agent import OWN_PACKAGES

from .reports import ROOT

SECRET = "bench-secret"
UNLIMITED = {"DURABLE_CHAT_MESSAGES_PER_MINUTE": "1000000"}
"""For a benchmark whose users send turn after turn: the per-user message rate would refuse them."""
_PACKAGES = (*OWN_PACKAGES, "bench")
"""Every package a server imports (ours, and the bench's own): one left out would be imported from
the working tree, mixing two versions in one comparison."""
_TICKS = os.sysconf("SC_CLK_TCK")
_ACCESS = re.compile(r'"[A-Z]+ \S+ HTTP/[\d.]+" (\d{3})')
_TROUBLE = re.compile(r"ERROR|CRITICAL|WARNING|Traceback|(Error|Exception)\b")


SERVER_CORE, CLIENT_CORE = 1, 0


def pinned(argv: Sequence[str], core: int = SERVER_CORE) -> list[str]:
    """`argv` run on `core` only (unchanged when `taskset` is missing)."""
    return ["taskset", "-c", str(core), *argv] if shutil.which("taskset") else list(argv)


def pin_this_process(core: int = CLIENT_CORE) -> None:
    """Keep this process (the clients) on `core`, when the machine has more than one."""
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) > 1:
        os.sched_setaffinity(0, {core})


def core_wait(pid: int | str) -> float:
    """Seconds the process's main thread was runnable but waiting for a core (`/proc/PID/schedstat`)."""
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def machine_ticks() -> tuple[int, int]:
    """All cores' busy and total clock ticks so far (`/proc/stat`), whoever used them."""
    fields = [int(value) for value in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)


def server_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """This process's environment without `DURABLE_CHAT_*`, with the benchmarks' secret and rate limits."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("DURABLE_CHAT_")}
    env.update(
        DURABLE_CHAT_SECRET=SECRET,
        DURABLE_CHAT_RATE_LIMIT_BURST="1000",
        DURABLE_CHAT_RATE_LIMIT_PER_SECOND="1000",
        PYTHONUNBUFFERED="1",
    )
    return env | dict(extra or {})


PLAIN_APP = "bench.harness.plain_app:app"
"""A user's app as written (`bench/harness/plain_app.py`), for `ours_argv(app=...)`."""


def ours_argv(database_url: str, module: str = "cli", *, app: str | None = None) -> list[str]:
    """`durable-chat serve` on the demo model, or `app` on its own model (`module`: a wrapper that
    runs the CLI)."""
    serve = [sys.executable, "-m", module, "serve", "--port", "{port}", "--db", database_url]
    return [*serve, "--app", app] if app else [*serve, "--model", "demo"]


def adapter_argv(database_url: str, *, app: str = "shop") -> list[str]:
    """pydantic-ai's own adapter serving the shop's agent, or the plain app's (`bench.harness.adapter`)."""
    argv = [sys.executable, "-m", "bench.harness.adapter", "--port", "{port}", "--db", database_url]
    return [*argv, "--app", app] if app != "shop" else argv


def snapshot(target: Path) -> Path:
    """Copy the packages the servers import, so every server of a run runs the code as it was at its start."""
    for package in _PACKAGES:
        shutil.copytree(ROOT / package, target / package, ignore=shutil.ignore_patterns("__pycache__"))
    return target


@contextmanager
def folder(prefix: str, *, keep: bool = False) -> Generator[Path]:
    """A new temporary folder (the servers' logs, SQLite files), removed afterwards unless `keep`."""
    path = Path(tempfile.mkdtemp(prefix=f"bench-{prefix}-"))
    try:
        yield path
    finally:
        if keep:
            print(f"logs and databases kept in {path}", flush=True)
        else:
            shutil.rmtree(path, ignore_errors=True)


def raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files to the hard one; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (1 << 20 if hard == resource.RLIM_INFINITY else hard, hard)
        )
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _times(path: Path) -> tuple[float, float]:
    fields = path.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / _TICKS, int(fields[12]) / _TICKS


@dataclass
class ServerProcess:
    name: str
    process: subprocess.Popen[bytes]
    port: int
    stdout: Path
    stderr: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.process.pid

    def status(self, key: str) -> int | None:
        """A `/proc/PID/status` field (`VmRSS`, `VmHWM` in kB, `Threads`), or `None` once it is gone."""
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        return next((int(line.split()[1]) for line in text.splitlines() if line.startswith(key + ":")), None)

    def cpu_seconds(self) -> float:
        """User plus system CPU time the process has used so far, every thread."""
        return sum(_times(Path(f"/proc/{self.pid}/stat")))

    async def stop(self) -> int | None:
        """SIGTERM (uvicorn's graceful shutdown), then SIGKILL after 20 s; the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.process.wait, 20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                await asyncio.to_thread(self.process.wait)
        return self.process.returncode

    def trouble(self) -> tuple[list[str], dict[str, int]]:
        """Log lines that look like errors or warnings, and the access log's non-2xx answers by status."""
        lines: list[str] = []
        statuses: dict[str, int] = {}
        for path in (self.stderr, self.stdout):
            for line in path.read_text(errors="replace").splitlines():
                if match := _ACCESS.search(line):
                    if not match.group(1).startswith("2"):
                        statuses[match.group(1)] = statuses.get(match.group(1), 0) + 1
                elif _TROUBLE.search(line):
                    lines.append(line.rstrip())
        return lines, statuses


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _spawn(
    argv: list[str], env: Mapping[str, str], stdout: Path, stderr: Path, cwd: Path | None
) -> subprocess.Popen[bytes]:
    with stdout.open("wb") as out, stderr.open("wb") as err:
        return subprocess.Popen(
            argv,
            env=dict(env),
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            preexec_fn=raise_open_files_limit,
        )


@asynccontextmanager
async def serving(
    name: str, argv: Sequence[str], env: Mapping[str, str], logs: Path, *, cwd: Path | None = None
) -> AsyncGenerator[ServerProcess]:
    """`argv` (`{port}` in it replaced by a free port) started, once `GET /healthz` answers 200; stopped on leaving."""
    port = _free_port()
    stdout, stderr = logs / f"{name}.out", logs / f"{name}.err"
    process = _spawn([part.replace("{port}", str(port)) for part in argv], env, stdout, stderr, cwd)
    server = ServerProcess(name, process, port, stdout, stderr)
    try:
        deadline = time.monotonic() + 90
        async with httpx.AsyncClient(timeout=5) as client:
            while True:
                if process.poll() is not None:
                    raise RuntimeError(
                        f"{name} exited with {process.returncode}: {stderr.read_text()[-2000:]}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{server.base_url}/healthz")).status_code == 200:
                        break
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{name} did not answer /healthz within 90 s: {stderr.read_text()[-2000:]}"
                    )
                await asyncio.sleep(0.2)
        yield server
    finally:
        await server.stop()
