"""``mlsysopt nas`` refuses bad input with one ``error:`` line, exit 2, no traceback and nothing in ``--out``.

These run the real entry point, :func:`mlsysopt.cli.main`, in this process (``tests/test_cli_nas.py`` runs it as a
subprocess): a refusal happens before any work, so a fresh interpreter per case would only add start-up time.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from cli_helpers import assert_user_error

CORA = ("nas", "search", "--space", "nasbench-graph:cora")
DIGITS = ("nas", "search", "--space", "digits")


def main_here(capsys: pytest.CaptureFixture[str], *args: str | Path) -> subprocess.CompletedProcess[str]:
    """``mlsysopt ARGS`` through the real entry point in this process; exit code and captured output."""
    from mlsysopt.cli import main

    argv = [str(a) for a in args]
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code, out, err)


BAD = [
    # integers given as something else (our own parser: one line now)
    ((*CORA, "--budget", "1.5"), ["--budget '1.5' is not an integer"]),
    ((*CORA, "--budget", "true"), ["--budget 'true' is not an integer"]),
    ((*DIGITS, "--epochs", "2.5"), ["--epochs '2.5' is not an integer"]),
    ((*DIGITS, "--max-blocks", "yes"), ["--max-blocks 'yes' is not an integer"]),
    ((*CORA, "--knob", "round_size=1.5"), ["--knob round_size=1.5: expected an integer"]),
    ((*CORA, "--knob", "warmup=true"), ["--knob warmup=true: expected an integer"]),
    # sizes beyond what this machine's memory and time allow, with the limit
    ((*CORA, "--budget", "30000"), ["--budget 30,000 is more than the 26,206", "nasbench-graph:cora has 26,206"]),
    ((*DIGITS, "--budget", "1000000000000"), ["--budget 1,000,000,000,000 is more than the", "bytes per evaluation"]),
    ((*DIGITS, "--max-blocks", "100000"), ["--max-blocks 100000: training the largest candidate needs", "limit here"]),
    ((*DIGITS, "--epochs", "100000000"), ["--epochs 100,000,000 with --max-blocks 4", "the limit at 4 block(s) is"]),
    ((*DIGITS, "--workers", "100000"), ["--workers 100,000 is more than the", "per local worker process"]),
    ((*CORA, "--workers", "10000000", "--backend", "ray"), ["--workers 10,000,000 is more than", "per Ray task"]),
    ((*DIGITS, "--ops", ",".join(["conv3x3"] * 500)), ["--ops is 3,999 characters long (at most 2,000)"]),
    ((*DIGITS, "--ops", "conv3x3,identity,conv3x3"), ["--ops names conv3x3 more than once"]),
    # ranges that were not checked before
    ((*CORA, "--method", "evolution", "--knob", "population=0"), ["knob population is out of range", ">= 1"]),
    ((*CORA, "--method", "evolution", "--knob", "tries=-1"), ["knob tries is out of range: it needs tries >= 1"]),
    ((*CORA, "--method", "epnas", "--knob", "candidates=0"), ["method 'epnas': knob candidates is out of range"]),
    ((*CORA, "--knob", "grow=2"), ["knob grow is out of range: it needs grow >= 0 and grow <= 1"]),
    ((*CORA, "--method", "tpe", "--knob", "n_startup=-2"), ["knob n_startup is out of range"]),
    ((*CORA, "--method", "pnas", "--knob", "stage_split=cosine"), ["unknown stage_split 'cosine'"]),
    ((*CORA, "--method", "epnas", "--knob", "population=3"), ["--knob population: method 'epnas' has no such knob"]),
    ((*CORA, "--knob", "warmup"), ["--knob 'warmup': expected NAME=VALUE"]),
    ((*DIGITS, "--lr", "0"), ["--lr must be a finite number > 0, got 0.0"]),
    ((*DIGITS, "--lr", "inf"), ["'--lr': must be a finite number, got inf"]),
    ((*CORA, "--seed", "99999999999999999999"), ["'--seed': must be at most 9,223,372,036,854,775,807"]),
    ((*CORA, "--timeout", "inf"), ["'--timeout': must be a finite number, got inf"]),
    # export
    (("nas", "export", "{tmp}/nope", "--out", "{out}"), ["no such run folder"]),
    (("nas", "export", "{tmp}", "--out", "{out}"), ["has no settings.json: not a 'nas search' run folder"]),
]


@pytest.mark.parametrize(("args", "needles"), BAD, ids=[" ".join(a[2:])[:60] for a, _ in BAD])
def test_bad_input_is_one_line_and_leaves_nothing(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: tuple, needles: list[str]
) -> None:
    out = tmp_path / "r"
    argv = [str(a).replace("{tmp}", str(tmp_path)).replace("{out}", str(out)) for a in args]
    if argv[1] == "search":
        argv += ["--out", str(out)]
    assert_user_error(main_here(capsys, *argv), *needles)
    assert not out.exists()


SHARED = [("--workers", "0"), ("--workers", "1.5"), ("--workers", "true"), ("--seed", "-1"), ("--timeout", "nan")]


@pytest.mark.parametrize(("flag", "value"), SHARED)
def test_the_shared_options_refuse_bad_values_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, value: str
) -> None:
    proc = main_here(capsys, *CORA, flag, value, "--out", tmp_path / "r")
    assert not (tmp_path / "r").exists() and proc.returncode == 2 and "Traceback" not in proc.stderr
    assert_user_error(proc, flag)
