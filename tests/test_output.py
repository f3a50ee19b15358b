"""What a command prints (slurmguard/output.py): a result's text and JSON, and emit."""

from __future__ import annotations

import json

import click
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from slurmguard.output import Result, Table, emit, json_line, lines_json, to_json


def _printed(result: object, as_json: bool) -> str:
    @click.command()
    def cmd() -> None:
        emit(result, as_json)  # type: ignore[arg-type]

    return CliRunner().invoke(cmd, catch_exceptions=False).output


def test_a_result_prints_its_blocks_or_its_document() -> None:
    r = Result({"b": 1, "a": [1, 2]}, ["head:", Table([["n1", 3]], ["node", "n"]), "", "tail"])
    assert _printed(r, False) == "head:\nnode    n\n------  ---\nn1      3\n\ntail\n"
    assert _printed(r, True) == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'


def test_json_is_built_only_when_asked() -> None:
    calls: list[int] = []

    def data() -> dict[str, int]:
        calls.append(1)
        return {"x": 1}

    r = Result(data, ["text"])
    assert _printed(r, False) == "text\n" and calls == []
    assert json.loads(_printed(r, True)) == {"x": 1} and calls == [1]


def test_an_empty_text_prints_nothing() -> None:
    assert _printed(Result([], []), False) == ""
    assert _printed(Result([], []), True) == "[]\n"


def test_a_wrapped_table_wraps_its_long_column() -> None:
    text = str(Table([["a", "word " * 20]], ["item", "detail"], wrap=[None, 30]))
    assert max(len(line) for line in text.splitlines()) <= len("item") + 2 + 30 + 2
    assert text.count("word") == 20


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                           lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                           max_leaves=10)


@given(st.dictionaries(st.text(max_size=4), json_values, max_size=5))
def test_one_item_a_line_is_the_same_document(doc: dict) -> None:
    text = lines_json(doc)
    assert json.loads(text) == json.loads(to_json(doc))
    for value in doc.values():
        if isinstance(value, list) and value:  # each item on its own line, compact
            for item in value:
                assert f"    {json_line(item)}" in text.splitlines() or \
                    f"    {json_line(item)}," in text.splitlines()
