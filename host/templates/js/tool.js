// `{{name}}`: counts the words and characters of a text. Made by `toolhost
// new`: replace the body, the schemas and the description with what your
// tool does.
//
// componentize-js resolves imports by relative path only (not package
// names), hence the path into node_modules.
import { tool as defineTool, exportTools } from "../node_modules/toolhost-guest/toolhost_guest.js";

const countText = defineTool({
  name: "{{name}}",
  description: "Counts the words and characters of a text.",
  input: {
    type: "object",
    properties: { text: { type: "string", description: "The text to count." } },
    required: ["text"],
    additionalProperties: false,
  },
  output: {
    type: "object",
    properties: { words: { type: "integer" }, chars: { type: "integer" } },
    required: ["words", "chars"],
  },
  // Argument objects placed in the input schema: `toolhost conformance` runs them.
  examples: [{ text: "one two three" }],
  // What it needs and may change: the narrowest mode, the honest effect.
  minMode: "none",
  sideEffect: "none",
  // Calls may run at once; repeating one changes nothing more.
  concurrencySafe: true,
  idempotent: true,
  run: ({ text }) => ({
    words: text.split(/\s+/).filter((w) => w.length > 0).length,
    chars: [...text].length,
  }),
  // What the model reads (default: the canonical JSON), and data for a user interface.
  content: (r) => `${r.words} words, ${r.chars} characters`,
  meta: (r) => ({ empty: r.words === 0 }),
});

export const tool = exportTools(countText); // the WIT export, named `tool`
