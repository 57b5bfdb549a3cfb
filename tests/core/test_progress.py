"""core.progress: a tqdm bar on a terminal, a few plain lines (no carriage returns) elsewhere."""

import io

from core.progress import Progress, counted, counter


class Terminal(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_plain_lines_every_step_of_the_total_and_the_last():
    out = io.StringIO()
    shown = Progress(out, io.StringIO(), every=25, min_seconds=0)
    assert not shown.on_terminal  # neither stream is a terminal
    with shown:
        for i in shown.iterate(range(20000), "importing rows.jsonl", 20000, "rows"):
            if i == 7000:
                shown.write("a line of the command's own")
    text = out.getvalue()
    assert "\r" not in text
    assert text.splitlines() == [
        "importing rows.jsonl: 5000/20000 rows (25%)",
        "a line of the command's own",
        "importing rows.jsonl: 10000/20000 rows (50%)",
        "importing rows.jsonl: 15000/20000 rows (75%)",
        "importing rows.jsonl: 20000/20000 rows (100%)",
    ]


def test_plain_lines_wait_min_seconds_and_finish_says_where_it_stopped():
    out, clock = io.StringIO(), Clock()
    shown = Progress(out, terminal=False, every=10, min_seconds=2, clock=clock)
    for step, now in [(10, 1.0), (20, 3.0), (25, 4.0), (35, 4.5), (60, 20.0)]:
        clock.now = now
        shown.show("training m0", step, 100, "steps")
    shown.show("evaluation job #4", 40, 100, "%")  # a new label ends the last bar
    shown.finish()
    shown.finish()  # nothing left to end
    assert out.getvalue().splitlines() == [
        "training m0: 20/100 steps (20%)",  # 10% came before 2 s had passed
        "training m0: 60/100 steps (60%)",  # 25% is the same step as 20%; 35% came too soon
        "evaluation job #4: 40%",  # where it stopped, as it ended
    ]


def test_plain_lines_without_a_total_come_every_ten_seconds():
    out, clock = io.StringIO(), Clock()
    shown = Progress(out, terminal=False, clock=clock)
    with shown:
        shown.start("reading", unit="rows")
        for second in range(1, 31):  # a row a second
            clock.now = second
            shown.advance()
    assert out.getvalue().splitlines() == ["reading: 10 rows", "reading: 20 rows", "reading: 30 rows"]


def test_a_bar_on_a_terminal():
    out = io.StringIO()
    shown = Progress(out, terminal=True)
    assert shown.on_terminal
    with shown:
        for i in shown.iterate(range(20), "importing rows.jsonl", 20, "rows"):
            if i == 5:
                shown.write("a line of the command's own")
    text = out.getvalue()
    assert "\r" in text and "a line of the command's own\n" in text
    last = text.split("\r")[-1]
    assert last.startswith("importing rows.jsonl: 100%|") and "| 20/20 [" in last and last.endswith("\n")
    assert "(100%)" not in text  # no plain lines beside the bar


def test_the_bar_goes_to_stderr_when_it_is_the_terminal():
    out, err = io.StringIO(), Terminal()
    shown = Progress(out, err)
    with shown:
        shown.show("training job #3", 45, 100, "%")
        shown.write("  train: [12:00:00] epoch 1/1 step 2/4 loss 1.0")
        shown.show("training job #3", 100, 100, "%")
    assert out.getvalue() == "  train: [12:00:00] epoch 1/1 step 2/4 loss 1.0\n"  # stdout stays clean
    assert err.getvalue().split("\r")[-1].startswith("training job #3: 100%|")


class Command:
    def __init__(self):
        self.stdout, self.stderr = io.StringIO(), io.StringIO()


def test_no_progress_and_verbosity_0_show_nothing_but_the_commands_lines():
    for options in ({"no_progress": True, "verbosity": 1}, {"no_progress": False, "verbosity": 0}):
        command = Command()
        shown = Progress.for_command(command, options)
        assert not shown.enabled
        with shown:
            for _ in shown.iterate(range(100), "importing", 100, "rows"):
                pass
            shown.write("Imported.")
        assert command.stdout.getvalue() == "Imported.\n" and command.stderr.getvalue() == ""
    command = Command()
    assert Progress.for_command(command, {"verbosity": 1}).enabled


def test_counted_counts_each_turn_however_it_ended():
    calls = []
    for slug in counted(["nli", "qa", "hate"], "seed models", lambda *a: calls.append(a)):
        if slug == "qa":
            continue
    assert calls == [("seed models", 0, 3), ("seed models", 1, 3), ("seed models", 2, 3), ("seed models", 3, 3)]
    done = counter("nothing", 0, lambda *a: calls.append(a))
    done()
    assert len(calls) == 4  # nothing to count: nothing shown
