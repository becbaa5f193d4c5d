"""Loading the app to serve from `MODULE:ATTR`, as uvicorn loads an ASGI app.

The module is imported with the working directory first on the Python path. durable-chat's own
packages are top-level (`agent`, `cli`, `store`, `stream`, `web`), and pydantic-ai projects often
have an `agent.py`: such a module would shadow ours or be shadowed by it, depending on the path's
order, and fail in confusing ways. It is refused up front, with a message that says to rename it.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import ChatApp

__all__ = ("DEFAULT_APP", "OWN_PACKAGES", "AppLoadError", "load_app")

DEFAULT_APP = "agent.demo:shop_app"
"""The app served when none is named: the demo shop."""

OWN_PACKAGES = ("agent", "cli", "store", "stream", "web", "worker")
"""durable-chat's top-level packages."""


_OURS = Path(__file__).resolve().parent.parent
"""The folder that holds our packages."""


class AppLoadError(Exception):
    """`MODULE:ATTR` does not name a `ChatApp`; the message says what is wrong, in one line."""


def load_app(spec: str, *, directory: Path | None = None) -> ChatApp[Any]:
    """The `ChatApp` that `spec` (`MODULE:ATTR`) names: the attribute itself, or what calling it returns.

    Args:
        spec: Such as `travel:app` or `my_project.chat:build_app`; ATTR may be dotted.
        directory: Where the module is looked for first; the working directory by default.

    Raises:
        AppLoadError: No such module or attribute, a module that clashes with durable-chat's own,
            an import that fails, or something that is not a `ChatApp`.
    """
    module_name, _, attribute = spec.partition(":")
    module_name, attribute = module_name.strip(), attribute.strip()
    if not module_name or not attribute:
        raise AppLoadError(f"--app must be MODULE:ATTR (such as 'travel:app'), not {spec!r}")
    base = (Path.cwd() if directory is None else directory).resolve()
    _refuse_clashes(base)
    if str(base) not in sys.path:
        sys.path.insert(0, str(base))
    module = _import(module_name)
    found: object = module
    for part in attribute.split("."):
        if not hasattr(found, part):
            raise AppLoadError(f"module {module_name!r} has no attribute {attribute!r}")
        found = getattr(found, part)
    return _as_app(spec, found)


def _refuse_clashes(base: Path) -> None:
    for name in OWN_PACKAGES:
        candidates = [base / f"{name}.py", base / name / "__init__.py"]
        for candidate in candidates:
            if candidate.is_file() and not _is_ours(name, candidate):
                raise AppLoadError(
                    f"{str(candidate)!r} has the same name as durable-chat's own package {name!r}; "
                    f"rename your module (e.g. to 'my_{name}') so neither hides the other"
                )


def _is_ours(name: str, candidate: Path) -> bool:
    # Our packages sit side by side, wherever this one is installed or checked out.
    return candidate.resolve() == (_OURS / name / "__init__.py").resolve()


def _import(module_name: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name is not None and (module_name == error.name or module_name.startswith(f"{error.name}.")):
            raise AppLoadError(
                f"no module named {module_name!r} (looked in the working directory and on the Python path)"
            ) from error
        raise AppLoadError(f"importing {module_name!r} failed: {type(error).__name__}: {error}") from error
    except Exception as error:  # the user's module raised while importing: say what, in one line
        raise AppLoadError(f"importing {module_name!r} failed: {type(error).__name__}: {error}") from error


def _as_app(spec: str, found: object) -> ChatApp[Any]:
    # Imported here: reading `DEFAULT_APP` or `OWN_PACKAGES` (the settings, every CLI command's
    # logging) must not import pydantic-ai's agent.
    from .app import ChatApp

    if isinstance(found, ChatApp):
        return found  # pyright: ignore[reportUnknownVariableType]
    if not callable(found):
        raise AppLoadError(f"{spec!r} is a {type(found).__name__}, not a ChatApp or a function returning one")
    try:
        made = found()
    except TypeError as error:
        raise AppLoadError(f"calling {spec!r} failed (it must take no arguments): {error}") from error
    except Exception as error:  # the user's factory raised: say what, in one line
        raise AppLoadError(f"calling {spec!r} failed: {type(error).__name__}: {error}") from error
    if not isinstance(made, ChatApp):
        raise AppLoadError(f"{spec!r} returned a {type(made).__name__}, not a ChatApp")
    return made  # pyright: ignore[reportUnknownVariableType]
