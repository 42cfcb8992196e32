"""End-to-end tests of `toolhost serve --mcp`, driven by the official Python
MCP SDK (a client that is not ours).

Run through `cargo test -p toolhost --test mcp_python`, which creates the
virtualenv and sets TOOLHOST_BIN and TOOLHOST_CACHE_DIR.
"""

import json
import os
import shutil
import subprocess
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

BIN = os.environ["TOOLHOST_BIN"]
CACHE = os.environ.get("TOOLHOST_CACHE_DIR", "")
TOOLS_BUILD = Path(os.environ["TOOLHOST_TOOL_COMPONENTS"])

ASK_WRITES = """
version = 1
mode = "workspace-write"

[[rules]]
tool = "write_file"
decision = "ask"
reason = "writes need a human"
"""

DENY_WRITES = """
version = 1
mode = "workspace-write"

[[rules]]
tool = "write_*"
decision = "deny"
reason = "no writes in this session"
"""


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


class Env:
    """A workspace, a state dir and the server's stderr, under tmp_path."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path
        self.ws = tmp_path / "ws"
        self.ws.mkdir(exist_ok=True)
        self.state = tmp_path / "state"
        self.errlog_path = tmp_path / "server.stderr"

    def policy(self, text: str) -> str:
        p = self.root / "policy.toml"
        p.write_text(text)
        return str(p)

    def log_events(self):
        """The session log, read after the server has exited."""
        out = subprocess.run(
            [BIN, "log", "--json", "--state", str(self.state), "--workspace", str(self.ws)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    @asynccontextmanager
    async def session(self, *extra, elicitation=None, message_handler=None):
        args = ["serve", "--mcp", "--workspace", str(self.ws), "--state", str(self.state), *extra]
        env = {"TOOLHOST_LOG": "info"}
        if CACHE:
            env["TOOLHOST_CACHE_DIR"] = CACHE
        params = StdioServerParameters(command=BIN, args=args, env=env)
        kwargs = {}
        if elicitation is not None:
            kwargs["elicitation_callback"] = elicitation
        if message_handler is not None:
            kwargs["message_handler"] = message_handler
        with open(self.errlog_path, "a") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, **kwargs) as s:
                    await s.initialize()
                    yield s


def run(coro_fn):
    anyio.run(coro_fn)


def test_initialize_and_list(tmp_path):
    env = Env(tmp_path)

    async def main():
        async with env.session() as s:
            assert s.server_info is not None and s.server_info.name == "toolhost"
            listed = await s.list_tools()
            names = sorted(t.name for t in listed.tools)
            assert names == ["grep", "http_fetch", "list_dir", "read_file", "sleep", "write_file"], names
            for t in listed.tools:
                assert t.description, t.name
                assert t.input_schema.get("type") == "object", (t.name, t.input_schema)
            read_file = next(t for t in listed.tools if t.name == "read_file")
            assert "path" in read_file.input_schema.get("properties", {})
            assert read_file.output_schema is not None and read_file.output_schema.get("type") == "object"

    run(main)


def test_successful_call_has_structured_content(tmp_path):
    env = Env(tmp_path)
    (env.ws / "hello.txt").write_text("hello from the workspace\n")

    async def main():
        async with env.session("--mode", "read-only") as s:
            await s.list_tools()
            r = await s.call_tool("read_file", {"path": "hello.txt"})
            assert not r.is_error, text_of(r)
            assert "hello from the workspace" in text_of(r)
            assert isinstance(r.structured_content, dict), r.structured_content
            assert "hello from the workspace" in json.dumps(r.structured_content)

    run(main)


def test_invalid_args_is_an_error_result(tmp_path):
    env = Env(tmp_path)

    async def main():
        async with env.session() as s:
            r = await s.call_tool("read_file", {"nope": 1})
            assert r.is_error
            assert "INVALID_ARGS" in text_of(r), text_of(r)
            r = await s.call_tool("no_such_tool", {})
            assert r.is_error and "UNKNOWN_TOOL" in text_of(r), text_of(r)
            # The server is still there.
            assert len((await s.list_tools()).tools) == 6

    run(main)


def test_policy_deny_is_an_error_result(tmp_path):
    env = Env(tmp_path)
    policy = env.policy(DENY_WRITES)

    async def main():
        async with env.session("--policy", policy) as s:
            r = await s.call_tool("write_file", {"path": "out.txt", "content": "x"})
            assert r.is_error
            assert "POLICY_DENIED" in text_of(r) and "no writes in this session" in text_of(r), text_of(r)

    run(main)
    assert not (env.ws / "out.txt").exists()


def test_ask_without_elicitation_or_approver_is_unavailable(tmp_path):
    env = Env(tmp_path)
    policy = env.policy(ASK_WRITES)

    async def main():
        async with env.session("--policy", policy) as s:
            r = await s.call_tool("write_file", {"path": "out.txt", "content": "x"})
            assert r.is_error and "APPROVAL_UNAVAILABLE" in text_of(r), text_of(r)

    run(main)
    assert not (env.ws / "out.txt").exists()


def _elicitation(answer):
    asked = []

    async def callback(context, params):
        asked.append(params)
        return answer

    return asked, callback


def test_elicitation_approves(tmp_path):
    env = Env(tmp_path)
    policy = env.policy(ASK_WRITES)
    asked, callback = _elicitation(types.ElicitResult(action="accept", content={"approve": True}))

    async def main():
        async with env.session("--policy", policy, elicitation=callback) as s:
            r = await s.call_tool("write_file", {"path": "approved.txt", "content": "approved"})
            assert not r.is_error, text_of(r)

    run(main)
    assert len(asked) == 1
    message = asked[0].message
    for needle in ["write_file", "approved.txt", "writes need a human", "workspace-write"]:
        assert needle in message, (needle, message)
    assert (env.ws / "approved.txt").read_text() == "approved"
    decided = [e for e in env.log_events() if e["kind"] == "approval/decided"]
    assert [d["payload"]["outcome"] for d in decided] == ["allowed-once"]


def test_elicitation_declines(tmp_path):
    env = Env(tmp_path)
    policy = env.policy(ASK_WRITES)
    asked, callback = _elicitation(types.ElicitResult(action="decline"))

    async def main():
        async with env.session("--policy", policy, elicitation=callback) as s:
            r = await s.call_tool("write_file", {"path": "declined.txt", "content": "no"})
            assert r.is_error and "APPROVAL_REJECTED" in text_of(r), text_of(r)

    run(main)
    assert not (env.ws / "declined.txt").exists()


def test_elicitation_dismissed_is_cancelled(tmp_path):
    env = Env(tmp_path)
    policy = env.policy(ASK_WRITES)
    _, callback = _elicitation(types.ElicitResult(action="cancel"))

    async def main():
        async with env.session("--policy", policy, elicitation=callback) as s:
            r = await s.call_tool("write_file", {"path": "dismissed.txt", "content": "no"})
            assert r.is_error and "APPROVAL_CANCELLED" in text_of(r), text_of(r)

    run(main)
    assert not (env.ws / "dismissed.txt").exists()


def test_progress_notifications_from_sleep(tmp_path):
    env = Env(tmp_path)
    reports = []

    async def on_progress(progress, total, message):
        reports.append((progress, total, message))

    async def main():
        async with env.session() as s:
            r = await s.call_tool("sleep", {"ms": 500}, progress_callback=on_progress)
            assert not r.is_error, text_of(r)

    run(main)
    assert len(reports) >= 2, reports
    values = [p for p, _, _ in reports]
    assert values == sorted(values), values


def test_cancellation_stops_the_body(tmp_path):
    env = Env(tmp_path)
    started = {}

    async def main():
        async with env.session() as s:
            progressed = anyio.Event()

            async def on_progress(progress, total, message):
                progressed.set()

            async def call():
                await s.call_tool("sleep", {"ms": 20000}, progress_callback=on_progress)

            async with anyio.create_task_group() as tg:
                started["at"] = time.monotonic()
                tg.start_soon(call)
                with anyio.fail_after(10):
                    await progressed.wait()
                # Abandoning the request makes the SDK send notifications/cancelled.
                tg.cancel_scope.cancel()
            # The server keeps serving after a cancellation.
            r = await s.call_tool("list_dir", {"path": "."})
            assert not r.is_error, text_of(r)

    run(main)
    events = env.log_events()
    calls = [e for e in events if e["kind"] == "tool/call" and e["payload"].get("tool") == "sleep"]
    assert len(calls) == 1, calls
    call_id = calls[0]["call_id"]
    results = [e for e in events if e["kind"] == "tool/result" and e["call_id"] == call_id]
    assert len(results) == 1, events
    assert results[0]["payload"]["error"]["code"] == "CANCELLED", results[0]
    elapsed_ms = results[0]["at_unix_ms"] - calls[0]["at_unix_ms"]
    assert elapsed_ms < 10_000, f"the body was not stopped: result after {elapsed_ms} ms"


def test_list_changed_after_the_tools_directory_changes(tmp_path):
    env = Env(tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    shutil.copy(TOOLS_BUILD / "tool_read_file.wasm", tools / "reader.wasm")
    changed = []

    async def handler(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.append(time.monotonic())

    async def wait_changed(n):
        with anyio.fail_after(20):
            while len(changed) < n:
                await anyio.sleep(0.05)

    async def main():
        async with env.session("--tools", str(tools), "--tools-only", "--poll-ms", "100", message_handler=handler) as s:
            assert [t.name for t in (await s.list_tools()).tools] == ["read_file"]
            # Added.
            shutil.copy(TOOLS_BUILD / "tool_sleep.wasm", tools / "sleeper.wasm.tmp")
            os.rename(tools / "sleeper.wasm.tmp", tools / "sleeper.wasm")
            await wait_changed(1)
            assert sorted(t.name for t in (await s.list_tools()).tools) == ["read_file", "sleep"]
            r = await s.call_tool("sleep", {"ms": 10})
            assert not r.is_error, text_of(r)
            # A file that does not load keeps the previous tools.
            (tools / "broken.wasm").write_bytes(b"\0asm garbage")
            await anyio.sleep(1.0)
            assert len(changed) == 1, changed
            assert sorted(t.name for t in (await s.list_tools()).tools) == ["read_file", "sleep"]
            # Removed (and the broken file too).
            os.remove(tools / "broken.wasm")
            os.remove(tools / "sleeper.wasm")
            await wait_changed(2)
            assert [t.name for t in (await s.list_tools()).tools] == ["read_file"]
            r = await s.call_tool("sleep", {"ms": 10})
            assert r.is_error and "UNKNOWN_TOOL" in text_of(r)

    run(main)
    assert "cannot be loaded" in env.errlog_path.read_text()


def test_a_call_in_flight_finishes_on_its_host(tmp_path):
    env = Env(tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    shutil.copy(TOOLS_BUILD / "tool_sleep.wasm", tools / "sleeper.wasm")
    changed = anyio.Event()

    async def handler(message):
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async def main():
        async with env.session("--tools", str(tools), "--tools-only", "--poll-ms", "100", message_handler=handler) as s:
            results = {}

            async def call():
                results["r"] = await s.call_tool("sleep", {"ms": 1500})

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                await anyio.sleep(0.3)
                os.remove(tools / "sleeper.wasm")
                with anyio.fail_after(10):
                    await changed.wait()
            assert not results["r"].is_error, text_of(results["r"])
            assert (await s.list_tools()).tools == []

    run(main)


def test_embedded_and_directory_tools_collide_and_keep_the_old_host(tmp_path):
    env = Env(tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()

    async def main():
        async with env.session("--tools", str(tools), "--poll-ms", "100") as s:
            assert len((await s.list_tools()).tools) == 6
            shutil.copy(TOOLS_BUILD / "tool_sleep.wasm", tools / "another_sleep.wasm")
            await anyio.sleep(1.0)
            assert len((await s.list_tools()).tools) == 6
            r = await s.call_tool("sleep", {"ms": 10})
            assert not r.is_error, text_of(r)

    run(main)
    err = env.errlog_path.read_text()
    assert "cannot be loaded" in err and "sleep" in err, err


def _only_error(group):
    """The one MCPError inside (possibly nested) exception groups."""
    while isinstance(group, BaseExceptionGroup) and len(group.exceptions) == 1:
        group = group.exceptions[0]
    return group


def test_a_server_that_cannot_start_answers_initialize_with_the_reason(tmp_path):
    """Two files offering one tool name: the server cannot start. The client's
    `initialize` gets an error carrying the reason (both files, and what to
    do), where it used to see only the connection close."""
    env = Env(tmp_path)
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in ["first.wasm", "second.wasm"]:
        shutil.copy(TOOLS_BUILD / "tool_sleep.wasm", tools / name)
    raised = []

    async def main():
        try:
            async with env.session("--tools", str(tools), "--tools-only"):
                pass
        except BaseException as e:  # noqa: BLE001 - anyio wraps it in groups
            raised.append(_only_error(e))

    run(main)
    assert len(raised) == 1, raised
    error = raised[0]
    assert isinstance(error, MCPError), repr(error)
    assert error.code == -32603, error.code
    for needle in ["toolhost cannot serve", "first.wasm", "second.wasm", "rename the tool"]:
        assert needle in error.message, (needle, error.message)
