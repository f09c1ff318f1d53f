"""`detconv demo`, the `detconv` command and benchmarks/cpu.py keep working."""

import os
import subprocess
import sys

import pytest

import detconv
from detconv._loader import child_python_kwargs
from detconv import cli
from detconv.demo import SCENARIOS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(ROOT, "benchmarks", "cpu.py")


def _run(args, timeout=600):
    # Run against the same detconv these tests import (installed or built in place), never a shadowing copy.
    return subprocess.run([sys.executable, *args], **child_python_kwargs(log_level="3"), capture_output=True,
                          text=True, timeout=timeout)


def _table_rows(stdout):
    """{scenario: [(device, held), ...]} from the demo's table (first line of each wrapped row)."""
    rows = {}
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split(" | ")]
        if len(cells) == 5 and cells[0] and cells[0] != "scenario":
            rows.setdefault(cells[0], []).append((cells[1], cells[4]))
    return rows


def test_demo_quick():
    p = _run(["-m", "detconv", "demo", "--quick"])
    assert p.returncode == 0, f"demo failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}"
    rows = _table_rows(p.stdout)
    for name in SCENARIOS:
        assert name in rows, f"scenario {name!r} missing from the table:\n{p.stdout}"
    for name, cells in rows.items():
        for device, held in cells:
            assert held in ("yes", "skip"), f"{name} on {device}: detconv {held}\n{p.stdout}"
    # Every CPU row is a real check here, except training if that module is absent.
    cpu = {name: held for name, cells in rows.items() for device, held in cells if device == "CPU"}
    assert all(held == "yes" for name, held in cpu.items() if name != "small CNN trained twice"), p.stdout
    assert "detconv held in every row" in p.stdout


def test_benchmark_smoke():
    if not os.path.isfile(BENCH):
        pytest.skip("benchmarks/cpu.py is not in this checkout")
    p = _run([BENCH, "--smoke"], timeout=300)
    assert p.returncode == 0, f"benchmark failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}"
    for pas in ("fwd", "dx", "dw"):
        assert f" {pas} " in p.stdout, p.stdout
    assert "geometric mean of ratios" in p.stdout


def test_keras_fit_benchmark_smoke():
    script = os.path.join(ROOT, "benchmarks", "keras_fit.py")
    if not os.path.isfile(script):
        pytest.skip("benchmarks/keras_fit.py is not in this checkout")
    p = _run([script, "--smoke", "--ops"], timeout=300)
    assert p.returncode == 0, f"keras_fit failed ({p.returncode}):\n{p.stdout}\n{p.stderr[-3000:]}"
    lines = p.stdout.splitlines()
    row = next(line.split() for line in lines if line.startswith("smoke "))
    assert float(row[3]) > 0 and float(row[4]) > 0 and row[5] == "2", p.stdout  # ratios; both swapped
    # --ops: the profile's rows by op type; the converted side's convolutions are detconv's ops only.
    ops = {line[:48].strip(): line[48:].split() for line in lines[lines.index(next(
        line for line in lines if line.startswith("op type"))) + 1:] if len(line) > 48}
    assert float(ops["DetConv>Conv2D"][1]) > 0 and float(ops["DetConv>Conv2D"][0]) == 0, p.stdout
    stock_conv = [k for k in ops if "conv" in k.lower() and not k.startswith(("DetConv>", "all "))]
    assert stock_conv and all(float(ops[k][1]) == 0 for k in stock_conv), p.stdout
    assert float(ops["all convolution ops (fused ones included)"][0]) > 0, p.stdout


def test_cli_bench_without_checkout(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_benchmark_script", lambda: None)
    assert cli.main(["bench", "--quick"]) == 2
    assert "source checkout" in capsys.readouterr().err


def test_cli_unknown_command(capsys):
    assert cli.main(["frobnicate"]) == 2
    assert "unknown command" in capsys.readouterr().err
