"""Differential fuzzing (``tests/tools/fuzz.py``): a bounded slice of random graphs in the suite, every
saved reproducer replayed, and the fuzzer's own parts (programs round-trip through JSON, a
failure shrinks, a refusal is not a failure). ``make fuzz`` runs 10,000 graphs."""

from __future__ import annotations

import ast
import json
import os
import re
from collections import Counter

import pytest
import torch

import fuzz
from fuzz import CASES, Case, generate, run_case, shrink

SAVED = sorted(CASES.glob("*.json"))


@pytest.mark.parametrize("seed", range(40))
def test_random_graphs_match_eager(seed):
    out = run_case(generate(seed))
    assert out.status in ("pass", "refused"), out.detail
    if out.status == "pass":
        assert out.calls >= 3   # batch 3, 1, 7 at least (0 where eager runs it)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("path", SAVED, ids=[p.stem for p in SAVED])
def test_saved_reproducers(path, device):
    """Every saved case on both devices (each was found on one of them)."""
    case = Case.from_json(path.read_text())
    out = run_case(case, device)
    assert out.status in ("pass", "refused"), f"{path.name} ({case.note}): {out.detail}"


def test_programs_round_trip_and_are_deterministic():
    a, b = generate(7), generate(7)
    assert a.to_json() == b.to_json()
    assert Case.from_json(a.to_json()).to_json() == a.to_json()
    assert json.loads(a.to_json())["steps"] and len(generate(8).to_json()) > 0


def test_a_failure_shrinks_to_its_cause(monkeypatch):
    """A planted bug (results off by 1.0 in any program with an exp) in a four-step program on
    strided inputs with NaNs shrinks to the one step that shows it, on plain inputs."""
    case = Case(3, "float32", [{"shape": [None, 4, 5], "layout": "strided", "special": "nan"}],
                [{"op": "relu", "args": [0], "p": {}},
                 {"op": "expneg", "args": [1], "p": {}},
                 {"op": "add_s", "args": [2], "p": {}},
                 {"op": "sum", "args": [3], "p": {"dims": [2], "keep": False}}])
    assert run_case(case).status == "pass"
    real = fuzz.dl.compile

    def wrong(module, examples, **kw):   # a compiled module whose results are off after exp
        cm = real(module, examples, **kw)
        has_exp = any(st["op"] == "expneg" for st in module.case.steps)
        return (lambda *xs: cm(*xs) + 1.0) if has_exp else cm

    monkeypatch.setattr(fuzz.dl, "compile", wrong)
    assert run_case(case).status == "fail"
    small = shrink(case)
    assert [s["op"] for s in small.steps] == ["expneg"], small.steps
    assert small.inputs[0]["layout"] == "contiguous" and small.inputs[0]["special"] is None


def test_refusals_and_invalid_programs_are_not_failures():
    bad = Case(0, "float32", [{"shape": [None, 3], "layout": "contiguous", "special": None}],
               [{"op": "matmul", "args": [0], "p": {"out": 2}},
                {"op": "add", "args": [0, 1], "p": {}}])   # [N, 3] + [N, 2]: eager refuses
    assert run_case(bad).status == "invalid"
    pinned = Case(0, "float32", [{"shape": [None, "M=4"], "layout": "contiguous",
                                  "special": None}],
                  [{"op": "linear", "args": [0], "p": {"out": 2, "bias": True}}])
    out = run_case(pinned)   # a dynamic last axis the linear's weight fixes: a dl refusal
    assert out.status == "refused" and "M" in out.detail and "fixes it to 4" in out.detail, out


def test_nonfinite_inputs_checked_against_float64_where_eager_disagrees():
    """CPU float32 gelu of inf is inf through torch's scalar path and NaN through its vectorized
    one; DLCB's inf matches the float64 program, so the case passes (the fuzzer's first find)."""
    case = Case(1097, "float32", [{"shape": [None, 4], "layout": "contiguous",
                                   "special": "inf"}], [{"op": "gelu", "args": [0], "p": {}}])
    x = fuzz.make_inputs(case, 3, "cpu")[0]
    assert torch.isinf(x).any()
    assert run_case(case).status == "pass"


def test_sanitizer_logs_tell_generated_kernels_from_library_ones(tmp_path):
    """``tests/tools/sanitize.py summarize``: errors counted per log (the summary line, not the count
    left unprinted), those naming a ``dlcb_k`` kernel apart from library ones and from errors an
    API call returned (even where a host frame names a DLCB launch)."""
    import sanitize

    (tmp_path / "memcheck.log").write_text("""\
========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at dlcb_k3_relu_v+0x1b0 in /tmp/x.cu:12
=========     by thread (255,0,0) in block (0,0,0)
=========     Address 0x7f0000001000 is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========     Host Frame: [0x2f7a] in libcuda.so.1
=========
========= Invalid __global__ read of size 16 bytes
=========     at void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>>(int, T2, T3)+0x90
=========     by thread (1,0,0) in block (3,0,0)
=========
========= Program hit cudaErrorInvalidValue (error 1) due to "invalid argument" on CUDA API call to cudaMemcpyAsync.
=========     Saved host backtrace up to driver entry point at error
=========         Host Frame: call in <dlcb launch dlcb_k0_relu_v>:10
=========
========= Invalid __global__ read of size 4 bytes
=========     at void at::native::reduce_kernel<512, 1>(T1)+0x10
=========
========= ERROR SUMMARY: 4 errors
========= ERROR SUMMARY: 1 errors were not printed. Use --print-limit option to adjust the number
""")
    (tmp_path / "racecheck.log").write_text(
        "========= COMPUTE-SANITIZER\n"
        "========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n")
    (tmp_path / "initcheck.log").write_text(   # cut off: no summary
        "========= COMPUTE-SANITIZER\n========= Uninitialized __global__ memory read of size 16 "
        "bytes\n=========     at dlcb_k3_relu_v+0x430\n")
    (tmp_path / "racecheck-suite.log").write_text(   # the tool's own error, cut off
        "========= COMPUTE-SANITIZER\n========= Internal Sanitizer Error: Detected a failure to "
        "track a kernel launch. Future records might be incomplete\n=========\n")
    rows = {r["log"]: r for r in sanitize.summarize(tmp_path)}
    assert rows["racecheck-suite"]["kernels"] == {"sanitizer": 1}
    assert rows["racecheck-suite"]["generated"] == 0
    mem = rows["memcheck"]
    assert (mem["errors"], mem["generated"], mem["api"], mem["other"]) == (4, 1, 1, 2), mem
    assert mem["kernels"] == {"dlcb_k3_relu_v": 1,
                              "void at::native::vectorized_elementwise_kernel<4, "
                              "at::native::AbsFunctor<float>>": 1,
                              "void at::native::reduce_kernel<512, 1>": 1,
                              "api:cudaMemcpyAsync": 1}, mem["kernels"]
    assert rows["racecheck"]["errors"] == 0 and rows["racecheck"]["complete"]
    ini = rows["initcheck"]
    assert (ini["errors"], ini["generated"], ini["complete"]) == (1, 1, False), ini


def test_jobs_split_the_seeds_and_sum_the_counts(capsys, tmp_path):
    """``--jobs 2``: two child processes, seeds 40..44 and 45..48, one line of totals; the same
    counts as the graphs run one by one."""
    assert fuzz.main(["--graphs", "9", "--seed", "40", "--jobs", "2", "--save", str(tmp_path)]) == 0
    done = capsys.readouterr().out.strip().splitlines()[-1]
    alone = [run_case(generate(s)) for s in range(40, 49)]
    m = re.fullmatch(r"done: 9 graphs, (\d+) compiled calls checked, (\{.*\}), \d+ s", done)
    assert m, done
    assert int(m[1]) == sum(o.calls for o in alone)
    assert ast.literal_eval(m[2]) == dict(Counter(o.status for o in alone))


_DIES_AT_12 = """
import json, os, sys
sys.path.insert(0, {tests!r})
from fuzz import generate
seed, graphs, log = (int(sys.argv[sys.argv.index(k) + 1]) if k != "--progress" else
                     sys.argv[sys.argv.index(k) + 1] for k in ("--seed", "--graphs", "--progress"))
with open(log, "a") as f:
    for i in range(seed, seed + graphs):
        print(f"begin {{i}}", file=f, flush=True)
        if i == 11:
            os.abort()   # while generating
        print(f"case {{i}} {{json.dumps(generate(i).to_json())}}", file=f, flush=True)
        if i == 12:
            os.abort()   # while running
        print(f"end {{i}} pass 4", file=f, flush=True)
"""


def test_a_child_that_dies_is_a_crash_of_its_graph_and_the_rest_still_run(tmp_path):
    """A child aborting while it generates graph 11 of 10..14 (an eager crash, no case) and
    while it runs graph 12 (a crash, its case saved): new children run the rest, and the counts
    hold every graph once."""
    import sys

    child = [sys.executable, "-c", _DIES_AT_12.format(tests=os.path.dirname(fuzz.__file__))]
    counts, calls = fuzz.run_isolated(10, 5, [], tmp_path, child=child)
    assert counts == {"pass": 3, "eager_crash": 1, "crash": 1} and calls == 12, (counts, calls)
    (saved,) = tmp_path.glob("case_*.json")
    case = Case.from_json(saved.read_text())
    assert case.seed == 12 and case.steps == generate(12).steps and "exit status -6" in case.note
