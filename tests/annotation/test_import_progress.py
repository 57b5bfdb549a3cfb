"""import_dataset's progress: plain lines in its output off a terminal, a bar on one, none when asked."""

import io
import json

from django.core.management import call_command

from annotation.models import Example

ROWS = 30


class Terminal(io.StringIO):
    def isatty(self):
        return True


def nli_file(tmp_path):
    path = tmp_path / "nli.jsonl"
    path.write_text("".join(json.dumps({"premise": f"A man is eating {i}.", "hypothesis": "Someone eats.",
                                        "label": "entailment"}) + "\n" for i in range(ROWS)), encoding="utf-8")
    return path


def run(path, *extra, stderr=None):
    out, err = io.StringIO(), stderr or io.StringIO()
    call_command("import_dataset", str(path), "--task", "nli", "--format", "nli-jsonl", "--round", "1",
                 "--split", "train", *extra, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_off_a_terminal_the_rows_read_are_plain_lines_before_the_report(demo_tasks, tmp_path):
    out, err = run(nli_file(tmp_path))
    lines = out.splitlines()
    shown = [line for line in lines if line.startswith("importing nli.jsonl: ")]
    # 30 rows are read well within the 2 s between lines: the last line only.
    assert shown == [f"importing nli.jsonl: {ROWS}/{ROWS} rows (100%)"]
    assert lines[0] == shown[0] and lines[1].startswith(f"Imported {tmp_path / 'nli.jsonl'} (nli-jsonl) into task "
                                                        f"nli: {ROWS} created")
    assert "\r" not in out and err == ""
    assert Example.objects.filter(task=demo_tasks["nli"], round__number=1).count() == ROWS


def test_on_a_terminal_a_bar_on_stderr_and_the_report_alone_on_stdout(demo_tasks, tmp_path):
    out, err = run(nli_file(tmp_path), stderr=Terminal())
    assert "importing" not in out and f"{ROWS} created" in out
    last = err.split("\r")[-1]
    assert last.startswith("importing nli.jsonl: 100%|") and f"| {ROWS}/{ROWS} [" in last


def test_no_progress_and_v0_keep_the_output_as_it_was(demo_tasks, tmp_path):
    path = nli_file(tmp_path)
    run(path)
    again, _ = run(path)  # all duplicates now: each run below prints the same report
    assert again.splitlines()[0] == f"importing nli.jsonl: {ROWS}/{ROWS} rows (100%)"
    for extra in (["--no-progress"], ["-v", "0"]):
        out, err = run(path, *extra, stderr=Terminal())
        assert err == "" and out.splitlines() == again.splitlines()[1:]
        assert out.startswith("Imported ") and f"0 created, {ROWS} skipped as duplicates, 0 malformed." in out
