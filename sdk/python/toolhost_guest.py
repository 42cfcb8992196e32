"""toolhost_guest: write a toolhost tool in Python.

A tool is a function of one argument whose type is a dataclass (or a
TypedDict) and whose return type is another: the helper derives the tool's
input and output JSON Schemas from the type hints, parses the host's
arguments into the argument type, and serialises what the function returns.
An author never writes JSON strings or WIT records::

    from dataclasses import dataclass
    from toolhost_guest import tool, export_tools

    @dataclass
    class Args:
        text: str

    @dataclass
    class Output:
        shouted: str

    @tool(examples=[{"text": "hi"}])
    def shout(args: Args) -> Output:
        "Returns the text in upper case."
        return Output(shouted=args.text.upper())

    Tool = export_tools(shout)

Build it with componentize-py against the toolhost WIT (see
scripts/build-python-tools): ``componentize-py -d wit -w tool-provider
componentize shout -p . -p sdk/python -o shout.wasm``. componentize-py runs
the module once at build time, so a type the helper cannot turn into a
schema fails the build, not a call.

Type hints understood: str, int, float, bool, None, Any, list[T],
tuple[T, ...], dict[str, T], Optional[T] / T | None, Union, Literal,
Enum subclasses, dataclasses and TypedDicts (nested, not recursive), and
Annotated[T, "description"] or Annotated[T, {"minimum": 0}] (a string is the
field's description, a dict is merged into its schema). Objects are closed
(``additionalProperties: false``); dataclass fields without a default and
TypedDict keys that are not NotRequired are required.

A function fails the call with ``raise ToolError(code, message)``; OSError
subclasses become the codes the Rust SDK uses (``not-found``,
``permission-denied``, ...). Any other exception is a bug in the tool: the
component traps and the host ends the call TRAP.

Only the standard library is needed at build time; ``wit_world`` (the
bindings componentize-py generates) is imported when the component is
built, so this module's schema functions also work in plain CPython.
"""

from __future__ import annotations

import dataclasses
import enum
import errno
import inspect
import json
import os
import re
import sys
import types
import typing
from typing import Any, Callable, Optional, Union

__all__ = [
    "ToolError",
    "tool",
    "export_tools",
    "schema_of",
    "from_json",
    "to_json",
    "log",
    "progress",
    "MODES",
    "SIDE_EFFECTS",
]

#: The sandbox modes, narrowest first (the WIT enum `sandbox-mode`).
MODES = ("none", "read-only", "workspace-write", "danger-full-access")
#: The side-effect classes (the WIT enum `side-effect`).
SIDE_EFFECTS = ("none", "read", "write", "external")

_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$")


class ToolError(Exception):
    """A failure the tool reports to the model (not a crash).

    ``code`` is short and machine-readable (``not-found``); ``message`` is
    something the model can act on.
    """

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


# ---------------------------------------------------------------- schemas


def _is_typeddict(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, dict) and hasattr(tp, "__required_keys__")


def _own_doc(tp: type) -> Optional[str]:
    """The class's docstring, unless it is the signature dataclass makes up."""
    doc = tp.__doc__
    if not doc:
        return None
    if dataclasses.is_dataclass(tp) and doc.startswith(tp.__name__ + "("):
        return None
    return " ".join(doc.split())


_HINTS: dict = {}


def _hints(tp: Any) -> dict:
    """The type hints of a class or function, resolved once: the schemas
    resolve them at import (which componentize-py runs at build time and
    snapshots), so a call reads them from here."""
    try:
        return _HINTS[tp]
    except (KeyError, TypeError):
        pass
    try:
        hints = typing.get_type_hints(tp, include_extras=True)
    except NameError as e:
        raise TypeError(f"cannot resolve the type hints of {tp!r}: {e}") from None
    try:
        _HINTS[tp] = hints
    except TypeError:
        pass
    return hints


def _strip_annotated(tp: Any) -> Any:
    while typing.get_origin(tp) is typing.Annotated:
        tp = typing.get_args(tp)[0]
    return tp


def _is_union(origin: Any) -> bool:
    return origin is Union or origin is types.UnionType


def _json_default(value: Any) -> Any:
    """A field default as JSON, or a sentinel when it is not representable."""
    try:
        encoded = to_json(value)
        json.dumps(encoded, allow_nan=False)
        return encoded
    except (TypeError, ValueError):
        return _NO_DEFAULT


_NO_DEFAULT = object()


def schema_of(tp: Any, _seen: tuple = ()) -> dict:
    """The JSON Schema of the Python type ``tp``.

    Raises ``TypeError`` for a type it cannot express (a recursive type, a
    dict whose keys are not str, an arbitrary class).
    """
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        schema = dict(schema_of(args[0], _seen))
        for extra in args[1:]:
            if isinstance(extra, str):
                schema["description"] = extra
            elif isinstance(extra, dict):
                schema.update(extra)
        return schema
    if tp is Any or tp is object:
        return {}
    if tp is None or tp is type(None):
        return {"type": "null"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is int:
        return {"type": "integer"}
    if tp is float:
        return {"type": "number"}
    if tp is str:
        return {"type": "string"}
    if _is_union(origin):
        return {"anyOf": [schema_of(a, _seen) for a in args]}
    if origin is typing.Literal:
        return {"enum": list(args)}
    if origin in (list, typing.List) or tp in (list, typing.List):
        return {"type": "array", "items": schema_of(args[0], _seen) if args else {}}
    if origin in (tuple, typing.Tuple):
        if len(args) == 2 and args[1] is Ellipsis:
            return {"type": "array", "items": schema_of(args[0], _seen)}
        return {
            "type": "array",
            "prefixItems": [schema_of(a, _seen) for a in args],
            "items": False,
            "minItems": len(args),
        }
    if origin in (dict, typing.Dict) or tp in (dict, typing.Dict):
        if args and _strip_annotated(args[0]) is not str:
            raise TypeError(f"{tp!r}: JSON object keys are strings; use dict[str, ...]")
        return {
            "type": "object",
            "additionalProperties": schema_of(args[1], _seen) if args else {},
        }
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return {"enum": [m.value for m in tp]}
    if dataclasses.is_dataclass(tp) or _is_typeddict(tp):
        if tp in _seen:
            raise TypeError(f"{tp.__name__} is recursive; JSON Schemas here are inlined")
        return _object_schema(tp, _seen + (tp,))
    raise TypeError(f"cannot express {tp!r} as a JSON Schema")


def _object_schema(tp: type, seen: tuple) -> dict:
    hints = _hints(tp)
    properties: dict = {}
    required: list = []
    if dataclasses.is_dataclass(tp):
        for f in dataclasses.fields(tp):
            if not f.init:
                continue
            prop = schema_of(hints[f.name], seen)
            if f.default is not dataclasses.MISSING:
                default = _json_default(f.default)
                if default is not _NO_DEFAULT:
                    prop.setdefault("default", default)
            elif f.default_factory is dataclasses.MISSING:
                required.append(f.name)
            properties[f.name] = prop
    else:
        for key, hint in hints.items():
            inner = hint
            # NotRequired/Required wrap the type in the hints of 3.11+.
            origin = typing.get_origin(inner)
            if origin in (typing.NotRequired, typing.Required):
                inner = typing.get_args(inner)[0]
            properties[key] = schema_of(inner, seen)
            if key in tp.__required_keys__:
                required.append(key)
    schema: dict = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    title = tp.__name__
    schema = {"title": title, **schema}
    doc = _own_doc(tp)
    if doc:
        schema["description"] = doc
    return schema


# ---------------------------------------------------------------- values


def from_json(tp: Any, value: Any) -> Any:
    """``value`` (parsed JSON that satisfies ``schema_of(tp)``) as a ``tp``.

    Raises ``TypeError`` or ``ValueError`` when it does not fit.
    """
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return from_json(args[0], value)
    if tp is Any or tp is object:
        return value
    if tp is None or tp is type(None):
        if value is not None:
            raise TypeError(f"expected null, got {value!r}")
        return None
    if tp is bool:
        if not isinstance(value, bool):
            raise TypeError(f"expected a boolean, got {value!r}")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"expected an integer, got {value!r}")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"expected a number, got {value!r}")
        return float(value)
    if tp is str:
        if not isinstance(value, str):
            raise TypeError(f"expected a string, got {value!r}")
        return value
    if _is_union(origin):
        errors = []
        for arm in args:
            try:
                return from_json(arm, value)
            except (TypeError, ValueError) as e:
                errors.append(str(e))
        raise TypeError(f"{value!r} fits none of {tp!r}: {'; '.join(errors)}")
    if origin is typing.Literal:
        if value not in args:
            raise ValueError(f"expected one of {list(args)!r}, got {value!r}")
        return value
    if origin in (list, typing.List, tuple, typing.Tuple) or tp in (list, tuple):
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {value!r}")
        if origin in (tuple, typing.Tuple):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(from_json(args[0], v) for v in value)
            if len(args) != len(value):
                raise ValueError(f"expected {len(args)} items, got {len(value)}")
            return tuple(from_json(a, v) for a, v in zip(args, value))
        return [from_json(args[0], v) if args else v for v in value]
    if origin in (dict, typing.Dict) or tp is dict:
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {value!r}")
        return {k: from_json(args[1], v) if args else v for k, v in value.items()}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if dataclasses.is_dataclass(tp) or _is_typeddict(tp):
        if not isinstance(value, dict):
            raise TypeError(f"expected an object for {tp.__name__}, got {value!r}")
        hints = _hints(tp)
        unknown = set(value) - set(hints)
        if unknown:
            raise ValueError(f"{tp.__name__} has no field(s) {sorted(unknown)}")
        fields = {}
        for key, v in value.items():
            hint = hints[key]
            if typing.get_origin(hint) in (typing.NotRequired, typing.Required):
                hint = typing.get_args(hint)[0]
            fields[key] = from_json(hint, v)
        return tp(**fields)
    raise TypeError(f"cannot build a {tp!r} from JSON")


def to_json(value: Any) -> Any:
    """``value`` as plain JSON data: dataclasses become objects, enums their
    values, tuples arrays."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return to_json(value.value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        # The fields the schema lists: a field with init=False is not part of
        # the JSON (its schema has additionalProperties false).
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value) if f.init}
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    raise TypeError(f"{type(value).__name__} is not JSON data")


# ---------------------------------------------------------------- tools


@dataclasses.dataclass(frozen=True)
class ToolSpec:
    """A function made into a tool by :func:`tool`."""

    name: str
    description: str
    func: Callable
    args_type: Any
    output_type: Any
    input_schema: str
    output_schema: Optional[str]
    min_mode: str
    side_effect: str
    concurrency_safe: bool
    idempotent: bool
    content: Optional[Callable]
    meta: Optional[Callable]

    def __call__(self, *args, **kwargs):
        return self.func(*args, **kwargs)


def tool(
    func: Optional[Callable] = None,
    *,
    name: Optional[str] = None,
    description: Optional[str] = None,
    min_mode: str = "none",
    side_effect: str = "none",
    concurrency_safe: bool = False,
    idempotent: bool = False,
    examples: Optional[list] = None,
    content: Optional[Callable] = None,
    meta: Optional[Callable] = None,
):
    """Makes ``func(args: A) -> O`` a tool (a decorator, with or without
    arguments).

    ``A`` must be a dataclass or TypedDict; its schema is the input schema.
    ``O`` (any type :func:`schema_of` understands) gives the output schema.
    ``name`` defaults to the function's name, ``description`` to its
    docstring. The defaults of the other settings are the most conservative
    (mode ``none``, no side effect, not concurrency-safe, not idempotent):
    declare what the tool really needs. ``examples`` are argument objects
    placed in the input schema; ``toolhost conformance`` runs them.
    ``content(output)`` returns what the model reads (a string or a list of
    strings; the canonical JSON by default) and ``meta(output)`` optional
    JSON data for a user interface.
    """
    if func is None:
        return lambda f: tool(
            f,
            name=name,
            description=description,
            min_mode=min_mode,
            side_effect=side_effect,
            concurrency_safe=concurrency_safe,
            idempotent=idempotent,
            examples=examples,
            content=content,
            meta=meta,
        )
    tool_name = name or func.__name__
    if not _NAME.match(tool_name):
        raise ValueError(f"tool name {tool_name!r} is not [a-zA-Z][a-zA-Z0-9_-]{{0,63}}")
    desc = description or " ".join((func.__doc__ or "").split())
    if not desc:
        raise ValueError(f"{tool_name}: give a description (or a docstring)")
    if min_mode not in MODES:
        raise ValueError(f"{tool_name}: min_mode {min_mode!r} is not one of {MODES}")
    if side_effect not in SIDE_EFFECTS:
        raise ValueError(f"{tool_name}: side_effect {side_effect!r} is not one of {SIDE_EFFECTS}")
    if min_mode in ("workspace-write", "danger-full-access") and side_effect in ("none", "read"):
        # The host runs a tool that declares none or read at most read-only, and
        # refuses to load one that needs a writing mode.
        raise ValueError(
            f"{tool_name}: min_mode {min_mode!r} writes, so side_effect must be 'write' or 'external', not {side_effect!r}"
        )
    hints = _hints(func)
    params = list(inspect.signature(func).parameters)
    if len(params) != 1 or params[0] not in hints:
        raise TypeError(f"{tool_name}: the function takes one annotated argument, e.g. (args: Args)")
    args_type = hints[params[0]]
    bare = _strip_annotated(args_type)
    if not (dataclasses.is_dataclass(bare) or _is_typeddict(bare)):
        raise TypeError(f"{tool_name}: the argument type must be a dataclass or TypedDict, not {args_type!r}")
    input_schema = schema_of(args_type)
    if examples:
        for ex in examples:
            from_json(args_type, ex)
        input_schema["examples"] = list(examples)
    output_type = hints.get("return", _NO_DEFAULT)
    output_schema = None if output_type is _NO_DEFAULT else schema_of(output_type)
    return ToolSpec(
        name=tool_name,
        description=desc,
        func=func,
        args_type=args_type,
        output_type=output_type,
        input_schema=json.dumps(input_schema),
        output_schema=None if output_schema is None else json.dumps(output_schema),
        min_mode=min_mode,
        side_effect=side_effect,
        concurrency_safe=concurrency_safe,
        idempotent=idempotent,
        content=content,
        meta=meta,
    )


_OS_CODES = [
    (FileNotFoundError, "not-found"),
    (PermissionError, "permission-denied"),
    (FileExistsError, "already-exists"),
    (IsADirectoryError, "is-a-directory"),
    (NotADirectoryError, "not-a-directory"),
]


def _os_error_code(err: OSError) -> str:
    for cls, code in _OS_CODES:
        if isinstance(err, cls):
            return code
    if err.errno == errno.EROFS:
        return "read-only"
    if err.errno in (errno.EINVAL, errno.ENAMETOOLONG):
        return "invalid-path"
    return "io"


def _enter_initial_cwd() -> None:
    """Relative paths resolve against the directory the host starts the
    tool in: in danger-full-access the host root is preopened as / and PWD
    names the workspace; in the other modes the workspace is the preopened
    root and there is no PWD."""
    pwd = os.environ.get("PWD")
    if pwd:
        try:
            os.chdir(pwd)
        except OSError:
            pass


def _content_blocks(spec: ToolSpec, output: Any, canonical: str) -> list:
    if spec.content is None:
        return [canonical]
    blocks = spec.content(output)
    if isinstance(blocks, str):
        return [blocks]
    return [str(b) for b in blocks]


def _run(spec: ToolSpec, args: str):
    """Parses, runs and serialises one call: (canonical, [text], meta) or a
    ToolError."""
    try:
        parsed = from_json(spec.args_type, json.loads(args))
    except (TypeError, ValueError) as e:
        raise ToolError("invalid-args", f"arguments do not match {spec.name}: {e}") from None
    _enter_initial_cwd()
    try:
        output = spec.func(parsed)
    except OSError as e:
        raise ToolError(_os_error_code(e), str(e)) from None
    try:
        canonical = json.dumps(to_json(output), allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError) as e:
        raise ToolError("serialize", f"output is not JSON: {e}") from None
    meta = None
    if spec.meta is not None:
        m = spec.meta(output)
        if m is not None:
            try:
                meta = json.dumps(to_json(m), allow_nan=False, ensure_ascii=False)
            except (TypeError, ValueError) as e:
                raise ToolError("serialize", f"meta is not JSON: {e}") from None
    return canonical, _content_blocks(spec, output, canonical), meta


class _NotAComponent:
    """What :func:`export_tools` returns outside a component."""

    def describe(self) -> list:
        raise RuntimeError("describe runs only in a component built by componentize-py")

    def invoke(self, name: str, args: str):
        raise RuntimeError("invoke runs only in a component built by componentize-py")


def export_tools(*specs: ToolSpec) -> type:
    """The class componentize-py exports as ``toolhost:tool/tool``.

    Bind it to the name ``Tool`` at the top of the module you build::

        Tool = export_tools(word_count, line_count)

    The tools are checked here, in any Python; outside a component (where
    there are no bindings) the class returned only raises, so that a tool
    module can be imported and its functions unit-tested in plain CPython.
    """
    if not specs:
        raise ValueError("export at least one tool")
    by_name: dict = {}
    for s in specs:
        if not isinstance(s, ToolSpec):
            raise TypeError(f"{s!r} is not a tool: decorate it with @tool")
        if s.name in by_name:
            raise ValueError(f"two tools are named {s.name!r}")
        by_name[s.name] = s

    try:
        from wit_world import exports
        from wit_world.imports import types as wit
        from componentize_py_types import Err
    except ImportError:
        # Plain CPython (a unit test of the tool's functions): nothing to
        # export to.
        return _NotAComponent


    modes = {
        "none": wit.SandboxMode.NONE,
        "read-only": wit.SandboxMode.READ_ONLY,
        "workspace-write": wit.SandboxMode.WORKSPACE_WRITE,
        "danger-full-access": wit.SandboxMode.DANGER_FULL_ACCESS,
    }
    effects = {
        "none": wit.SideEffect.NONE,
        "read": wit.SideEffect.READ,
        "write": wit.SideEffect.WRITE,
        "external": wit.SideEffect.EXTERNAL,
    }
    descriptors = [
        wit.ToolDescriptor(
            name=s.name,
            description=s.description,
            input_schema=s.input_schema,
            output_schema=s.output_schema,
            concurrency_safe=s.concurrency_safe,
            side_effect=effects[s.side_effect],
            idempotent=s.idempotent,
            min_mode=modes[s.min_mode],
        )
        for s in specs
    ]

    class Tool(exports.Tool):
        def describe(self) -> list:
            return list(descriptors)

        def invoke(self, name: str, args: str):
            spec = by_name.get(name)
            try:
                if spec is None:
                    raise ToolError("unknown-tool", f"this component has no tool named {name!r}")
                canonical, texts, meta = _run(spec, args)
            except ToolError as e:
                raise Err(wit.ToolError(code=e.code, message=e.message)) from None
            return wit.ToolOutput(
                canonical=canonical,
                content=[wit.ContentBlock_Text(t) for t in texts],
                meta=meta,
            )

    return Tool


# ---------------------------------------------------------------- host


_LEVELS = ("trace", "debug", "info", "warn", "error")


def _host() -> Any:
    """The host interface, or None outside a component (plain CPython, where
    a tool's function can be unit-tested)."""
    try:
        from wit_world.imports import host
    except ImportError:
        return None
    return host


def log(level: str, message: str, **fields: Any) -> None:
    """Writes a record to the host's log (never to the model). ``level`` is
    one of trace, debug, info, warn, error; ``fields`` become a JSON object.
    Outside a component the record goes to stderr."""
    if level not in _LEVELS:
        raise ValueError(f"log level {level!r} is not one of {_LEVELS}")
    encoded = json.dumps(to_json(fields)) if fields else None
    host = _host()
    if host is None:
        print(f"[{level}] {message} {encoded or ''}".rstrip(), file=sys.stderr)
        return
    host.log(getattr(host.LogLevel, level.upper()), message, encoded)


def progress(done: int, total: Optional[int] = None, message: Optional[str] = None) -> None:
    """Reports progress of the current call (to stderr outside a component)."""
    host = _host()
    if host is None:
        print(f"[progress] {done}/{total if total is not None else '?'} {message or ''}".rstrip(), file=sys.stderr)
        return
    host.progress(done, total, message)
