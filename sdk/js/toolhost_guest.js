// toolhost_guest.js: write a toolhost tool in JavaScript.
//
// A tool is a function of one argument (the call's arguments, already
// validated by the host against `input`) that returns a plain object (the
// canonical result, checked against `output`). The helper turns a list of
// such tools into the `tool` interface of the toolhost WIT world: an author
// never writes JSON strings or WIT records.
//
//   import { tool, exportTools } from "../../sdk/js/toolhost_guest.js";
//
//   const shout = tool({
//     name: "shout",
//     description: "Returns the text in upper case.",
//     input: { type: "object", properties: { text: { type: "string" } },
//              required: ["text"], additionalProperties: false },
//     output: { type: "object", properties: { shouted: { type: "string" } },
//               required: ["shouted"] },
//     examples: [{ text: "hi" }],
//     run: ({ text }) => ({ shouted: text.toUpperCase() }),
//   });
//
//   export const tool = exportTools(shout);   // the WIT export, named `tool`
//
// (Export the interface under the name `tool`; import the helper's `tool`
// under another name, as the examples do.)
//
// Build it with componentize-js against the toolhost WIT (see
// scripts/build-js-tools): `componentize-js shout.js --wit wit -n
// tool-provider -o shout.wasm`.
//
// `run` may be async (return a promise), for example to `await fetch(...)`:
// the host decides every request against the call's network grants, and a
// refused one rejects inside the tool. A tool fails a call with
// `throw new ToolError(code, message)`; any other exception becomes the
// error code `internal-error` with the exception's name and message.
//
// Defaults: `minMode` "none", `sideEffect` "none", `concurrencySafe` false,
// `idempotent` false (the most conservative, as in Rust and Python). A `minMode`
// that writes needs `sideEffect` "write" or "external". `content(result)` gives the text the model reads
// (default: the canonical JSON), `meta(result)` optional JSON data for a
// user interface (default: none).

/** The sandbox modes, narrowest first (WIT `sandbox-mode`). */
export const MODES = ["none", "read-only", "workspace-write", "danger-full-access"];

/** What a tool may change (WIT `side-effect`). */
export const SIDE_EFFECTS = ["none", "read", "write", "external"];

const NAME = /^[A-Za-z][A-Za-z0-9_-]{0,63}$/;

/** A failure the tool reports itself: `code` is short and machine-readable. */
export class ToolError extends Error {
  constructor(code, message) {
    super(message);
    this.name = "ToolError";
    this.code = String(code);
  }
}

/**
 * Checks and completes one tool's definition. Throws at build time
 * (componentize-js runs the module once) when the definition is wrong, so a
 * broken tool fails its build, not a call.
 */
export function tool(spec) {
  const fail = (what) => {
    throw new TypeError(`tool ${JSON.stringify(spec && spec.name)}: ${what}`);
  };
  if (!spec || typeof spec !== "object") fail("a definition object is needed");
  if (typeof spec.name !== "string" || !NAME.test(spec.name)) {
    fail("name must be 1-64 characters of [A-Za-z0-9_-], starting with a letter");
  }
  if (typeof spec.description !== "string" || spec.description.length === 0) {
    fail("description must be a non-empty string");
  }
  if (typeof spec.run !== "function") fail("run must be a function");
  const isSchema = (s) => s !== null && typeof s === "object" && !Array.isArray(s);
  if (!isSchema(spec.input)) fail("input must be a JSON Schema object");
  if (spec.output !== undefined && !isSchema(spec.output)) {
    fail("output must be a JSON Schema object");
  }
  const minMode = spec.minMode ?? "none";
  if (!MODES.includes(minMode)) fail(`minMode must be one of ${MODES.join(", ")}`);
  const sideEffect = spec.sideEffect ?? "none";
  if (!SIDE_EFFECTS.includes(sideEffect)) {
    fail(`sideEffect must be one of ${SIDE_EFFECTS.join(", ")}`);
  }
  // The host runs a tool that declares "none" or "read" at most read-only, and
  // refuses to load one that needs a writing mode.
  if (["workspace-write", "danger-full-access"].includes(minMode) && ["none", "read"].includes(sideEffect)) {
    fail(`minMode ${minMode} writes, so sideEffect must be "write" or "external", not "${sideEffect}"`);
  }
  if (spec.examples !== undefined && !Array.isArray(spec.examples)) {
    fail("examples must be an array of argument objects");
  }
  if (spec.content !== undefined && typeof spec.content !== "function") {
    fail("content must be a function of the result");
  }
  if (spec.meta !== undefined && typeof spec.meta !== "function") {
    fail("meta must be a function of the result");
  }
  const input = spec.examples ? { ...spec.input, examples: spec.examples } : spec.input;
  return {
    descriptor: {
      name: spec.name,
      description: spec.description,
      inputSchema: JSON.stringify(input),
      outputSchema: spec.output === undefined ? undefined : JSON.stringify(spec.output),
      // The most conservative, as in the Rust and Python SDKs.
      concurrencySafe: spec.concurrencySafe ?? false,
      sideEffect,
      idempotent: spec.idempotent ?? false,
      minMode,
    },
    run: spec.run,
    content: spec.content,
    meta: spec.meta,
  };
}

/**
 * `value` as JSON text. What JSON cannot hold (a BigInt, a cycle, NaN or
 * Infinity, which JSON.stringify would write as null) throws a TypeError.
 */
function strictJson(value) {
  return JSON.stringify(value, (_, v) => {
    if (typeof v === "number" && !Number.isFinite(v)) {
      throw new TypeError(`${v} is not a JSON number`);
    }
    return v;
  });
}

/** The WIT error record for whatever `run` threw. */
function errorRecord(e) {
  if (e instanceof ToolError) return { code: e.code, message: e.message };
  const name = e && e.name ? e.name : "Error";
  const message = e && e.message !== undefined ? e.message : String(e);
  return { code: "internal-error", message: `${name}: ${message}` };
}

/**
 * The `tool` interface (describe, invoke) offering `tools`, each made by
 * `tool(...)`. Export it as `tool`.
 */
export function exportTools(...tools) {
  const byName = new Map();
  for (const t of tools) {
    if (!t || !t.descriptor) throw new TypeError("exportTools takes tools made by tool(...)");
    if (byName.has(t.descriptor.name)) {
      throw new TypeError(`two tools are named ${t.descriptor.name}`);
    }
    byName.set(t.descriptor.name, t);
  }
  return {
    describe() {
      return tools.map((t) => t.descriptor);
    },
    async invoke(name, args) {
      const t = byName.get(name);
      if (!t) throw { code: "unknown-tool", message: `no tool named ${name}` };
      let result;
      try {
        result = await t.run(JSON.parse(args));
      } catch (e) {
        throw errorRecord(e);
      }
      // A result or meta that is not JSON is the tool's error `serialize`,
      // as in Python; thrown as an Error it would trap the call.
      let canonical;
      try {
        canonical = strictJson(result === undefined ? null : result);
      } catch (e) {
        throw { code: "serialize", message: `output is not JSON: ${e && e.message}` };
      }
      let text;
      let meta;
      try {
        text = t.content ? String(t.content(result)) : canonical;
        meta = t.meta ? t.meta(result) : undefined;
      } catch (e) {
        throw errorRecord(e);
      }
      if (meta !== undefined && meta !== null) {
        try {
          meta = strictJson(meta);
        } catch (e) {
          throw { code: "serialize", message: `meta is not JSON: ${e && e.message}` };
        }
      }
      return { canonical, content: [{ tag: "text", val: text }], meta: meta ?? undefined };
    },
  };
}
