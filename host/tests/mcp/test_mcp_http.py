"""End-to-end tests of `toolhost serve --http`, driven by the official Python
MCP SDK over Streamable HTTP, in both protocol revisions it speaks:
2025-11-25 (`mode="legacy"`: initialize, elicitation/create) and 2026-07-28
(`mode="auto"` discovers it: server/discover, approvals as multi-round-trip
requests).

Run through `cargo test -p toolhost --test host mcp_python`, which creates
the virtualenv and sets TOOLHOST_BIN and TOOLHOST_CACHE_DIR.
"""

import json
import os
import queue
import signal
import subprocess
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import mcp.types as types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import InputRequiredResult

BIN = os.environ["TOOLHOST_BIN"]
CACHE = os.environ.get("TOOLHOST_CACHE_DIR", "")
MARKER = "serving MCP over Streamable HTTP at "
WAIT = 60

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

TWO_CALLS = """
version = 1

[rate_limits]
per_client = { calls = 2, per_seconds = 3600 }
"""

# The two revisions, as the SDK names the choice: `legacy` forces the
# initialize handshake, `auto` probes server/discover and takes 2026-07-28.
REVISIONS = {"legacy": "2025-11-25", "auto": "2026-07-28"}


def text_of(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", None) == "text")


class HttpServer:
    """`toolhost serve --http 127.0.0.1:0` on a workspace and state under
    tmp_path; its URL read from its stderr."""

    def __init__(self, tmp_path: Path):
        self.root = tmp_path
        self.ws = tmp_path / "ws"
        self.ws.mkdir(exist_ok=True)
        self.state = tmp_path / "state"
        self.stderr_lines = []

    def file(self, name: str, text: str) -> str:
        p = self.root / name
        p.write_text(text)
        return str(p)

    @asynccontextmanager
    async def serving(self, *extra):
        env = dict(os.environ, TOOLHOST_LOG="info")
        env.pop("TOOLHOST_STATE_DIR", None)
        if CACHE:
            env["TOOLHOST_CACHE_DIR"] = CACHE
        args = [BIN, "serve", "--http", "127.0.0.1:0", "--workspace", str(self.ws), "--state", str(self.state), *extra]
        child = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        lines = queue.Queue()

        def pump():
            for line in child.stderr:
                self.stderr_lines.append(line)
                lines.put(line)
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        url = None
        deadline = time.monotonic() + WAIT
        while url is None:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            assert line is not None, "the server exited:\n" + "".join(self.stderr_lines)
            if MARKER in line:
                url = line.split(MARKER, 1)[1].strip()
        try:
            yield url
        finally:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=WAIT)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
                raise AssertionError("the server did not stop on SIGTERM")

    def log_events(self):
        """The session log, read after the server has exited."""
        out = subprocess.run(
            [BIN, "log", "--json", "--state", str(self.state), "--workspace", str(self.ws)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        return [json.loads(line) for line in out.splitlines() if line.strip()]

    def results(self, tool):
        """The `tool/result` payloads of the calls of `tool`, in log order."""
        events = self.log_events()
        ids = {e["call_id"] for e in events if e["kind"] == "tool/call" and e["payload"].get("tool") == tool}
        return [e["payload"] for e in events if e["kind"] == "tool/result" and e["call_id"] in ids]


def run(coro_fn):
    anyio.run(coro_fn)


def answering(answer):
    asked = []

    async def callback(context, params):
        asked.append(params)
        return answer

    return asked, callback


APPROVE = types.ElicitResult(action="accept", content={"approve": True})


@pytest.mark.parametrize("mode", REVISIONS)
def test_list_call_structured_content_and_deny(tmp_path, mode):
    srv = HttpServer(tmp_path)
    (srv.ws / "notes.txt").write_text("hello over http\n")
    policy = srv.file("policy.toml", DENY_WRITES)

    async def main():
        async with srv.serving("--policy", policy) as url:
            async with Client(url, mode=mode) as c:
                assert c.protocol_version == REVISIONS[mode]
                names = sorted(t.name for t in (await c.list_tools()).tools)
                assert names == ["grep", "http_fetch", "list_dir", "read_file", "sleep", "write_file"], names
                r = await c.call_tool("read_file", {"path": "notes.txt"})
                assert not r.is_error, text_of(r)
                assert "hello over http" in text_of(r)
                assert r.structured_content is not None, r
                assert "hello over http" in json.dumps(r.structured_content)
                r = await c.call_tool("read_file", {"path": 7})
                assert r.is_error and "INVALID_ARGS" in text_of(r), text_of(r)
                r = await c.call_tool("write_file", {"path": "x.txt", "content": "x"})
                assert r.is_error and "POLICY_DENIED" in text_of(r), text_of(r)

    run(main)
    assert not (srv.ws / "x.txt").exists()
    assert [p["error"]["code"] for p in srv.results("write_file")] == ["POLICY_DENIED"]


@pytest.mark.parametrize("mode", REVISIONS)
def test_approval_approve_and_reject(tmp_path, mode):
    """An ask reaches the SDK's elicitation callback in both revisions
    (elicitation/create in 2025-11-25, an InputRequiredResult in 2026-07-28),
    and its answer decides the call, once, with the asked/decided pair in the
    log."""
    srv = HttpServer(tmp_path)
    policy = srv.file("policy.toml", ASK_WRITES)
    asked_yes, yes = answering(APPROVE)
    asked_no, no = answering(types.ElicitResult(action="decline"))

    async def main():
        async with srv.serving("--policy", policy) as url:
            async with Client(url, mode=mode, elicitation_callback=yes) as c:
                r = await c.call_tool("write_file", {"path": "approved.txt", "content": "approved"})
                assert not r.is_error, text_of(r)
            async with Client(url, mode=mode, elicitation_callback=no) as c:
                r = await c.call_tool("write_file", {"path": "rejected.txt", "content": "no"})
                assert r.is_error and "APPROVAL_REJECTED" in text_of(r), text_of(r)

    run(main)
    assert len(asked_yes) == 1 and len(asked_no) == 1
    for needle in ["write_file", "approved.txt", "writes need a human"]:
        assert needle in asked_yes[0].message, (needle, asked_yes[0].message)
    assert (srv.ws / "approved.txt").read_text() == "approved"
    assert not (srv.ws / "rejected.txt").exists()
    events = srv.log_events()
    asked = [e for e in events if e["kind"] == "approval/asked"]
    decided = [e["payload"] for e in events if e["kind"] == "approval/decided"]
    # In 2026-07-28 the first leg of each call ends when the client is asked
    # (its pair closes `unavailable`, naming the retry's call); the retry is
    # asked and decided again, with the client's answer.
    legs = [d for d in decided if "input-required result" in (d.get("detail") or "")]
    assert len(legs) == (2 if mode == "auto" else 0), decided
    answers = sorted(d["outcome"] for d in decided if d not in legs)
    assert answers == ["allowed-once", "rejected"], decided
    assert len(asked) == len(decided), (asked, decided)


def test_approvals_are_announced_to_a_session_that_set_a_level(tmp_path):
    """A 2025-11-25 session that set its log level at `notice` hears of its
    own approval twice over HTTP: `pending`, then `decided`, as
    notifications/message of logger toolhost/approvals."""
    srv = HttpServer(tmp_path)
    policy = srv.file("policy.toml", ASK_WRITES)
    _, yes = answering(APPROVE)
    heard = []
    decided = anyio.Event()

    async def on_log(params):
        if params.logger == "toolhost/approvals":
            heard.append(params)
            if params.data.get("state") == "decided":
                decided.set()

    async def main():
        async with srv.serving("--policy", policy) as url:
            async with Client(url, mode="legacy", elicitation_callback=yes, logging_callback=on_log) as c:
                await c.set_logging_level("notice")
                r = await c.call_tool("write_file", {"path": "heard.txt", "content": "x"})
                assert not r.is_error, text_of(r)
                # They travel on the session's own stream, apart from the
                # response: wait for the second, bounded.
                with anyio.fail_after(WAIT):
                    await decided.wait()

    run(main)
    assert [h.data["state"] for h in heard] == ["pending", "decided"], heard
    assert all(h.level == "notice" for h in heard), heard
    pending, done = heard[0].data, heard[1].data
    assert pending["request"]["tool"] == "write_file", pending
    assert pending["request"]["args"]["path"] == "heard.txt", pending
    assert done["approval_id"] == pending["approval_id"], (pending, done)
    assert done["outcome"] == "allowed-once", done


async def first_leg(c, path):
    """A 2026-07-28 `tools/call` of write_file driven by hand: the
    InputRequiredResult, whose request_state the test then plays with."""
    first = await c.session.call_tool("write_file", {"path": path, "content": "once"}, allow_input_required=True)
    assert isinstance(first, InputRequiredResult), first
    assert first.request_state, first
    assert first.input_requests, first
    return first


async def retry(c, path, first, state=None):
    responses = {key: APPROVE for key in first.input_requests}
    return await c.session.call_tool(
        "write_file",
        {"path": path, "content": "once"},
        input_responses=responses,
        request_state=first.request_state if state is None else state,
        allow_input_required=True,
    )


def test_2026_replayed_and_altered_states_are_refused(tmp_path):
    srv = HttpServer(tmp_path)
    policy = srv.file("policy.toml", ASK_WRITES)

    async def main():
        async with srv.serving("--policy", policy) as url:
            async with Client(url, mode="auto", elicitation_callback=answering(APPROVE)[1]) as c:
                assert c.protocol_version == "2026-07-28"
                first = await first_leg(c, "once.txt")
                state = first.request_state
                altered = state[:-3] + ("A" if state[-3] != "A" else "B") + state[-2:]
                r = await retry(c, "once.txt", first, altered)
                assert r.is_error and "APPROVAL_STATE_INVALID" in text_of(r), text_of(r)
                assert not (srv.ws / "once.txt").exists()
                r = await retry(c, "once.txt", first)
                assert not r.is_error, text_of(r)
                (srv.ws / "once.txt").unlink()
                # The same approved state again: refused, and nothing runs.
                r = await retry(c, "once.txt", first)
                assert r.is_error and "APPROVAL_STATE_REPLAYED" in text_of(r), text_of(r)
            # From another session too.
            async with Client(url, mode="auto", elicitation_callback=answering(APPROVE)[1]) as c:
                r = await retry(c, "once.txt", first)
                assert r.is_error and "APPROVAL_STATE_REPLAYED" in text_of(r), text_of(r)

    run(main)
    assert not (srv.ws / "once.txt").exists()
    events = srv.log_events()
    codes = [(e["payload"].get("error") or {}).get("code") for e in events if e["kind"] == "tool/result"]
    assert codes.count("APPROVAL_STATE_REPLAYED") == 2, codes
    assert codes.count("APPROVAL_STATE_INVALID") == 1, codes
    # The body ran once: one successful write_file result.
    ok = [p for p in srv.results("write_file") if p.get("status") == "ok"]
    assert len(ok) == 1, srv.results("write_file")


def test_2026_expired_state_is_refused(tmp_path):
    srv = HttpServer(tmp_path)
    policy = srv.file("policy.toml", ASK_WRITES)

    async def main():
        # A TTL of zero: the state has expired a millisecond after it was issued.
        async with srv.serving("--policy", policy, "--approval-state-ttl", "0") as url:
            async with Client(url, mode="auto", elicitation_callback=answering(APPROVE)[1]) as c:
                first = await first_leg(c, "late.txt")
                issued = time.monotonic()
                while time.monotonic() - issued < 0.002:
                    pass
                r = await retry(c, "late.txt", first)
                assert r.is_error and "APPROVAL_STATE_EXPIRED" in text_of(r), text_of(r)

    run(main)
    assert not (srv.ws / "late.txt").exists()


@pytest.mark.parametrize("mode", REVISIONS)
def test_progress_over_http(tmp_path, mode):
    srv = HttpServer(tmp_path)
    reports = []

    async def on_progress(progress, total, message):
        reports.append(progress)

    async def main():
        async with srv.serving() as url:
            async with Client(url, mode=mode) as c:
                r = await c.call_tool("sleep", {"ms": 500}, progress_callback=on_progress)
                assert not r.is_error, text_of(r)

    run(main)
    assert len(reports) >= 2, reports
    assert reports == sorted(reports), reports


def test_cancellation_over_http_stops_the_body(tmp_path):
    """The SDK abandons a call (notifications/cancelled on a 2025-11-25
    session): the body stops, the call ends CANCELLED, the server serves on."""
    srv = HttpServer(tmp_path)

    async def main():
        async with srv.serving() as url:
            async with Client(url, mode="legacy") as c:
                progressed = anyio.Event()

                async def on_progress(progress, total, message):
                    progressed.set()

                async def call():
                    await c.call_tool("sleep", {"ms": 20000}, progress_callback=on_progress)

                async with anyio.create_task_group() as tg:
                    tg.start_soon(call)
                    with anyio.fail_after(WAIT):
                        await progressed.wait()
                    tg.cancel_scope.cancel()
                r = await c.call_tool("list_dir", {"path": "."})
                assert not r.is_error, text_of(r)

    run(main)
    events = srv.log_events()
    calls = [e for e in events if e["kind"] == "tool/call" and e["payload"].get("tool") == "sleep"]
    assert len(calls) == 1, calls
    results = [e for e in events if e["kind"] == "tool/result" and e["call_id"] == calls[0]["call_id"]]
    assert len(results) == 1, results
    assert results[0]["payload"]["error"]["code"] == "CANCELLED", results[0]
    elapsed_ms = results[0]["at_unix_ms"] - calls[0]["at_unix_ms"]
    assert elapsed_ms < 15_000, f"the body was not stopped: result after {elapsed_ms} ms"


@pytest.mark.parametrize("mode", REVISIONS)
def test_rate_limit_refusal(tmp_path, mode):
    srv = HttpServer(tmp_path)
    policy = srv.file("policy.toml", TWO_CALLS)

    async def main():
        async with srv.serving("--policy", policy) as url:
            async with Client(url, mode=mode) as c:
                for _ in range(2):
                    r = await c.call_tool("list_dir", {"path": "."})
                    assert not r.is_error, text_of(r)
                r = await c.call_tool("list_dir", {"path": "."})
                assert r.is_error and "RATE_LIMITED" in text_of(r), text_of(r)
            # A new session is the same client (this address): no fresh bucket.
            async with Client(url, mode=mode) as c:
                r = await c.call_tool("list_dir", {"path": "."})
                assert r.is_error and "RATE_LIMITED" in text_of(r), text_of(r)

    run(main)
    codes = [(p.get("error") or {}).get("code") for p in srv.results("list_dir")]
    assert codes == [None, None, "RATE_LIMITED", "RATE_LIMITED"], codes


def test_bearer_tokens(tmp_path):
    srv = HttpServer(tmp_path)
    tokens = srv.file("tokens", "s3cret-token-of-alice alice\n")

    def client(url, token):
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return Client(streamable_http_client(url, http_client=httpx2.AsyncClient(headers=headers, timeout=WAIT)))

    async def main():
        async with srv.serving("--tokens", tokens) as url:
            async with client(url, "s3cret-token-of-alice") as c:
                r = await c.call_tool("list_dir", {"path": "."})
                assert not r.is_error, text_of(r)
            for token in [None, "wrong-token"]:
                # The SDK reports the refusal as an error response (the
                # status is checked raw below).
                with pytest.raises(BaseException) as refused:
                    async with client(url, token) as c:
                        await c.list_tools()
                assert "error response" in repr(refused.value), repr(refused.value)
            # Raw: the status itself, and no session made.
            async with httpx2.AsyncClient() as raw:
                r = await raw.post(
                    url,
                    json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                    headers={"Authorization": "Bearer wrong-token", "Accept": "application/json, text/event-stream"},
                )
                assert r.status_code == 401, r.status_code

    run(main)
    events = srv.log_events()
    calls = [e for e in events if e["kind"] == "tool/call"]
    assert [c["payload"].get("principal") for c in calls] == ["alice"], calls


def test_origin_refused_and_session_end(tmp_path):
    srv = HttpServer(tmp_path)

    async def main():
        async with srv.serving() as url:
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
            }
            accept = {"Accept": "application/json, text/event-stream"}
            async with httpx2.AsyncClient(timeout=WAIT) as raw:
                r = await raw.post(url, json=init, headers={**accept, "Origin": "https://evil.example"})
                assert r.status_code == 403, r.status_code
                r = await raw.post(url, json=init, headers={**accept, "Host": "evil.example"})
                assert r.status_code == 403, r.status_code
                r = await raw.post(url, json=init, headers=accept)
                assert r.status_code == 200, r.status_code
                session = r.headers["mcp-session-id"]
                # The end of a session, as the SDK expects it (200 or 204).
                r = await raw.delete(url, headers={"mcp-session-id": session})
                assert r.status_code in (200, 204), r.status_code
                r = await raw.post(
                    url,
                    json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                    headers={**accept, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"},
                )
                assert r.status_code == 404, r.status_code

    run(main)
    assert not [e for e in srv.log_events() if e["kind"] == "tool/call"]
