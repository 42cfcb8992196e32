"""`word_count {text}`: counts the words, lines and characters of a text."""

from dataclasses import dataclass
from typing import Annotated

from toolhost_guest import export_tools, tool


@dataclass
class Args:
    text: Annotated[str, "The text to count."]


@dataclass
class Counts:
    words: int
    lines: int
    chars: int


@tool(concurrency_safe=True, idempotent=True, examples=[{"text": "one two\nthree"}])
def word_count(args: Args) -> Counts:
    """Counts the words, lines and characters of a text."""
    text = args.text
    return Counts(words=len(text.split()), lines=len(text.splitlines()), chars=len(text))


Tool = export_tools(word_count)
