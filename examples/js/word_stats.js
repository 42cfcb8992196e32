// `word_stats {text}`: counts the words, lines and characters of a text.
import { tool as defineTool, exportTools } from "../../sdk/js/toolhost_guest.js";

const wordStats = defineTool({
  name: "word_stats",
  description: "Counts the words, lines and characters (code points) of a text.",
  input: {
    type: "object",
    properties: { text: { type: "string", description: "The text to count." } },
    required: ["text"],
    additionalProperties: false,
  },
  output: {
    type: "object",
    properties: { words: { type: "integer" }, lines: { type: "integer" }, chars: { type: "integer" } },
    required: ["words", "lines", "chars"],
  },
  examples: [{ text: "one two\nthree" }],
  run: ({ text }) => ({
    words: text.split(/\s+/).filter((w) => w.length > 0).length,
    lines: text.length === 0 ? 0 : text.split("\n").length - (text.endsWith("\n") ? 1 : 0),
    chars: [...text].length,
  }),
  content: (r) => `${r.words} words, ${r.lines} lines, ${r.chars} characters`,
});

export const tool = exportTools(wordStats);
