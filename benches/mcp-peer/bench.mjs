// The peer benchmark (issue 16): one MCP client (the TypeScript SDK) against
// `toolhost serve --mcp` and against the reference filesystem server
// (@modelcontextprotocol/server-filesystem), in one run, reading the same 4 KiB
// file, sequentially and with 8 requests in flight. Two files, each read by both
// servers: `text` (prose and code with quotes and newlines: JSON escapes, and text
// that compresses like text) and `repeated` (4096 times the letter a: no escapes,
// compresses to almost nothing). Prints p50/p99/throughput and the ratios
// (toolhost / reference) per file. Run through scripts/bench-mcp-peer.
//
// Usage: node bench.mjs TOOLHOST_BIN WORKSPACE STATE_DIR [--quick] [--json]

import { performance } from "node:perf_hooks";
import path from "node:path";
import { createRequire } from "node:module";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [bin, workspace, state, ...flags] = process.argv.slice(2);
if (!bin || !workspace || !state) {
  console.error("usage: node bench.mjs TOOLHOST_BIN WORKSPACE STATE_DIR [--quick] [--json]");
  process.exit(2);
}
const quick = flags.includes("--quick");
const asJson = flags.includes("--json");
const SEQUENTIAL = quick ? 300 : 2000;
const CONCURRENT = quick ? 800 : 8000;
const IN_FLIGHT = 8;
const WARM_UP = quick ? 50 : 200;
const FILES = { text: "text4k.txt", repeated: "file4k.txt" };

const require = createRequire(import.meta.url);
const referenceEntry = require.resolve("@modelcontextprotocol/server-filesystem/dist/index.js");
import { readFileSync } from "node:fs";
const version = (name) =>
  JSON.parse(readFileSync(new URL(`./node_modules/${name}/package.json`, import.meta.url))).version;

const servers = [
  {
    name: "toolhost",
    command: bin,
    args: ["serve", "--mcp", "--workspace", workspace, "--state", state, "--mode", "read-only"],
    env: { TOOLHOST_LOG: "warn" },
    tool: "read_file",
    args_for: (file) => ({ path: file }),
  },
  {
    name: "reference",
    command: process.execPath,
    args: [referenceEntry, workspace],
    env: {},
    tool: "read_text_file",
    args_for: (file) => ({ path: path.join(workspace, file) }),
  },
];

function percentile(sorted, p) {
  const i = Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length));
  return sorted[i];
}

function summary(samples, seconds) {
  const sorted = [...samples].sort((a, b) => a - b);
  return {
    n: samples.length,
    p50_us: Math.round(percentile(sorted, 50) * 1000),
    p99_us: Math.round(percentile(sorted, 99) * 1000),
    calls_per_s: Math.round(samples.length / seconds),
  };
}

async function call(client, server, file) {
  const t = performance.now();
  const r = await client.callTool({ name: server.tool, arguments: server.args_for(file) });
  const took = performance.now() - t;
  const text = r.content?.[0]?.text ?? "";
  if (r.isError || Buffer.byteLength(text, "utf8") < 4096) {
    throw new Error(`${server.name}: unexpected result ${JSON.stringify(r).slice(0, 300)}`);
  }
  return took;
}

async function measure(server, file) {
  const transport = new StdioClientTransport({
    command: server.command,
    args: server.args,
    env: { ...process.env, ...server.env },
    stderr: "ignore",
  });
  const client = new Client({ name: "toolhost-peer-bench", version: "0.1.0" });
  await client.connect(transport);
  try {
    for (let i = 0; i < WARM_UP; i++) await call(client, server, file);
    // Sequential: one request at a time.
    const seq = [];
    let t = performance.now();
    for (let i = 0; i < SEQUENTIAL; i++) seq.push(await call(client, server, file));
    const sequential = summary(seq, (performance.now() - t) / 1000);
    // 8 in flight: 8 loops over one connection.
    const conc = [];
    let left = CONCURRENT;
    t = performance.now();
    await Promise.all(
      Array.from({ length: IN_FLIGHT }, async () => {
        while (left > 0) {
          left--;
          conc.push(await call(client, server, file));
        }
      }),
    );
    const concurrent = summary(conc, (performance.now() - t) / 1000);
    return { sequential, concurrent };
  } finally {
    await client.close();
  }
}

const files = {};
for (const [label, file] of Object.entries(FILES)) {
  const results = {};
  for (const server of servers) results[server.name] = await measure(server, file);
  const ratio = (k, which) =>
    Math.round((results.toolhost[k][which] / results.reference[k][which]) * 100) / 100;
  const ratios = {};
  for (const k of ["sequential", "concurrent"]) {
    ratios[k] = {
      p50: ratio(k, "p50_us"),
      p99: ratio(k, "p99_us"),
      throughput: ratio(k, "calls_per_s"),
    };
  }
  files[label] = { file, results, ratios_toolhost_over_reference: ratios };
}
const report = {
  client: `@modelcontextprotocol/sdk ${version("@modelcontextprotocol/sdk")}`,
  reference: `@modelcontextprotocol/server-filesystem ${version("@modelcontextprotocol/server-filesystem")} (tool read_text_file)`,
  node: process.version,
  in_flight: IN_FLIGHT,
  files,
  targets: { p50: "<= 1.0", throughput: ">= 1.0" },
};
if (asJson) {
  console.log(JSON.stringify(report));
} else {
  console.log(`client ${report.client}; reference ${report.reference}; node ${report.node}`);
  for (const [label, { file, results, ratios_toolhost_over_reference: ratios }] of Object.entries(files)) {
    console.log(`file ${label} (${file}):`);
    for (const k of ["sequential", "concurrent"]) {
      const mode = k === "sequential" ? "sequential" : `${IN_FLIGHT} in flight`;
      for (const name of ["toolhost", "reference"]) {
        const r = results[name][k];
        console.log(
          `  ${mode.padEnd(12)} ${name.padEnd(10)} p50 ${String(r.p50_us).padStart(6)} us  p99 ${String(r.p99_us).padStart(6)} us  ${String(r.calls_per_s).padStart(6)} calls/s  (n=${r.n})`,
        );
      }
      const q = ratios[k];
      console.log(`  ${mode.padEnd(12)} ratio      p50 ${q.p50}x  p99 ${q.p99}x  throughput ${q.throughput}x (toolhost / reference)`);
    }
  }
}
