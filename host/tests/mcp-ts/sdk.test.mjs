// End-to-end tests of `toolhost serve` with the official TypeScript MCP SDK
// (`@modelcontextprotocol/client` 2.x, pinned in package.json), over stdio
// and Streamable HTTP, in both protocol revisions the SDK speaks: 2025-11-25
// (`versionNegotiation` legacy: initialize, elicitation/create) and
// 2026-07-28 (auto: server/discover, approvals as input-required results).
//
// Run by `cargo test -p toolhost --test host mcp_typescript`, which installs
// the pinned packages and sets TOOLHOST_BIN (and TOOLHOST_CACHE_DIR).

import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const BIN = process.env.TOOLHOST_BIN;
assert.ok(BIN, 'TOOLHOST_BIN is not set');
const WAIT_MS = 60_000;
const MARKER = 'serving MCP over Streamable HTTP at ';

const ASK_WRITES = `
version = 1
mode = "workspace-write"

[[rules]]
tool = "write_file"
decision = "ask"
reason = "writes need a human"
`;

const TWO_CALLS = `
version = 1

[rate_limits]
per_client = { calls = 2, per_seconds = 3600 }
`;

function serverEnv() {
  const env = { ...process.env, TOOLHOST_LOG: 'info' };
  delete env.TOOLHOST_STATE_DIR;
  return env;
}

/** A workspace and a state directory, fresh. */
function place() {
  const root = mkdtempSync(join(tmpdir(), 'toolhost-ts-'));
  const ws = join(root, 'ws');
  execFileSync('mkdir', ['-p', ws]);
  return { root, ws, state: join(root, 'state') };
}

function writePolicy(p, text) {
  const file = join(p.root, 'policy.toml');
  writeFileSync(file, text);
  return file;
}

/** The session log as JSON events (read after the server stopped). */
function events(p) {
  const out = execFileSync(BIN, ['log', '--json', '--state', p.state, '--workspace', p.ws], { encoding: 'utf8' });
  return out.split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
}

/** `serve --http 127.0.0.1:0`: its URL (read from stderr) and a stop. */
async function startHttp(p, extra = []) {
  const child = spawn(BIN, ['serve', '--http', '127.0.0.1:0', '--workspace', p.ws, '--state', p.state, ...extra], {
    env: serverEnv(),
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  const lines = createInterface({ input: child.stderr });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the server did not say where it listens')), WAIT_MS);
    lines.on('line', (line) => {
      const at = line.indexOf(MARKER);
      if (at >= 0) {
        clearTimeout(timer);
        resolve(line.slice(at + MARKER.length).trim());
      }
    });
    child.on('exit', (code) => reject(new Error(`the server exited (${code})`)));
  });
  const stop = () =>
    new Promise((resolve, reject) => {
      if (child.exitCode !== null) return resolve();
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error('the server did not stop on SIGTERM'));
      }, WAIT_MS);
      child.on('exit', () => {
        clearTimeout(timer);
        resolve();
      });
      child.kill('SIGTERM');
    });
  return { url, stop };
}

/** A connected client; `approve` answers approvals (undefined: no elicitation capability). */
async function connect(transport, mode, approve) {
  const capabilities = approve === undefined ? {} : { elicitation: { form: {} } };
  const client = new Client({ name: 'toolhost-ts-test', version: '1.0.0' }, { capabilities, versionNegotiation: { mode } });
  const asked = [];
  if (approve !== undefined) {
    client.setRequestHandler('elicitation/create', async (request) => {
      asked.push(request.params.message);
      return approve ? { action: 'accept', content: { approve: true } } : { action: 'decline' };
    });
  }
  await client.connect(transport);
  return { client, asked };
}

function text(result) {
  return result.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

function httpTransport(url, token) {
  const requestInit = token ? { headers: { Authorization: `Bearer ${token}` } } : undefined;
  return new StreamableHTTPClientTransport(new URL(url), { requestInit });
}

function stdioTransport(p, extra = []) {
  return new StdioClientTransport({
    command: BIN,
    args: ['serve', '--mcp', '--workspace', p.ws, '--state', p.state, ...extra],
    env: serverEnv(),
    stderr: 'ignore',
  });
}

const TOOLS = ['grep', 'http_fetch', 'list_dir', 'read_file', 'sleep', 'write_file'];

// Each transport and revision: list, a call with structured content, an
// invalid call, approvals approved and rejected, progress.
const CASES = [
  { transport: 'http', mode: 'legacy', version: '2025-11-25' },
  { transport: 'http', mode: 'auto', version: '2026-07-28' },
  { transport: 'stdio', mode: 'legacy', version: '2025-11-25' },
];

for (const { transport, mode, version } of CASES) {
  test(`${transport} ${version}: list, call, approvals, progress`, async () => {
    const p = place();
    writeFileSync(join(p.ws, 'notes.txt'), 'hello from the TypeScript SDK\n');
    const policy = writePolicy(p, ASK_WRITES);
    const extra = ['--policy', policy];
    let http;
    const open = async (approve) => {
      if (transport === 'http') {
        return connect(httpTransport(http.url), mode, approve);
      }
      return connect(stdioTransport(p, extra), mode, approve);
    };
    if (transport === 'http') http = await startHttp(p, extra);
    try {
      const yes = await open(true);
      assert.equal(yes.client.getNegotiatedProtocolVersion(), version);
      const { tools } = await yes.client.listTools();
      assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
      const writes = tools.find((t) => t.name === 'write_file').annotations;
      assert.equal(writes?.readOnlyHint, false, JSON.stringify(writes));

      let r = await yes.client.callTool({ name: 'read_file', arguments: { path: 'notes.txt' } });
      assert.equal(r.isError ?? false, false, text(r));
      assert.match(text(r), /hello from the TypeScript SDK/);
      assert.notEqual(r.structuredContent, undefined);

      r = await yes.client.callTool({ name: 'read_file', arguments: { path: 7 } });
      assert.equal(r.isError, true);
      assert.match(text(r), /INVALID_ARGS/);

      r = await yes.client.callTool({ name: 'write_file', arguments: { path: 'approved.txt', content: 'approved' } });
      assert.equal(r.isError ?? false, false, text(r));
      assert.equal(yes.asked.length, 1);
      assert.match(yes.asked[0], /write_file/);
      assert.match(yes.asked[0], /writes need a human/);

      const progress = [];
      r = await yes.client.callTool({ name: 'sleep', arguments: { ms: 500 } }, { onprogress: (p) => progress.push(p.progress) });
      assert.equal(r.isError ?? false, false, text(r));
      if (mode === 'legacy') {
        assert.ok(progress.length >= 2, JSON.stringify(progress));
        assert.deepEqual([...progress].sort((a, b) => a - b), progress);
      }
      await yes.client.close();

      const no = await open(false);
      r = await no.client.callTool({ name: 'write_file', arguments: { path: 'rejected.txt', content: 'no' } });
      assert.equal(r.isError, true);
      assert.match(text(r), /APPROVAL_REJECTED/);
      assert.equal(no.asked.length, 1);
      await no.client.close();
    } finally {
      if (http) await http.stop();
    }
    assert.equal(readFileSync(join(p.ws, 'approved.txt'), 'utf8'), 'approved');
    assert.equal(existsSync(join(p.ws, 'rejected.txt')), false);
    const log = events(p);
    const outcomes = log
      .filter((e) => e.kind === 'approval/decided' && !(e.payload.detail ?? '').includes('input-required result'))
      .map((e) => e.payload.outcome)
      .sort();
    assert.deepEqual(outcomes, ['allowed-once', 'rejected']);
  });
}

test('http: cancelling a call (AbortSignal) stops its body', async () => {
  const p = place();
  const http = await startHttp(p);
  try {
    const { client } = await connect(httpTransport(http.url), 'legacy', undefined);
    const abort = new AbortController();
    const pending = client.callTool(
      { name: 'sleep', arguments: { ms: 20000 } },
      { signal: abort.signal, onprogress: () => abort.abort('enough'), resetTimeoutOnProgress: true },
    );
    await assert.rejects(pending);
    // The server serves on.
    const r = await client.callTool({ name: 'list_dir', arguments: { path: '.' } });
    assert.equal(r.isError ?? false, false, text(r));
    await client.close();
  } finally {
    await http.stop();
  }
  const log = events(p);
  const call = log.find((e) => e.kind === 'tool/call' && e.payload.tool === 'sleep');
  assert.ok(call, 'no sleep call in the log');
  const result = log.find((e) => e.kind === 'tool/result' && e.call_id === call.call_id);
  assert.equal(result.payload.error?.code, 'CANCELLED', JSON.stringify(result.payload));
  assert.ok(result.at_unix_ms - call.at_unix_ms < 15000, 'the body was not stopped');
});

for (const mode of ['legacy', 'auto']) {
  test(`http ${mode}: rate limits refuse the third call`, async () => {
    const p = place();
    const http = await startHttp(p, ['--policy', writePolicy(p, TWO_CALLS)]);
    const codes = [];
    try {
      const { client } = await connect(httpTransport(http.url), mode, undefined);
      for (let i = 0; i < 3; i++) {
        const r = await client.callTool({ name: 'list_dir', arguments: { path: '.' } });
        codes.push(r.isError ? text(r).split(':')[0] : 'ok');
      }
      await client.close();
    } finally {
      await http.stop();
    }
    assert.deepEqual(codes, ['ok', 'ok', 'RATE_LIMITED']);
  });
}

test('http: bearer tokens', async () => {
  const p = place();
  const tokens = join(p.root, 'tokens');
  writeFileSync(tokens, 'a-good-token-for-bob bob\n');
  const http = await startHttp(p, ['--tokens', tokens]);
  try {
    const { client } = await connect(httpTransport(http.url, 'a-good-token-for-bob'), 'legacy', undefined);
    const r = await client.callTool({ name: 'list_dir', arguments: { path: '.' } });
    assert.equal(r.isError ?? false, false, text(r));
    await client.close();
    for (const token of [undefined, 'a-wrong-token']) {
      await assert.rejects(connect(httpTransport(http.url, token), 'legacy', undefined), /401|Unauthorized/i);
    }
  } finally {
    await http.stop();
  }
  const calls = events(p).filter((e) => e.kind === 'tool/call');
  assert.deepEqual(calls.map((c) => c.payload.principal), ['bob']);
});
