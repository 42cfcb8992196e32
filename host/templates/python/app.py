"""`{{name}}`: counts the words and characters of a text. Made by
`toolhost new`: replace the body, the types and the docstring with what your
tool does."""

from dataclasses import dataclass
from typing import Annotated

from toolhost_guest import export_tools, tool


@dataclass
class Args:
    """The arguments: their JSON Schema is the tool's input schema."""

    text: Annotated[str, "The text to count."]


@dataclass
class Output:
    """The canonical result: its JSON Schema is the tool's output schema."""

    words: Annotated[int, "Runs of non-whitespace."]
    chars: Annotated[int, "Unicode code points."]


@tool(
    name="{{name}}",
    # What it needs and may change: the narrowest mode, the honest effect.
    min_mode="none",
    side_effect="none",
    # Calls may run at once; repeating one changes nothing more.
    concurrency_safe=True,
    idempotent=True,
    # Argument objects placed in the input schema: `toolhost conformance` runs them.
    examples=[{"text": "one two three"}],
    # What the model reads (default: the canonical JSON), and data for a user interface.
    content=lambda out: f"{out.words} words, {out.chars} characters",
    meta=lambda out: {"empty": out.words == 0},
)
def run(args: Args) -> Output:
    """Counts the words and characters of a text."""
    return Output(words=len(args.text.split()), chars=len(args.text))


Tool = export_tools(run)
