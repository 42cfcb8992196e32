"""Unit tests of the helper's schemas and values, in plain CPython (no
component needed): python3 -m unittest discover -s sdk/python"""

import contextlib
import dataclasses
import enum
import io
import json
import os
import sys
import tempfile
import unittest
from typing import Annotated, Any, Literal, NotRequired, Optional, TypedDict

from toolhost_guest import ToolError, from_json, schema_of, to_json, tool, _run


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Inner:
    """A nested object."""

    n: int


@dataclasses.dataclass
class Args:
    path: Annotated[str, "Relative to the workspace."]
    limit: Annotated[int, {"minimum": 1}] = 10
    tags: list[str] = dataclasses.field(default_factory=list)
    color: Optional[Color] = None
    how: Literal["fast", "slow"] = "fast"
    inner: Optional[Inner] = None
    extra: dict[str, float] = dataclasses.field(default_factory=dict)


class Moved(TypedDict):
    src: str
    dst: NotRequired[str]


@dataclasses.dataclass
class Loop:
    next: Optional["Loop"]


class SchemaTest(unittest.TestCase):
    def test_dataclass_fields_become_a_closed_object(self):
        s = schema_of(Args)
        self.assertEqual(s["type"], "object")
        self.assertEqual(s["required"], ["path"])
        self.assertIs(s["additionalProperties"], False)
        self.assertNotIn("description", s)  # dataclass's made-up signature is not a description
        p = s["properties"]
        self.assertEqual(p["path"], {"type": "string", "description": "Relative to the workspace."})
        self.assertEqual(p["limit"], {"type": "integer", "minimum": 1, "default": 10})
        self.assertEqual(p["tags"], {"type": "array", "items": {"type": "string"}})
        self.assertEqual(p["color"], {"anyOf": [{"enum": ["red", "blue"]}, {"type": "null"}], "default": None})
        self.assertEqual(p["how"], {"enum": ["fast", "slow"], "default": "fast"})
        self.assertEqual(p["inner"]["anyOf"][0]["description"], "A nested object.")
        self.assertEqual(p["extra"], {"type": "object", "additionalProperties": {"type": "number"}})

    def test_typeddict_required_keys(self):
        s = schema_of(Moved)
        self.assertEqual(s["required"], ["src"])
        self.assertEqual(set(s["properties"]), {"src", "dst"})

    def test_types_without_a_schema_are_refused(self):
        for tp in (Loop, dict[int, str], set[str], object.__class__):
            with self.assertRaises(TypeError, msg=repr(tp)):
                schema_of(tp)
        self.assertEqual(schema_of(Any), {})


class ValueTest(unittest.TestCase):
    def test_json_becomes_the_annotated_types(self):
        a = from_json(Args, {"path": "a", "color": "blue", "inner": {"n": 2}, "extra": {"x": 1}})
        self.assertEqual(a, Args(path="a", color=Color.BLUE, inner=Inner(2), extra={"x": 1.0}))
        self.assertIsInstance(a.extra["x"], float)

    def test_misfits_are_refused(self):
        for bad in ({"path": 1}, {"path": "a", "limit": True}, {"path": "a", "nope": 1}, [], {"path": "a", "how": "x"}):
            with self.assertRaises((TypeError, ValueError), msg=repr(bad)):
                from_json(Args, bad)

    def test_to_json_of_nested_values(self):
        self.assertEqual(
            to_json(Args(path="p", color=Color.RED, inner=Inner(1))),
            {"path": "p", "limit": 10, "tags": [], "color": "red", "how": "fast", "inner": {"n": 1}, "extra": {}},
        )


@dataclasses.dataclass
class Out:
    size: int


class ToolTest(unittest.TestCase):
    def test_a_field_outside_init_is_outside_the_json(self):
        # The schema leaves it out (and is closed): so does the output.
        @dataclasses.dataclass
        class Ratio:
            a: int
            b: int
            ratio: float = dataclasses.field(init=False)

            def __post_init__(self):
                self.ratio = self.a / self.b

        self.assertNotIn("ratio", schema_of(Ratio)["properties"])
        self.assertEqual(to_json(Ratio(1, 2)), {"a": 1, "b": 2})

    def test_decorator_reads_name_doc_and_hints(self):
        @tool(min_mode="read-only", side_effect="read", examples=[{"path": "x"}])
        def file_size(args: Args) -> Out:
            """Returns a size."""
            if args.path == "missing":
                raise FileNotFoundError(2, "No such file", args.path)
            if args.path == "odd":
                raise ToolError("odd", "odd path")
            return Out(size=len(args.path))

        self.assertEqual(file_size.name, "file_size")
        self.assertEqual(file_size.description, "Returns a size.")
        self.assertIn('"examples": [{"path": "x"}]', file_size.input_schema)
        self.assertIn('"required": ["size"]', file_size.output_schema)
        canonical, content, meta = _run(file_size, '{"path": "abc"}')
        self.assertEqual((canonical, content, meta), ('{"size": 3}', ['{"size": 3}'], None))
        for args, code in (('{"path": "missing"}', "not-found"), ('{"path": "odd"}', "odd"), ('{"path": 3}', "invalid-args")):
            with self.assertRaises(ToolError) as e:
                _run(file_size, args)
            self.assertEqual(e.exception.code, code)

    def test_meta_that_is_not_json_is_a_serialize_error(self):
        # NaN in meta was written as `NaN`, which the host refuses whole.
        @dataclasses.dataclass
        class NoArgs:
            pass

        @tool(meta=lambda out: {"score": float("nan")})
        def scored(args: NoArgs) -> Out:
            """Scores."""
            return Out(size=1)

        with self.assertRaises(ToolError) as e:
            _run(scored, "{}")
        self.assertEqual(e.exception.code, "serialize")

    def test_bad_declarations_fail_at_import(self):
        with self.assertRaises(ValueError):
            tool(min_mode="read_only")(lambda args: None)
        # A mode that writes needs a side effect that says so.
        for effect in ("none", "read"):
            with self.assertRaisesRegex(ValueError, "side_effect must be 'write' or 'external'"):
                tool(name="w", description="d", min_mode="workspace-write", side_effect=effect)(lambda args: None)
        with self.assertRaises(TypeError):

            @tool
            def untyped(args):
                "x"

        with self.assertRaises(TypeError):

            @tool
            def not_an_object(args: int) -> int:
                "x"

        with self.assertRaises((TypeError, ValueError)):

            @tool(examples=[{"nope": 1}])
            def bad_example(args: Args) -> Out:
                "x"


class ExamplesTest(unittest.TestCase):
    """The examples' functions, outside a component."""

    @classmethod
    def setUpClass(cls):
        examples = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python")
        sys.path.insert(0, os.path.abspath(examples))

    def test_word_count(self):
        import word_count

        canonical, content, _ = _run(word_count.word_count, json.dumps({"text": "a b\nc"}))
        self.assertEqual(json.loads(canonical), {"words": 3, "lines": 2, "chars": 5})
        self.assertEqual(content, [canonical])

    def test_head(self):
        import head

        stderr = io.StringIO()
        with tempfile.TemporaryDirectory() as d, contextlib.redirect_stderr(stderr):
            path = os.path.join(d, "f.txt")
            with open(path, "w") as f:
                f.write("1\n2\n3\n")
            canonical, content, _ = _run(head.head, json.dumps({"path": path, "lines": 2}))
            self.assertEqual(json.loads(canonical), {"path": path, "lines": ["1", "2"], "truncated": True})
            self.assertEqual(content, ["1\n2"])
            canonical, _, _ = _run(head.head, json.dumps({"path": path, "lines": 3}))
            self.assertFalse(json.loads(canonical)["truncated"])
            with self.assertRaises(ToolError) as e:
                _run(head.head, json.dumps({"path": os.path.join(d, "missing")}))
            self.assertEqual(e.exception.code, "not-found")
            with self.assertRaises(RuntimeError):
                head.Tool().describe()
        # Outside a component, log records go to stderr.
        self.assertIn('[debug] read {"path": ', stderr.getvalue())

class PackagingTest(unittest.TestCase):
    def test_the_package_pins_the_componentize_py_of_requirements_txt(self):
        try:
            import tomllib
        except ImportError:
            self.skipTest("reading pyproject.toml needs Python 3.11 or later")
        here = os.path.dirname(os.path.abspath(__file__))
        with open(os.path.join(here, "pyproject.toml"), "rb") as f:
            deps = tomllib.load(f)["project"]["dependencies"]
        with open(os.path.join(here, "requirements.txt"), encoding="utf-8") as f:
            pins = [line.strip() for line in f if line.startswith("componentize-py==")]
        self.assertEqual([d for d in deps if d.startswith("componentize-py")], pins)


if __name__ == "__main__":
    unittest.main()
