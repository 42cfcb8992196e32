// Unit tests of the helper, in plain Node: `node --test sdk/js`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { tool, exportTools, ToolError } from "./toolhost_guest.js";

const schema = { type: "object", properties: { n: { type: "integer" } }, required: ["n"] };

test("a definition becomes a WIT descriptor with defaults and examples", () => {
  const t = tool({ name: "double", description: "Doubles n.", input: schema, output: schema,
    examples: [{ n: 2 }], run: ({ n }) => ({ n: n * 2 }) });
  assert.equal(t.descriptor.minMode, "none");
  assert.equal(t.descriptor.sideEffect, "none");
  assert.equal(t.descriptor.concurrencySafe, false);
  assert.equal(t.descriptor.idempotent, false);
  assert.deepEqual(JSON.parse(t.descriptor.inputSchema).examples, [{ n: 2 }]);
  assert.deepEqual(JSON.parse(t.descriptor.outputSchema), schema);
});

test("a broken definition fails when the module is built", () => {
  const ok = { name: "t", description: "d", input: schema, run: () => ({}) };
  for (const [change, says] of [
    [{ name: "9bad" }, /name/], [{ name: "a".repeat(65) }, /name/], [{ description: "" }, /description/],
    [{ run: 1 }, /run/], [{ input: [] }, /input/], [{ minMode: "root" }, /minMode/],
    [{ sideEffect: "network" }, /sideEffect/], [{ examples: {} }, /examples/],
    [{ meta: {} }, /meta/],
    [{ minMode: "workspace-write" }, /sideEffect must be "write" or "external"/],
    [{ minMode: "danger-full-access", sideEffect: "read" }, /sideEffect must be/],
  ]) {
    assert.throws(() => tool({ ...ok, ...change }), says, JSON.stringify(change));
  }
  const t = tool(ok);
  assert.throws(() => exportTools(t, t), /two tools/);
});

test("invoke returns the three layers, awaits async tools, maps errors", async () => {
  const iface = exportTools(
    tool({ name: "ok", description: "d", input: schema, run: async ({ n }) => ({ n }), content: (r) => `n=${r.n}` }),
    tool({ name: "fails", description: "d", input: schema, run: () => { throw new ToolError("not-found", "gone"); } }),
    tool({ name: "bug", description: "d", input: schema, run: () => null.x }),
  );
  assert.deepEqual(iface.describe().map((d) => d.name), ["ok", "fails", "bug"]);
  const out = await iface.invoke("ok", '{"n": 7}');
  assert.deepEqual(JSON.parse(out.canonical), { n: 7 });
  assert.deepEqual(out.content, [{ tag: "text", val: "n=7" }]);
  await assert.rejects(iface.invoke("fails", '{"n": 1}'), { code: "not-found", message: "gone" });
  await assert.rejects(iface.invoke("bug", '{"n": 1}'), (e) => e.code === "internal-error" && /TypeError/.test(e.message));
  await assert.rejects(iface.invoke("nope", "{}"), { code: "unknown-tool" });
  const odd = exportTools(
    tool({ name: "nan", description: "d", input: schema, run: () => ({ n: NaN }) }),
    tool({ name: "big", description: "d", input: schema, run: () => ({ n: 1n }) }),
  );
  await assert.rejects(odd.invoke("nan", '{"n": 1}'), (e) => e.code === "serialize" && /NaN/.test(e.message));
  await assert.rejects(odd.invoke("big", '{"n": 1}'), { code: "serialize" });
});

test("meta is JSON for a user interface, or none", async () => {
  const iface = exportTools(
    tool({ name: "m", description: "d", input: schema, run: ({ n }) => ({ n }), meta: (r) => ({ seen: r.n }) }),
    tool({ name: "none", description: "d", input: schema, run: ({ n }) => ({ n }), meta: () => null }),
    tool({ name: "nan", description: "d", input: schema, run: ({ n }) => ({ n }), meta: () => ({ x: NaN }) }),
  );
  assert.deepEqual(JSON.parse((await iface.invoke("m", '{"n": 2}')).meta), { seen: 2 });
  assert.equal((await iface.invoke("none", '{"n": 2}')).meta, undefined);
  await assert.rejects(iface.invoke("nan", '{"n": 1}'), (e) => e.code === "serialize" && /meta/.test(e.message));
});
