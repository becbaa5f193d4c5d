"""Loading the app to serve from `MODULE:ATTR`, as uvicorn loads an ASGI app.

The module is imported with the working directory first on the Python path. durable-chat's own
packages are top-level (`agent`, `cli`, `store`, `stream`, `web`), and pydantic-ai projects often
have an `agent.py`: such a module would shadow ours or be shadowed by it, depending on the path's
order, and fail in confusing ways. It is refused up front, with a message that says to rename it.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeGuard

if TYPE_CHECKING:
    from pydantic_ai import Agent

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


_WHAT_AN_APP_IS = (
    "an app is a ChatApp (`app = ChatApp(agent=my_agent)`, `from agent import ChatApp`), a "
    "pydantic-ai Agent (served as `ChatApp(agent=...)`), or a function of no arguments returning either"
)


def _as_app(spec: str, found: object) -> ChatApp[Any]:
    # Imported here: reading `DEFAULT_APP` or `OWN_PACKAGES` (the settings, every CLI command's
    # logging) must not import pydantic-ai's agent.
    from pydantic_ai import Agent

    from .app import ChatApp

    if isinstance(found, ChatApp):
        return found  # pyright: ignore[reportUnknownVariableType]
    if isinstance(found, Agent):
        return _wrapped(spec, found)  # pyright: ignore[reportUnknownArgumentType]
    if not _is_function(found):
        # A class, or an instance of anything else (a Starlette or FastAPI app is callable too, with
        # `(scope, receive, send)`): calling it would only say it wants arguments.
        raise AppLoadError(
            f"{spec!r} is {_described(found)}, not a ChatApp or a function returning one; {_WHAT_AN_APP_IS}"
        )
    try:
        made = found()
    except TypeError as error:
        raise AppLoadError(f"calling {spec!r} failed (it must take no arguments): {error}") from error
    except Exception as error:  # the user's factory raised: say what, in one line
        raise AppLoadError(f"calling {spec!r} failed: {type(error).__name__}: {error}") from error
    if isinstance(made, ChatApp):
        return made  # pyright: ignore[reportUnknownVariableType]
    if isinstance(made, Agent):
        return _wrapped(spec, made)  # pyright: ignore[reportUnknownArgumentType]
    raise AppLoadError(f"{spec!r} returned {_described(made)}, not a ChatApp; {_WHAT_AN_APP_IS}")


def _wrapped(spec: str, agent: Agent[Any, Any]) -> ChatApp[Any]:
    from .app import ChatApp

    try:
        return ChatApp(agent=agent)
    except Exception as error:  # ChatApp refuses an agent it cannot serve: say why, in one line
        raise AppLoadError(f"{spec!r} is an Agent that cannot be served: {error}") from error


def _is_function(found: object) -> TypeGuard[Callable[[], object]]:
    return inspect.isfunction(found) or inspect.ismethod(found) or isinstance(found, functools.partial)


def _described(found: object) -> str:
    if isinstance(found, type):
        return f"the class {found.__qualname__}"
    return f"a {type(found).__name__}"
