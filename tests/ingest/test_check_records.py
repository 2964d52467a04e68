"""The ``check_records`` hook of the ingest demo: what it says of a batch."""

from __future__ import annotations

from ingest.hookkit import check_records


def test_check_records_names_what_is_wrong(tmp_path, monkeypatch, capsys):
    batch = tmp_path / "batch.jsonl"
    batch.write_text('{"id": "a", "amount": "1"}\n{"id": "a", "amount": "2"}\n[1]\n{"id": "b"}\nnope\n')
    monkeypatch.setenv("INGEST_BATCH_URL", str(batch))
    assert check_records.main(["--require", "id,amount", "--unique", "id"]) == 1
    printed = capsys.readouterr().out
    assert "line 2: id 'a' seen twice" in printed
    assert "line 3: not a JSON object" in printed
    assert "line 4: missing amount" in printed
    assert "line 5: not JSON" in printed
    batch.write_text('{"id": "a", "amount": "1"}\n')
    assert check_records.main(["--require", "id,amount", "--unique", "id"]) == 0


def test_check_records_names_a_line_that_is_not_utf8():
    lines = iter([b'{"id": "\xff"}\n', b'{"id": "b"}\n'])
    assert list(check_records.problems(lines, ["id"], "id")) == [
        "line 1: not JSON (not UTF-8: invalid start byte)"
    ]
