"""The server processes `bench.web` runs: started on a free loopback port, watched, stopped."""

from __future__ import annotations

import asyncio
import os
import re
import resource
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

__all__ = ("Sampler", "ServerProcess", "raise_open_files_limit", "start_server")

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
_ACCESS = re.compile(r'"[A-Z]+ \S+ HTTP/[\d.]+" (\d{3})')
_TROUBLE = re.compile(r"ERROR|CRITICAL|WARNING|Traceback|(Error|Exception)\b")


def raise_open_files_limit() -> int:
    """Raise this process's soft limit on open files to the hard one; the soft limit now."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        wanted = 1 << 20 if hard == resource.RLIM_INFINITY else hard
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


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
        """A `/proc/<pid>/status` field in kB (`VmRSS`, `VmHWM`), or `None` once it is gone."""
        try:
            text = Path(f"/proc/{self.pid}/status").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
        return None

    def cpu_seconds(self) -> float:
        """User plus system CPU time the process has used so far."""
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS

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


async def start_server(
    name: str,
    argv: Sequence[str],
    env: dict[str, str],
    log_dir: Path,
    *,
    cwd: Path | None = None,
    port: int | None = None,
) -> ServerProcess:
    """Start `argv` (`{port}` in it is replaced) and wait until `GET /healthz` answers 200."""
    port = _free_port() if port is None else port
    stdout = log_dir / f"{name}.out"
    stderr = log_dir / f"{name}.err"
    process = _spawn(argv, port, env, stdout, stderr, cwd)
    server = ServerProcess(name, process, port, stdout, stderr)
    deadline = time.monotonic() + 90
    async with httpx.AsyncClient(timeout=5) as client:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}: {stderr.read_text()[-2000:]}")
            try:
                if (await client.get(f"{server.base_url}/healthz")).status_code == 200:
                    return server
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                await server.stop()
                raise RuntimeError(
                    f"{name} did not answer /healthz within 90 s: {stderr.read_text()[-2000:]}"
                )
            await asyncio.sleep(0.2)


def _spawn(
    argv: Sequence[str], port: int, env: dict[str, str], stdout: Path, stderr: Path, cwd: Path | None
) -> subprocess.Popen[bytes]:
    with stdout.open("wb") as out, stderr.open("wb") as err:
        return subprocess.Popen(
            [part.replace("{port}", str(port)) for part in argv],
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            preexec_fn=raise_open_files_limit,
        )


@dataclass
class Sampler:
    """Polls a server's resident memory while a load runs; the peak is `VmHWM` at the end, too."""

    server: ServerProcess
    interval: float = 0.1
    peak_kb: int = 0
    _task: asyncio.Task[None] | None = field(default=None, repr=False)

    def start(self) -> None:
        self._task = asyncio.create_task(self._poll())

    async def stop(self) -> int:
        """The peak RSS in kB: the largest sample or the kernel's high-water mark, whichever is larger."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
        return max(self.peak_kb, self.server.status("VmHWM") or 0)

    async def _poll(self) -> None:
        while True:
            self.peak_kb = max(self.peak_kb, self.server.status("VmRSS") or 0)
            await asyncio.sleep(self.interval)
