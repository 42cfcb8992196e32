// `http_get {url, max_chars?}`: one GET with the standard fetch(). The host
// decides the request against the call's network grants; without one,
// fetch() rejects inside the tool and nothing leaves the machine.
import { tool as defineTool, exportTools, ToolError } from "../../sdk/js/toolhost_guest.js";

const httpGet = defineTool({
  name: "http_get",
  description: "Fetches a URL with GET and returns the status, content type and body text (capped).",
  input: {
    type: "object",
    properties: {
      url: { type: "string", description: "An absolute http:// or https:// URL." },
      max_chars: { type: "integer", minimum: 1, maximum: 1048576, description: "Body characters returned (default 65536)." },
    },
    required: ["url"],
    additionalProperties: false,
  },
  output: {
    type: "object",
    properties: {
      status: { type: "integer" },
      content_type: { type: ["string", "null"] },
      body: { type: "string" },
      truncated: { type: "boolean" },
    },
    required: ["status", "content_type", "body", "truncated"],
  },
  examples: [{ url: "https://example.com/" }],
  sideEffect: "external",
  run: async ({ url, max_chars = 65536 }) => {
    let response;
    try {
      response = await fetch(url);
    } catch (e) {
      throw new ToolError("fetch-failed", `${url}: ${e.message}`);
    }
    const text = await response.text();
    return {
      status: response.status,
      content_type: response.headers.get("content-type"),
      body: text.slice(0, max_chars),
      truncated: text.length > max_chars,
    };
  },
  content: (r) => `${r.status}\n${r.body}`,
});

export const tool = exportTools(httpGet);
