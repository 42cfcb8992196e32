"""Unit tests of the tool's function, in plain CPython (outside a component
`export_tools` exports nothing): .venv/bin/python -B -m unittest discover -s tests"""

import json
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from app import Args, Output, run  # noqa: E402


class RunTest(unittest.TestCase):
    def test_counts_words_and_characters(self):
        out = run(Args(text="one two  thrée"))
        self.assertEqual(out, Output(words=3, chars=14))
        self.assertEqual(run.content(out), "3 words, 14 characters")

    def test_the_input_schema_has_an_example(self):
        schema = json.loads(run.input_schema)
        self.assertEqual(schema["examples"], [{"text": "one two three"}])


if __name__ == "__main__":
    unittest.main()
