"""Hostile CLI input and faults (bad files, bad values, killed ranks, a torn results file), each through the
real command line in a subprocess, with its reproducer: every one now a one-line error and exit 2 (or, for
the torn results file, the good records stored), never a traceback, a hang or a fork storm."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuval.cli import app
from gpuval.report.build import md_escape
from tests.conftest import DATA, run_gpuval


def _clean_error(proc, *words: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines and lines[-1].startswith("error:"), proc.stderr
    for word in words:
        assert word in proc.stderr


def test_c1_history_since_far_back():
    _clean_error(run_gpuval("history", "--since", "9999999d"), "calendar")


@pytest.mark.parametrize("args", [("bench", "[/]"), ("parse", "[/]"), ("bench", "[bold]x[/bold]")])
def test_c3_error_messages_with_markup_are_printed_as_text(args):
    proc = run_gpuval(*args)
    _clean_error(proc, args[1])


def test_c4_f4_a_torn_line_in_results_keeps_the_other_records(tmp_path):
    lines = (DATA / "results" / "gpuval-0.1.0-records.jsonl").read_text().splitlines()
    torn = tmp_path / "m.jsonl"
    torn.write_text("\n".join(lines[:3] + ['x{', lines[3][: len(lines[3]) // 2]] + lines[4:]) + "\n")
    proc = run_gpuval("import", str(torn), "--json", "--db", str(tmp_path / "r.db"))
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["stored"] == len(lines) - 1
    assert [s.split(": ")[0] for s in out["files"][0]["skipped"]] == [f"{torn}:4", f"{torn}:5"]


@pytest.mark.parametrize("size", ["99999999999999999999G", "2T", "9" * 30])
def test_c5_sizes_above_any_memory_are_refused(size):
    _clean_error(run_gpuval("bench", "all_reduce", "-b", "1K", "-e", size, "--nprocs", "2"), "bad size")


@pytest.mark.parametrize("flag", ["-J", "--results"])
def test_c6_a_folder_for_an_output_file_is_refused_before_the_sweep(tmp_path, flag):
    proc = run_gpuval("bench", "all_reduce", "-b", "1K", "-e", "1K", "--nprocs", "2", flag, str(tmp_path), timeout=60)
    _clean_error(proc, "is a folder")
    assert "all_reduce_perf" not in proc.stdout  # nothing was measured


def test_c7_sendrecv_on_one_rank_says_why():
    _clean_error(run_gpuval("bench", "sendrecv", "-b", "1K", "-e", "1K", "--nprocs", "1"), "at least 2 ranks")


@pytest.mark.parametrize("nprocs", ["10000", "0", "-1"])
def test_c8_c9_nprocs_bounded_for_bench_and_validate(nprocs):
    _clean_error(run_gpuval("bench", "all_reduce", "-b", "1K", "-e", "1K", "--nprocs", nprocs), "--nprocs")
    if nprocs != "-1":
        _clean_error(run_gpuval("validate", "--nprocs", nprocs, "-e", "1K"), "--nprocs")


def test_p9_fifo_and_devices_are_refused_at_once(tmp_path):
    fifo = tmp_path / "f"
    os.mkfifo(fifo)
    _clean_error(run_gpuval("parse", str(fifo), timeout=20), "not a regular file")
    _clean_error(run_gpuval("import", "/dev/zero", "--db", str(tmp_path / "r.db"), timeout=20), "not a regular file")


def test_f3_a_full_disk_names_the_file():
    """/dev/full answers every write with ENOSPC, as a full disk does."""
    from gpuval.results.sink import append_jsonl
    from tests.helpers.records import record

    lammps = record(kind="lammps", name="lj", host="h")
    with pytest.raises(OSError) as err:
        append_jsonl([lammps], Path("/dev/full"))
    assert err.value.filename == "/dev/full" and "No space left" in str(err.value)


def test_x1_markdown_report_values_are_inert():
    hostile = 'node|<img src=https://evil.example/pixel>|x [a](b) *c* `d`\nnext'
    text = md_escape(hostile)
    assert "<img" not in text and "|" not in text.replace("\\|", "") and "\n" not in text
    assert "](b)" not in text.replace("\\]", "")


def test_x1_markdown_report_of_a_hostile_host(tmp_path):
    db = str(tmp_path / "r.db")
    log = DATA / "lammps" / "log.27Nov18.melt.g++.4"
    assert run_gpuval("import", str(log), "--run-id", "p", "--host", "node|<img src=x>|x", "--db", db).returncode == 0
    proc = run_gpuval("report", "--run", "p", "-o", str(tmp_path / "r.html"), "--md", str(tmp_path / "r.md"),
                      "--db", db)
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "r.md").read_text()
    assert "<img" not in md and "node\\|&lt;img src=x&gt;\\|x" in md


@pytest.mark.parametrize("args", [
    ("--cut", "nan"), ("--cut", "inf"), ("--cut", "1.5"), ("--cut", "0"), ("--timeout", "inf"), ("--timeout", "-5"),
    ("--queue-timeout", "nan"), ("--poll", "-inf"),
])
def test_d6_float_options_are_finite_and_positive_or_refused(args):
    """`fleet check --cut nan` was accepted (a cut no figure can be judged against) and `--timeout inf` was an
    OverflowError traceback where the job's time limit is worked out: every float option is refused unless it is
    a finite number above 0 (a cut, a share, also under 1). In-process (typer's runner): no job is sent."""
    result = CliRunner().invoke(app, ["fleet", "check", "--on", "local", "--nodes", "1", "--dry-run", *args])
    assert result.exit_code == 2 and not isinstance(result.exception, OverflowError), (result.exit_code, result.output)
    assert args[0] in result.output and "Traceback" not in result.output, result.output


def _boom(error: BaseException):
    """A command of gpuval's shape (wrapped by handle_errors) that fails with `error`, as a bug or a job's output
    that no reader foresaw would."""
    from gpuval.cli._common import command_group, handle_errors

    def fails() -> None:
        raise error

    group = command_group("test")
    group.command("fails")(handle_errors(fails))
    group.command("other")(handle_errors(lambda: None))  # two commands: `fails` is then a subcommand
    return group


@pytest.mark.parametrize("error", [MemoryError(), ValueError("a record of 952307 bytes takes 1073 pieces\nmore"),
                                   RecursionError("maximum recursion depth exceeded"), KeyError("rank")])
def test_d10_an_unexpected_error_is_one_line_and_exit_2_never_1(error):
    """reliability-4 D10: a MemoryError (a job's output claiming a world of 10^9 ranks) ended `jobs diagnose` with a
    traceback and exit 1, which that command documents as "a suspect failed its re-test". Any exception no
    command foresaw is now one line on stderr and exit 2 ("could not run"), in the one wrapper every command has."""
    result = CliRunner().invoke(_boom(error), ["fails"])
    assert result.exit_code == 2, (result.exit_code, result.output)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and type(error).__name__ in lines[0], result.stderr
    assert "Traceback" not in result.output


def test_d10_the_exit_codes_commands_choose_are_kept():
    """A command's own exit code (1: a check failed; 0) passes the wrapper unchanged; Ctrl-C stays 130."""
    import typer

    for code in (0, 1):
        result = CliRunner().invoke(_boom(typer.Exit(code)), ["fails"])
        assert result.exit_code == code and not result.stderr, (code, result.output)
    assert CliRunner().invoke(_boom(KeyboardInterrupt()), ["fails"]).exit_code == 130


def test_d10_every_command_has_the_one_error_wrapper():
    """Every command of `gpuval` (sub-commands and hidden ones included) runs inside cli._common.handle_errors, so
    the rule above holds for all of them: a command registered without it fails here by name."""
    from gpuval.cli._common import handle_errors

    wrapped = handle_errors(lambda: None).__code__  # every wrapper handle_errors makes runs this code

    def commands(group, prefix=""):
        for info in group.registered_commands:
            yield f"{prefix}{info.name or info.callback.__name__}", info.callback
        for sub in group.registered_groups:
            yield from commands(sub.typer_instance, f"{prefix}{sub.name} ")

    found = dict(commands(app))
    assert len(found) > 30
    assert [name for name, callback in found.items() if callback.__code__ is not wrapped] == []
