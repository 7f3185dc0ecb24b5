"""Transcripts: JSONL chats, HH-RLHF pairs (the shared data), per-turn CSV; bad lines reported by
number with the rest kept; the registry keeps plain JSONL tables for the table reader."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from engine.io import FormatError, detect, inspect_file
from engine.io.transcripts import (
    Transcript,
    Turn,
    parse_hh,
    read_transcripts,
    write_jsonl,
    write_metrics_csv,
)

HH_DATA = Path(__file__).resolve().parents[3] / ".." / "shared" / "data" / "dialogue" / \
    "hh-rlhf_harmless-base_test.jsonl.gz"
HH_LINE = {"chosen": "\n\nHuman: hi there\n\nAssistant: hello\n\nHuman: bye",
           "rejected": "\n\nHuman: hi there\n\nAssistant: go away"}


def test_hh_text_becomes_turns():
    turns = parse_hh(HH_LINE["chosen"])
    assert [(t.role, t.content) for t in turns] == [("user", "hi there"), ("assistant", "hello"),
                                                    ("user", "bye")]
    with pytest.raises(ValueError):
        parse_hh("no markers at all")


def test_chat_lines_grouped_by_transcript_with_extra_fields_kept(tmp_path):
    path = tmp_path / "chat.jsonl"
    lines = [{"transcript": "a", "role": "user", "content": "hi", "label": "greeting"},
             {"transcript": "b", "role": "user", "content": "yo"},
             {"transcript": "a", "role": "assistant", "content": "hello"}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    found = read_transcripts(path)
    assert found.layout == "chat" and [t.id for t in found.transcripts] == ["a", "b"]
    assert [turn.content for turn in found.transcripts[0].turns] == ["hi", "hello"]
    assert found.transcripts[0].turns[0].meta == {"label": "greeting"}


def test_messages_per_line(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps({"id": "x", "messages": [{"role": "system", "content": "s"},
                                                         {"role": "user", "content": "u"}]})
                    + "\n")
    (transcript,) = read_transcripts(path).transcripts
    assert transcript.id == "x" and [t.role for t in transcript.turns] == ["system", "user"]


def test_malformed_lines_reported_by_number_and_the_others_kept(tmp_path):
    path = tmp_path / "mixed.jsonl.gz"
    good = json.dumps(HH_LINE)
    body = "\n".join([good, "{not json", good, "[1, 2]", json.dumps({"chosen": 5}),
                      json.dumps({"chosen": "no markers"}), good]) + "\n"
    data = body.encode() + b"\xff\xfe broken bytes\n" + good.encode() + b"\n"
    path.write_bytes(gzip.compress(data))
    found = read_transcripts(path)
    assert len(found.transcripts) == 2 * 4
    assert [line for line, _ in found.problems] == [2, 4, 5, 6, 8]
    problems = dict(found.problems)
    assert "not JSON" in problems[2] and "object" in problems[4] and "UTF-8" in problems[8]
    report = inspect_file(path)
    assert report["format"] == "transcripts" and report["summary"]["malformed_lines"] == 5
    assert report["metadata"]["problems"][0].startswith("line 2:")


def test_files_with_nothing_readable_raise_naming_the_file(tmp_path):
    hostile = {"garbage.jsonl": b"\x00\x01\x02 not json\n",
               "truncated.jsonl.gz": gzip.compress(json.dumps(HH_LINE).encode() * 50)[:40],
               "wrong_type.jsonl": b'"a string"\n[1]\n',
               "no_turn.csv": b"a,b\n1,2\n"}
    for name, data in hostile.items():
        path = tmp_path / name
        path.write_bytes(data)
        with pytest.raises(FormatError) as caught:
            read_transcripts(path)
        assert str(caught.value).startswith(str(path)), name


def test_per_turn_metrics_csv(tmp_path):
    path = tmp_path / "turns.csv"
    path.write_text("transcript,turn,role,content,belief_user,label\n"
                    "d1,0,user,hello,0.5,\n"
                    "d1,1,assistant,hi,,kind\n"
                    "d1,x,user,broken,1,\n"
                    "d2,0,user,again,not-a-number,\n"
                    "d2,1,user,fine,2.0,\n")
    found = read_transcripts(path)
    assert found.layout == "metrics" and [t.id for t in found.transcripts] == ["d1", "d2"]
    first = found.transcripts[0].turns
    assert first[0].meta == {"turn": 0, "belief_user": 0.5} and first[1].meta["label"] == "kind"
    assert [line for line, _ in found.problems] == [4, 5]
    assert detect(path).name == "transcripts"


def test_written_jsonl_and_csv_read_back(tmp_path):
    transcripts = [Transcript("t1", [Turn("user", "héllo", {"label": "x", "belief": 0.1}),
                                     Turn("assistant", "hi", {"belief": float("nan")})])]
    path = write_jsonl(tmp_path / "out.jsonl", transcripts)
    (back,) = read_transcripts(path).transcripts
    assert back.id == "t1" and back.turns[0].content == "héllo"
    assert back.turns[0].meta == {"turn": 0, "label": "x", "belief": 0.1}
    assert back.turns[1].meta["belief"] is None
    csv_path = write_metrics_csv(tmp_path / "m.csv", ["transcript", "turn", "role", "score"],
                                 [["t1", 0, "user", 0.5], ["t1", 1, "assistant", float("nan")]])
    rows = read_transcripts(csv_path).transcripts[0].turns
    assert rows[0].meta == {"turn": 0, "score": 0.5} and rows[1].meta == {"turn": 1}


def test_plain_jsonl_chats_are_transcripts_and_tables_stay_tables(tmp_path):
    chat = tmp_path / "t.jsonl"
    chat.write_text('{"role": "user", "content": "hi"}\n{"role": "a", "content": "b"}\n')
    assert detect(chat).name == "transcripts"  # the dialogue panel opens it, not the lab
    table = tmp_path / "rows.jsonl"
    table.write_text('{"x": 1, "y": 2}\n')
    assert detect(table).name == "jsonl"
    metrics = tmp_path / "metrics.csv"
    metrics.write_text("turn,belief_user\n0,0.1\n")
    assert detect(metrics).name == "csv"
    assert len(read_transcripts(chat).transcripts[0].turns) == 2


def test_the_shared_hh_rlhf_file():
    if not HH_DATA.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{HH_DATA} is missing")
        pytest.skip("../shared/data/dialogue is not here")
    found = read_transcripts(HH_DATA, limit=50)
    assert found.layout == "hh" and len(found.transcripts) == 50 and not found.problems
    assert found.transcripts[0].id == "1/chosen" and found.transcripts[1].id == "1/rejected"
    assert found.transcripts[0].turns[0].role == "user"
    assert detect(HH_DATA).name == "transcripts"


def test_inspect_lists_the_bad_lines_and_refuses_only_a_file_with_nothing_readable(
        tmp_path, capsys):
    from engine.cli import main as cli_main

    chats = tmp_path / "chats.jsonl"
    good = '{"messages": [{"role": "user", "content": "hi"}]}'
    chats.write_text("\n".join([good, good, "{broken", good]) + "\n")
    assert cli_main(["inspect", str(chats)]) == 0
    printed = capsys.readouterr().out
    assert "transcripts: 3" in printed and "line 3: not JSON" in printed
    nothing = tmp_path / "nothing.jsonl"
    nothing.write_text('{"role": "user", "content": "hi"\n{"role"\n')
    assert cli_main(["inspect", str(nothing)]) == 2
