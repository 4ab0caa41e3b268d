"""Structural properties of a compile: repeated compiles neither leak interned expressions nor
rename internal variables; user dim names never reach generated code; a compiled module pickles;
each kernel's ``cuda_source`` compiles alone; the 32-bit index entry point is chosen per kernel
from the bound of every index expression it evaluates, not from buffer sizes. Structure of the
package: stages import only the stages below them (the layering test); IR ops carry no backend
text, and every elementwise op is spelled in both languages (``kgen/spellings.py``)."""

from __future__ import annotations

import ast
import gc
import pathlib
import pickle
import re

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.dims import expr as dims_expr
from dlcb_lab.kgen.emit import cuda_module
from dlcb_lab.kgen.entries import NARROW_LIMIT
from dlcb_lab.runtime.nvrtc import compile_cubin

from harness import TOL
from models import HOSTILE, Overflow, WorkedSum


def _worked(backend="cpu", name="N"):
    return dl.compile(WorkedSum(), (torch.randn(2, 4, 6), torch.randn(1, 4, 1)),
                      dynamic={0: {0: name}}, backend=backend)


def test_repeated_compiles_do_not_leak_or_rename():
    first = repr(_worked().pipeline.solver_trace)
    gc.collect()
    before = len(dims_expr._TABLE)
    for _ in range(20):
        cm = _worked()
        assert repr(cm.pipeline.solver_trace) == first   # same names (_r1...), same steps
        del cm
    gc.collect()
    assert len(dims_expr._TABLE) <= before + 5, (before, len(dims_expr._TABLE))


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_dim_names(name):
    cm = _worked(name=name)
    x, y = torch.randn(5, 4, 6), torch.randn(1, 4, 1)
    torch.testing.assert_close(cm(x, y), WorkedSum()(x, y), **TOL)
    src = cuda_module([k.body for k in cm.pipeline.kernels])
    compile_cubin(src, arch="sm_90")   # NVRTC accepts it
    assert repr(cm.pipeline.dims.of("x")[0].expr) == name   # renderings keep the user's name


def test_each_kernel_cuda_source_compiles_alone():
    cm = dl.compile(WorkedSum(), (torch.randn(2, 4, 6), torch.randn(1, 4, 1)), dynamic={0: {0: "N"}},
                    backend="cpu")
    assert len(cm.pipeline.kernels) == 2
    for k in cm.pipeline.kernels:
        assert compile_cubin(k.cuda_source, arch="sm_90")[:4] == b"\x7fELF"


def test_compiled_module_pickles():
    cm = _worked()
    cm2 = pickle.loads(pickle.dumps(cm))
    x, y = torch.randn(7, 4, 6), torch.randn(1, 4, 1)
    torch.testing.assert_close(cm2(x, y), cm(x, y))
    assert repr(cm2.pipeline.graph) == repr(cm.pipeline.graph)
    assert cm2.stats()["thunk"] == "dynamic"
    g = pickle.loads(pickle.dumps(cm.pipeline.graph))
    assert [n.op for n in g.nodes] == [n.op for n in cm.pipeline.graph.nodes]   # ops by name


def test_index_width_from_index_bounds_per_kernel():
    """The reduction indexes a 2.1e9-element fused intermediate: its bound exceeds int32 although
    every buffer fits; the elementwise kernel beside it stays 32-bit."""
    cm = dl.compile(Overflow(), (torch.randn(4, 1, dtype=torch.float64),
                                 torch.randn(1, 65536, dtype=torch.float64)),
                    dynamic={0: {0: "N"}, 1: {1: "M"}}, backend="cpu")
    host = cm.pipeline.host_program
    r = host.interpret([(43692, 1), (1, 49152)])
    red, ew = cm.pipeline.kernels
    assert r[host.slots[f"{red.name}.numel"]] < NARROW_LIMIT   # buffers fit in int32
    assert r[host.slots[f"{red.name}.index_bound"]] >= 43692 * 49152 - 1 > NARROW_LIMIT
    assert r[host.slots[f"{ew.name}.index_bound"]] < NARROW_LIMIT
    small = host.interpret([(8, 1), (1, 8192)])
    assert small[host.slots[f"{red.name}.index_bound"]] < NARROW_LIMIT


def test_index_bound_is_tight_for_identity_layouts():
    """The bound follows the values (``200704*(t // 200704) <= numel``), not the worst case of each
    factor: a 25.7M-element broadcast kernel keeps the 32-bit entry point."""
    from dlcb_lab.bench.bandwidth import BiasReLU

    x, s = torch.randn(2, 64, 56, 56), torch.randn(1, 64, 1, 1)
    cm = dl.compile(BiasReLU(), (x, s, s), dynamic={0: {0: "N"}}, backend="cpu")
    host, (k,) = cm.pipeline.host_program, cm.pipeline.kernels
    r = host.interpret([(128, 64, 56, 56), (1, 64, 1, 1), (1, 64, 1, 1)])
    numel = r[host.slots[f"{k.name}.numel"]]
    assert numel <= r[host.slots[f"{k.name}.index_bound"]] <= numel + 2 ** 20


# --- the package's layering ------------------------------------------------------------------------

PACKAGE = pathlib.Path(dl.__file__).parent
LAYERS = ["errors display config", "dims", "ir", "passes", "kgen", "hostgen", "runtime", "bridge",
          "records", "api artifact", "__init__"]
"""Pipeline layers, lowest first: a module may import its own layer and those below it
(``artifact`` saves and loads a ``CompiledModule``; ``CompiledModule.save`` calls it)."""
BESIDE = {"viz", "bench", "demo", "cli"}
"""Beside the pipeline: may import anything; the pipeline never imports them, at module level or
inside a function (``dl.bench`` is a module attribute that loads the benchmarks on first use),
except through ``DOORS``."""
DOORS = {"dlcb_lab.display": {"dlcb_lab.viz.render"}}
"""The core's one door to the notebook layer: the display hook every record inherits
(``display.Rich``: ``_repr_mimebundle_``, ``to_html``) imports the rendering registry inside its
methods, as Jupyter calls them. Everything else that renders a record takes the record
(``viz.stepper(trace)``, ``viz.dump(pipeline, directory)``, ``viz.report.sections(report)``)."""
RANK = {part: i for i, layer in enumerate(LAYERS) for part in layer.split()}
FRONT_ENDS = {"dlcb_lab.bridge.dynamo"}
"""Front ends of ``dl.compile`` filed under a lower layer (the TorchDynamo backend sits with the
bridge): they may import any layer, but above their own only lazily, so importing the bridge
never imports ``api``."""


def _part(module: str) -> str:
    """``dlcb_lab.kgen.emit`` -> ``kgen``; ``dlcb_lab.api`` -> ``api``; ``dlcb_lab`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: pathlib.Path) -> list[tuple[str, bool, int]]:
    """(imported dlcb_lab module, at module level?, line) for every import in ``path``; relative
    imports resolved (``from ..ir import x`` in ``dlcb_lab/kgen/emit.py`` -> ``dlcb_lab.ir``)."""
    package = list(path.relative_to(PACKAGE.parent).parts[:-1])
    tree = ast.parse(path.read_text())
    top_level = {id(n) for n in tree.body}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            mod = ".".join(base + ([node.module] if node.module else []))
            names = [mod] if node.module else [f"{mod}.{a.name}" for a in node.names]
        else:
            continue
        out += [(n, id(node) in top_level, node.lineno) for n in names
                if n.split(".")[0] == "dlcb_lab"]
    return out


def _modules() -> dict[str, pathlib.Path]:
    return {".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts): p
            for p in sorted(PACKAGE.rglob("*.py"))}


def test_layering():
    """No pipeline module imports a higher layer, and none imports ``viz``, ``bench``, ``demo`` or
    ``cli``, at module level or inside a function, but the display hook (``DOORS``)."""
    bad = []
    for name, path in _modules().items():
        src = _part(name)
        if src in BESIDE:
            continue
        assert src in RANK, f"{name}: its layer is not listed in LAYERS"
        for target, top_level, line in _imports(path):
            dst = _part(target)
            if dst in BESIDE:
                if top_level or target not in DOORS.get(name, ()):
                    where = "" if top_level else ", inside a function"
                    bad.append(f"{name}:{line} imports {target} (beside the pipeline{where})")
            elif RANK[dst] > RANK[src] and (top_level or name not in FRONT_ENDS):
                bad.append(f"{name}:{line} ({src}) imports {target} ({dst}, a higher layer)")
    assert not bad, "\n".join(bad)


def test_layering_covers_the_split_modules():
    """The modules the api split created sit where the layering says: records between the stages
    and ``api``, the generalization policy in the bridge, the op spellings with the printers."""
    mods = _modules()
    for name, layer in [("dlcb_lab.records", "records"), ("dlcb_lab.api", "api"),
                        ("dlcb_lab.bridge.generalize", "bridge"),
                        ("dlcb_lab.kgen.spellings", "kgen")]:
        assert name in mods and _part(name) == layer
    imported = {t for t, _, _ in _imports(mods["dlcb_lab.api"])}
    assert {"dlcb_lab.records", "dlcb_lab.bridge.generalize"} <= imported, imported
    assert RANK["records"] < RANK["api"] and RANK["kgen"] < RANK["records"]


def test_bridge_is_capture_then_one_registry():
    """The bridge after the switch to ``torch.export``: ``capture`` (export, the dynamic spec,
    source locations) knows no lowering, only how a call binds (``signature``) and which modules
    a static export serves (``fast``); the lowerings,
    one module per op family under ``ops``, register themselves in ``registry`` (one
    registration per ATen packet) and never import the driver (``aten``), its parts by job
    (``sizes``, ``guards``, ``functionalize``, ``nodes``) or capture; ``api`` enters the bridge
    through ``capture``, ``signature``, ``aten``, ``guards`` and ``generalize`` only. The torch.fx
    tracer (``fx.py``), its opaque-function proxies (``proxy.py``) and the torch-signature tables
    (``tensor``, ``nn``, ``indexing``, ``aten_ext``) are gone."""
    mods = _modules()
    b = "dlcb_lab.bridge."
    families = ("elementwise", "reduction", "nn", "shape", "indexing", "library", "factory")
    for name in ("capture", "aten", "registry", "sizes", "guards", "functionalize", "nodes",
                 "common", "generalize", *(f"ops.{f}" for f in families)):
        assert b + name in mods and _part(b + name) == "bridge", name
    for gone in ("fx", "proxy", "tensor", "nn", "indexing", "aten_ext"):
        assert b + gone not in mods, gone

    def deps(name):
        return {t.removeprefix(b) for t, _, _ in _imports(mods[b + name]) if t.startswith(b)}

    assert {"capture", "registry", "sizes", "guards", "functionalize"} <= deps("aten"), \
        deps("aten")
    assert deps("capture") == {"signature", "fast"}, deps("capture")
    driver = {"aten", "sizes", "guards", "functionalize", "nodes", "capture"}
    for f in families:
        assert not {d for d in deps(f"ops.{f}") if not d.startswith("ops.")} & driver, \
            (f, deps(f"ops.{f}"))
    api = {t.removeprefix(b) for t, _, _ in _imports(mods["dlcb_lab.api"]) if t.startswith(b)}
    assert api == {"aten", "capture", "generalize", "guards", "signature"}, api


def _check_package(tmp_path, files: dict[str, str]) -> str:
    """``test_layering``'s report on a package of ``files`` (path -> source), empty if it passes."""
    pkg = tmp_path / "dlcb_lab"
    for rel, src in {"__init__.py": "", **files}.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        for d in (pkg / rel).parents:
            if d != pkg.parent and not (d / "__init__.py").exists() and d.is_relative_to(pkg):
                (d / "__init__.py").write_text("")
        (pkg / rel).write_text(src)
    globals()["PACKAGE"] = pkg
    try:
        test_layering()
    except AssertionError as err:
        return str(err)
    finally:
        globals()["PACKAGE"] = pathlib.Path(dl.__file__).parent
    return ""


def test_layering_check_catches_an_upward_import(tmp_path):
    """The checker itself: an ``ir`` module importing ``runtime``, and importing ``viz`` at
    module level or inside a function, are all reported."""
    msg = _check_package(tmp_path, {"ir/up.py": "from ..runtime.thunks import Thunk\n"
                                                "from ..viz import render\n"
                                                "def f():\n    from ..viz import code\n"})
    assert "dlcb_lab.ir.up:1 (ir) imports dlcb_lab.runtime.thunks (runtime" in msg, msg
    assert "dlcb_lab.ir.up:2 imports dlcb_lab.viz (beside the pipeline)" in msg, msg
    assert "dlcb_lab.ir.up:4 imports dlcb_lab.viz (beside the pipeline, inside a function)" in msg, \
        msg


def test_layering_check_allows_only_the_display_door(tmp_path):
    """A record that renders itself through a lazy import of ``viz`` (as ``Pipeline.dump`` and
    ``SolverTrace.stepper`` once did) fails the layering test; the display hook's lazy import of
    ``viz.render`` passes, but not at module level, and not of another ``viz`` module."""
    door = ("class Rich:\n    def _repr_mimebundle_(self):\n"
            "        from .viz.render import bundle\n        return bundle(self)\n")
    assert _check_package(tmp_path / "a", {"display.py": door}) == ""
    msg = _check_package(tmp_path / "b", {
        "display.py": door + "    def widget(self):\n        from .viz.solve import stepper\n",
        "records.py": "class Pipeline:\n    def dump(self, d):\n"
                      "        from .viz.files import dump\n        return dump(self, d)\n",
        "dims/solver.py": "class SolverTrace:\n    def stepper(self):\n"
                          "        import dlcb_lab.viz.solve\n"})
    assert [line.strip() for line in msg.splitlines()[:3]] == [
        "dlcb_lab.dims.solver:3 imports dlcb_lab.viz.solve (beside the pipeline, inside a "
        "function)",
        "dlcb_lab.display:6 imports dlcb_lab.viz.solve (beside the pipeline, inside a function)",
        "dlcb_lab.records:3 imports dlcb_lab.viz.files (beside the pipeline, inside a function)"], msg
    msg = _check_package(tmp_path / "c", {"display.py": "from .viz.render import bundle\n"})
    assert "dlcb_lab.display:1 imports dlcb_lab.viz.render (beside the pipeline)" in msg, msg


def test_core_has_no_rendering_methods():
    """The renderings that used to be record methods are functions of the record in ``viz``."""
    import dlcb_lab.viz as viz
    from dlcb_lab.dims.solver import SolverTrace
    from dlcb_lab.records import Pipeline

    assert not hasattr(Pipeline, "dump") and not hasattr(SolverTrace, "stepper")
    assert viz.dump.__module__ == "dlcb_lab.viz.files"
    assert viz.stepper.__module__ == "dlcb_lab.viz.solve"


# --- op spellings live with the printers -----------------------------------------------------------

def test_every_elementwise_op_is_spelled_in_both_languages():
    from dlcb_lab.ir.ops import OPS, OpKind
    from dlcb_lab.kgen import spellings

    ew = sorted(n for n, op in OPS.items() if op.kind is OpKind.ELEMENTWISE)
    assert len(ew) >= 30 and spellings.spelling_problems() == []
    for lang in ("cuda", "numba"):
        assert sorted(spellings.SPELLINGS[lang]) == ew
        for n in ew:
            fields = spellings.operand_fields(spellings.spelling(lang, n))
            assert fields == set(range(OPS[n].arity)), (lang, n)


def test_missing_spelling_is_a_clear_error(monkeypatch):
    """A registered elementwise op without a spelling, a spelling with the wrong operands and a
    stale entry are all named; emitting the unspelled op raises ``UnsupportedOp``."""
    from dataclasses import replace

    from dlcb_lab.ir.ops import OPS
    from dlcb_lab.kgen import spellings

    monkeypatch.setitem(OPS, "cube", replace(OPS["neg"], name="cube"))
    monkeypatch.setitem(OPS, "add", replace(OPS["add"], arity=3))
    monkeypatch.setitem(spellings.PY_OPS, "cube", "({0} * {0} * {0})")
    monkeypatch.setitem(spellings.CUDA_OPS, "cubed", "({0} * {0} * {0})")
    problems = spellings.spelling_problems()
    assert "CUDA_OPS lacks 'cube'" in problems
    assert "PY_OPS lacks 'cube'" not in problems
    assert "CUDA_OPS['add'] = '({0} + {1})' uses operands [0, 1], the op has arity 3" in problems
    assert "CUDA_OPS['cubed']: no elementwise op 'cubed' is registered" in problems
    with pytest.raises(dl.UnsupportedOp, match=r"(?s)out of step.*CUDA_OPS lacks 'cube'"):
        spellings.check_spellings()
    with pytest.raises(dl.UnsupportedOp, match=r"'cube' has no cuda spelling .*CUDA_OPS"):
        spellings.spelling("cuda", "cube")


def test_ir_ops_carry_backend_text_only_in_their_spellings():
    """No string in ``ir/ops/`` names a prelude helper (CUDA ``dlcb_*``, numba ``_*`` functions)
    or a language's math module but an elementwise op's own spellings (``OpDef.cuda``,
    ``OpDef.numba``, in its row): the ops state semantics and one expression per language, the
    preludes and printers stay in ``kgen``."""
    from dlcb_lab.ir.ops import OPS
    from dlcb_lab.kgen.spellings import CUDA_PRELUDE, PY_PRELUDE

    spelled = {t for op in OPS.values() for t in (op.cuda, op.numba)}

    helpers = set(re.findall(r"\b(dlcb_\w+)\s*\(", CUDA_PRELUDE)) | \
        set(re.findall(r"^def (_\w+)\(", PY_PRELUDE, re.M))
    assert {"dlcb_gelu", "dlcb_max", "_sigmoid", "_div"} <= helpers
    found = []
    for path in sorted((PACKAGE / "ir" / "ops").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value not in spelled:
                words = set(re.findall(r"[A-Za-z_]\w*", node.value))
                hit = words & helpers or {w for w in ("math", "np") if f"{w}." in node.value}
                if hit:
                    found.append(f"{path.name}:{node.lineno}: {sorted(hit)}")
    assert not found, found


def test_compile_runs_the_pipeline_as_named_steps():
    """``dl.compile`` is the pipeline: one timing per step, in order, summing to ``compile_s``;
    the records live in ``dlcb_lab.records`` and the compiled module calls like ``forward``."""
    from dlcb_lab import records

    cm = _worked()
    t = cm.pipeline.timings
    assert list(t) == ["capture", "lower", "generalize", "passes", "kgen", "hostgen", "build"]
    assert all(v >= 0 for v in t.values()) and cm.stats()["compile_s"] == sum(t.values())
    assert type(cm.pipeline) is records.Pipeline is dl.Pipeline
    assert all(type(k) is records.Kernel for k in cm.pipeline.kernels)
    assert type(cm.pipeline.dims) is records.DimTable
    x, y = torch.randn(3, 4, 6), torch.randn(1, 4, 1)
    torch.testing.assert_close(cm(y=y, x=x), WorkedSum()(x, y), **TOL)


def test_tests_are_layered_by_stage():
    """``tests/<stage>/`` per pipeline stage, helpers in ``tests/tools``; every package of
    ``dlcb_lab`` maps to the folders that test it (``make test-changed``)."""
    import stages

    tests = pathlib.Path(__file__).resolve().parents[1]
    folders = {p.name for p in tests.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == {*stages.ORDER, "tools"}, folders
    assert not list(tests.glob("test_*.py")), "a test file outside the stage folders"
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    assert packages == set(stages.PACKAGE_TESTS), packages
    assert stages.folders(["dlcb_lab/dims/expr.py", "tests/viz/test_dump.py", "docs/index.md",
                           "dlcb_lab/api.py", "dlcb_lab/bridge/aten.py"]) == \
        ["tests/dims", "tests/ops", "tests/bridge", "tests/api", "tests/viz"]
