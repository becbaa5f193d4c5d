"""`docs/benchmarks.md` is made of sections, one per benchmark, each between its own markers."""

from __future__ import annotations

from pathlib import Path

__all__ = ("write_section",)

_HEADER = "# Benchmarks\n\nEach section is written by its benchmark; see `bench/README.md`.\n"


def write_section(path: Path, name: str, text: str) -> None:
    """Replace the section `name` of `path` (between `<!-- bench:name -->` markers), or append it.

    The rest of the file is left as it is, so each benchmark rewrites only its own results.
    """
    begin, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    document = path.read_text(encoding="utf-8") if path.exists() else _HEADER
    block = f"{begin}\n{text.rstrip()}\n{end}"
    start, stop = document.find(begin), document.find(end)
    if start != -1 and stop > start:
        document = document[:start] + block + document[stop + len(end) :]
    else:
        document = document.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(document, encoding="utf-8")
