// Unit tests of the tool, in plain Node: `npm test`.
import { test } from "node:test";
import assert from "node:assert/strict";
import { tool } from "../src/tool.js";

test("counts words and characters", async () => {
  const out = await tool.invoke("{{name}}", JSON.stringify({ text: "one two  thrée" }));
  assert.deepEqual(JSON.parse(out.canonical), { words: 3, chars: 14 });
  assert.deepEqual(out.content, [{ tag: "text", val: "3 words, 14 characters" }]);
  assert.deepEqual(JSON.parse(out.meta), { empty: false });
});

test("the input schema has an example", () => {
  const [descriptor] = tool.describe();
  assert.deepEqual(JSON.parse(descriptor.inputSchema).examples, [{ text: "one two three" }]);
});
