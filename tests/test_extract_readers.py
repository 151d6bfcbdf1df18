"""The transcript readers of ``skillstate extract``: each format, and bad input refused in
one line that names the file and the line or turn."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skillstate.errors import UsageError
from skillstate.extract.transcript import MAX_BYTES, MAX_TURNS, parse_transcript, read_transcript

MESSAGES = [
    {"role": "system", "content": "You book trips."},
    {"role": "user", "content": "Book Lisbon. Budget: 300"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "3 hotels found"},
    {"role": "assistant", "content": [{"type": "text", "text": "Found 3."}, {"type": "image_url"}]},
]


def _shape(path: Path) -> list[tuple[int, str, str, str | None]]:
    return [(t.number, t.role, t.text, t.name) for t in read_transcript(path).turns]


EXPECTED = [
    (1, "system", "You book trips.", None),
    (2, "user", "Book Lisbon. Budget: 300", None),
    (3, "assistant", "[tool call] search({})", None),
    (4, "tool", "3 hotels found", "search"),
    (5, "assistant", "Found 3.\n[image_url]", None),
]


class TestFormats:
    def test_a_json_list_of_messages(self, tmp_path: Path) -> None:
        """Turns are numbered from 1; tool calls and non-text parts become text."""
        path = tmp_path / "chat.json"
        path.write_text(json.dumps(MESSAGES), encoding="utf-8")
        assert _shape(path) == EXPECTED
        assert read_transcript(path).format == "openai"

    def test_an_object_with_messages(self, tmp_path: Path) -> None:
        path = tmp_path / "chat.json"
        path.write_text(json.dumps({"model": "x", "messages": MESSAGES}), encoding="utf-8")
        assert _shape(path) == EXPECTED

    def test_jsonl_one_message_a_line(self, tmp_path: Path) -> None:
        """By suffix, or recognised by its first line; blank lines are skipped."""
        text = "\n".join(json.dumps(m) for m in MESSAGES) + "\n\n"
        for name in ("chat.jsonl", "chat.txt"):
            path = tmp_path / name
            path.write_text(text, encoding="utf-8")
            assert _shape(path) == EXPECTED
            assert read_transcript(path).format == "jsonl"

    def test_plain_text_turns(self, tmp_path: Path) -> None:
        """``ROLE: text`` starts a turn (any case); the lines after it, blank ones
        included, belong to it."""
        path = tmp_path / "chat.txt"
        path.write_text(
            "User: hello there\n\nassistant: first line\n\nsecond paragraph\nTOOL: done\n",
            encoding="utf-8",
        )
        assert _shape(path) == [
            (1, "user", "hello there", None),
            (2, "assistant", "first line\n\nsecond paragraph", None),
            (3, "tool", "done", None),
        ]

    def test_developer_and_function_roles_and_a_bom(self, tmp_path: Path) -> None:
        path = tmp_path / "chat.json"
        data = [
            {"role": "developer", "content": "rules"},
            {"role": "function", "name": "f", "content": "x"},
        ]
        path.write_bytes(b"\xef\xbb\xbf" + json.dumps(data).encode())
        assert _shape(path) == [(1, "system", "rules", None), (2, "tool", "x", "f")]

    def test_the_digest_changes_with_a_turn(self) -> None:
        one = parse_transcript("user: a\nassistant: b", source="x")
        two = parse_transcript("user: a\nassistant: c", source="x")
        assert one.digest.startswith("sha256:")
        assert one.digest != two.digest


BAD = [
    ("empty.json", b"", "transcript empty.json is empty"),
    ("blank.txt", b"  \n\n", "transcript blank.txt is empty"),
    ("list.json", b"[]", "transcript list.json holds no turns"),
    (
        "broken.json",
        b'[{"role": "user",\n "content": }]',
        "transcript broken.json line 2: not JSON",
    ),
    ("num.json", b"42", "transcript num.json: JSON int is not a list of messages"),
    (
        "role.json",
        b'[{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}]',
        "transcript role.json turn 2: role 'bot' is not one of",
    ),
    ("str.json", b'["hello"]', "transcript str.json turn 1: a message is a JSON object"),
    (
        "part.json",
        b'[{"role": "user", "content": [3]}]',
        "transcript part.json turn 1: a content part is neither text nor a typed part",
    ),
    (
        "content.json",
        b'[{"role": "user", "content": 7}]',
        "transcript content.json turn 1: content is a string or a list of parts",
    ),
    (
        "lines.jsonl",
        b'{"role": "user", "content": "a"}\n\n{"role": \n',
        "transcript lines.jsonl line 3: not JSON",
    ),
    (
        "turn.jsonl",
        b'{"role": "user", "content": "a"}\n{"role": "x", "content": "b"}\n',
        "transcript turn.jsonl line 2 (turn 2): role 'x'",
    ),
    (
        "prose.txt",
        b"just some notes\nuser: hi\n",
        "transcript prose.txt line 1: expected 'user:' or 'assistant:'",
    ),
    ("latin1.txt", b"user: caf\xe9\n", "transcript latin1.txt line 1: not UTF-8 text"),
    ("nul.txt", b"user: a\nassistant: b\x00\n", "transcript nul.txt line 2: a NUL byte"),
    ("messages.json", b'{"messages": 3}', "transcript messages.json: 'messages' is not a list"),
    (
        "calls.json",
        b'[{"role": "assistant", "tool_calls": [{"function": {}}]}]',
        "transcript calls.json turn 1: a tool call has no function name",
    ),
]


@pytest.mark.parametrize(("name", "data", "message"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_line_naming_the_file(
    tmp_path: Path, name: str, data: bytes, message: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(UsageError) as caught:
        read_transcript(path)
    text = str(caught.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^cannot read transcript nope.json: "):
        read_transcript(tmp_path / "nope.json")


def test_a_file_over_the_bound_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = tmp_path / "huge.txt"
    with path.open("wb") as handle:
        handle.truncate(MAX_BYTES + 1)  # sparse: nothing to read, only the size
    with pytest.raises(UsageError, match=r"huge.txt: 4,194,305 bytes is over the bound"):
        read_transcript(path)


def test_more_turns_than_the_bound(tmp_path: Path) -> None:
    path = tmp_path / "many.json"
    path.write_text(json.dumps([{"role": "user", "content": "x"}] * (MAX_TURNS + 1)))
    with pytest.raises(UsageError, match=r"has 2,001 turns, over the bound of 2,000"):
        read_transcript(path)
