"""`head {path, lines}`: the first lines of a text file in the workspace."""

from dataclasses import dataclass
from typing import Annotated

from toolhost_guest import export_tools, log, tool


@dataclass
class Args:
    path: Annotated[str, "Path of the file, relative to the workspace."]
    lines: Annotated[int, "How many lines.", {"minimum": 1, "maximum": 1000}] = 10


@dataclass
class Head:
    path: str
    lines: list[str]
    truncated: bool


def show(head: Head) -> str:
    return "\n".join(head.lines)


@tool(min_mode="read-only", side_effect="read", concurrency_safe=True, idempotent=True, content=show)
def head(args: Args) -> Head:
    """Returns the first lines of a UTF-8 text file in the workspace."""
    with open(args.path, encoding="utf-8") as f:
        lines = [line.rstrip("\n") for _, line in zip(range(args.lines + 1), f)]
    log("debug", "read", path=args.path, lines=len(lines))
    return Head(path=args.path, lines=lines[: args.lines], truncated=len(lines) > args.lines)


Tool = export_tools(head)
