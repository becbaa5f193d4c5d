"""`--app MODULE:ATTR`: the app to serve, loaded from the working directory as uvicorn does."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import AppLoadError, ChatApp, load_app
from agent.loader import DEFAULT_APP

from .test_cli import REPO_ROOT, run_cli

APP_MODULE = """\
from pydantic_ai import Agent
from pydantic_ai.models.test import TestModel

from agent import ChatApp

app = ChatApp(agent=Agent(TestModel(), name="{name}"))
made = 0

def build():
    global made
    made += 1
    return ChatApp(agent=Agent(TestModel(), name="built"))

class Holder:
    inner = app

def needs_arguments(x):
    return app

def not_an_app():
    return 42

def broken():
    raise RuntimeError("no API key")

number = 7

from starlette.applications import Starlette

asgi = Starlette()
bare = Agent(TestModel(), name="bare")

def make_bare():
    return Agent(TestModel(), name="made bare")

"""

WHAT = (
    "an app is a ChatApp (`app = ChatApp(agent=my_agent)`, `from agent import ChatApp`), a "
    "pydantic-ai Agent (served as `ChatApp(agent=...)`), or a function of no arguments returning either"
)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A user's project folder as the working directory; the modules it defines are forgotten after."""
    monkeypatch.chdir(tmp_path)
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        del sys.modules[name]
    if str(tmp_path) in sys.path:
        sys.path.remove(str(tmp_path))


def test_an_app_a_factory_and_a_dotted_attribute_load(project: Path) -> None:
    (project / "travel_desk.py").write_text(APP_MODULE.format(name="travel"))

    app = load_app("travel_desk:app")
    built = load_app("travel_desk:build")
    inner = load_app("travel_desk:Holder.inner")

    assert isinstance(app, ChatApp)
    assert (app.title, built.title) == ("travel", "built")
    assert inner is app
    assert sys.modules["travel_desk"].made == 1


def test_the_default_is_the_demo_shop(project: Path) -> None:
    assert load_app(DEFAULT_APP).title == "Shop support"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("travel_desk", "--app must be MODULE:ATTR (such as 'travel:app'), not 'travel_desk'"),
        (":app", "--app must be MODULE:ATTR (such as 'travel:app'), not ':app'"),
        ("nowhere:app", "no module named 'nowhere' (looked in the working directory and on the Python path)"),
        ("travel_desk:missing", "module 'travel_desk' has no attribute 'missing'"),
        (
            "travel_desk:number",
            f"'travel_desk:number' is a int, not a ChatApp or a function returning one; {WHAT}",
        ),
        ("travel_desk:not_an_app", f"'travel_desk:not_an_app' returned a int, not a ChatApp; {WHAT}"),
        (
            "travel_desk:asgi",
            f"'travel_desk:asgi' is a Starlette, not a ChatApp or a function returning one; {WHAT}",
        ),
        (
            "travel_desk:Starlette",
            f"'travel_desk:Starlette' is the class Starlette, not a ChatApp or a function returning one; {WHAT}",
        ),
        (
            "travel_desk:needs_arguments",
            "calling 'travel_desk:needs_arguments' failed (it must take no arguments): "
            "needs_arguments() missing 1 required positional argument: 'x'",
        ),
        ("travel_desk:broken", "calling 'travel_desk:broken' failed: RuntimeError: no API key"),
        (
            "uses_missing:app",
            "importing 'uses_missing' failed: ModuleNotFoundError: No module named 'httpx_nope'",
        ),
    ],
)
def test_a_bad_app_is_one_clear_line(project: Path, spec: str, message: str) -> None:
    (project / "travel_desk.py").write_text(APP_MODULE.format(name="travel"))
    (project / "uses_missing.py").write_text("import httpx_nope\n")

    with pytest.raises(AppLoadError) as raised:
        load_app(spec)

    if message.endswith(": "):  # the refusal's own words follow
        assert str(raised.value).startswith(message)
    else:
        assert str(raised.value) == message


def test_a_bare_agent_is_served_as_a_chat_app(project: Path) -> None:
    (project / "travel_desk.py").write_text(APP_MODULE.format(name="travel"))

    bare = load_app("travel_desk:bare")
    made = load_app("travel_desk:make_bare")

    assert isinstance(bare, ChatApp)
    assert bare.agent is sys.modules["travel_desk"].bare
    assert (bare.title, made.title) == ("bare", "made bare")


@pytest.mark.parametrize("clash", ["agent.py", "store.py", "web/__init__.py", "cli.py", "stream/__init__.py"])
def test_a_module_named_like_ours_is_refused_with_a_rename_hint(project: Path, clash: str) -> None:
    (project / clash).parent.mkdir(exist_ok=True)
    (project / clash).write_text("my_agent = 'theirs'\n")
    (project / "travel_desk.py").write_text(APP_MODULE.format(name="travel"))
    name = clash.split("/")[0].removesuffix(".py")

    with pytest.raises(AppLoadError) as raised:
        load_app("travel_desk:app")

    assert str(raised.value) == (
        f"{str(project / clash)!r} has the same name as durable-chat's own package {name!r}; "
        f"rename your module (e.g. to 'my_{name}') so neither hides the other"
    )


def test_a_folder_named_like_ours_without_python_in_it_is_no_clash(project: Path) -> None:
    (project / "web").mkdir()  # a frontend's folder, say
    (project / "web" / "index.html").write_text("<html></html>")
    (project / "travel_desk.py").write_text(APP_MODULE.format(name="travel"))

    assert load_app("travel_desk:app").title == "travel"


def test_serve_and_chat_say_what_is_wrong_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text("agent = None\n")
    (tmp_path / "travel_desk.py").write_text(APP_MODULE.format(name="travel"))

    clash = run_cli("serve", "--app", "travel_desk:app", "--port", "8765", cwd=tmp_path)
    (tmp_path / "agent.py").unlink()
    missing = run_cli("chat", "--app", "nowhere:app", cwd=tmp_path)
    bad_model = run_cli("serve", "--app", "travel_desk:app", "--model", "gpt-4o", cwd=tmp_path)
    no_provider = run_cli("serve", "--app", "travel_desk:app", "--model", "nonsense:foo", cwd=tmp_path)
    from_env = run_cli("chat", cwd=tmp_path, env={"DURABLE_CHAT_APP": "travel_desk:number"})

    for result in (clash, missing, bad_model, no_provider, from_env):
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1, result.stderr
        assert "Traceback" not in result.stderr
    assert clash.stderr.startswith("durable-chat: error: ")
    assert "has the same name as durable-chat's own package 'agent'; rename your module" in clash.stderr
    assert missing.stderr == (
        "durable-chat: error: no module named 'nowhere' (looked in the working directory and on the Python path)\n"
    )
    assert bad_model.stderr == (
        "durable-chat: error: unknown model 'gpt-4o': give a pydantic-ai model string such as "
        "'openai:gpt-4o' (this app's own model names: none)\n"
    )
    assert (
        no_provider.stderr
        == "durable-chat: error: cannot use model 'nonsense:foo': Unknown model: nonsense:foo\n"
    )
    assert "'travel_desk:number' is a int, not a ChatApp" in from_env.stderr


def test_the_terminal_chat_talks_to_the_app_named(tmp_path: Path) -> None:
    (tmp_path / "travel_desk.py").write_text(APP_MODULE.format(name="travel"))

    result = run_cli("chat", "--app", "travel_desk:app", cwd=tmp_path, input="Hello there\n/quit\n")

    assert result.returncode == 0, result.stderr
    assert "success (no tool calls)" in result.stdout  # what pydantic-ai's TestModel answers
    assert (tmp_path / "data" / "durable-chat.db").is_file()


def test_our_own_checkout_as_the_working_directory_is_no_clash(monkeypatch: pytest.MonkeyPatch) -> None:
    # `make run` serves from the checkout, whose agent/, cli/, store/… are ours, imported or not yet.
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.delitem(sys.modules, "cli", raising=False)

    assert load_app(DEFAULT_APP).title == "Shop support"
