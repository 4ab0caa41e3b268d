"""The bridge: capture by torch.export, eager fallback between compiled ops, automatic shape
generalization (``dynamic="auto"``), and HuggingFace transformers models (tiny configs, random
weights) from one compile each, all against eager on several shapes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import torchvision

import dlcb_lab as dl

HERE = "test_bridge.py"


class Erfcx(torch.nn.Module):
    """An op DLCB does not lower (erfcx) between two compiled regions, with shapes crossing it."""

    def forward(self, x):
        y = torch.relu(x) + 1
        z = torch.special.erfcx(y.tanh())
        z = z.view(z.size(0), -1, 2)
        return (z * 2).sum(-1)


def test_unsupported_op_between_compiled_regions_runs_eagerly():
    m = Erfcx()
    cm = dl.compile(m, (torch.randn(3, 8),), dynamic={0: {0: "N"}}, backend="cpu")
    for n in (1, 5, 9):
        x = torch.randn(n, 8)
        torch.testing.assert_close(cm(x), m(x))
    steps = [(s.op.name if hasattr(s, "op") else "kernel") for s in cm.pipeline.launch_plan.steps]
    assert steps == ["kernel", "eager", "kernel"], steps
    (node,) = [n for n in cm.pipeline.graph.nodes if n.op.name == "eager"]
    assert node.attrs["target"] == "aten.special_erfcx.default"
    assert "no DLCB lowering" in node.attrs["reason"] and HERE in node.where
    (step,) = [s for s in cm.pipeline.partition.steps if s.why]
    assert step.why.startswith("aten.special_erfcx.default at test_bridge.py:")
    assert cm.stats()["compiles"] == 1


def test_fallback_false_lists_every_unsupported_node():
    with pytest.raises(dl.UnsupportedOp, match=r"(?s)1 ATen node not supported.*special_erfcx.*"
                                                rf"{HERE}:\d+ in forward"):
        dl.compile(Erfcx(), (torch.randn(3, 8),), dynamic={0: {0: "N"}}, backend="cpu",
                   fallback=False)


class Branch(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:   # a branch on a tensor value: torch.export cannot capture it
            return x * 2
        return x - 1


def test_branch_on_a_tensor_value_is_a_capture_refusal():
    with pytest.raises(dl.UnsupportedOp, match=r"torch.export cannot capture Branch"):
        dl.compile(Branch(), (torch.randn(3, 4),), dynamic={0: {0: "N"}}, backend="cpu")


def test_eager_error_is_a_located_shape_error():
    class Bad(torch.nn.Module):
        def forward(self, x):
            return x.sum(5)
    with pytest.raises(dl.ShapeError, match=rf"{HERE}:\d+ in forward.*torch rejects the "
                                            rf"program: IndexError: Dimension out of range"):
        dl.compile(Bad(), (torch.randn(2, 3),), backend="cpu")


# --- dynamic="auto" ------------------------------------------------------------------------------

def test_auto_traced_at_batch_one_serves_every_batch():
    """A module traced at batch 1 (capture traces it at 2, size-obliviously) serves batch 1, 8
    and 32 from one compile; channels stay literal, pinned by the weight."""
    m = torchvision.models.resnet18(num_classes=10).eval()
    cm = dl.compile(m, (torch.randn(1, 3, 32, 32),), dynamic="auto", backend="cpu")
    rows = {r.axis: r for r in cm.pipeline.dims.of("x")}
    assert [r.kind.value for r in rows.values()] == ["named", "literal", "named", "named"]
    assert "conv2d" in rows[1].why and "input channels" in rows[1].why
    for n, h in ((1, 32), (8, 40), (32, 32), (1, 40)):
        x = torch.randn(n, 3, h, h)
        torch.testing.assert_close(cm(x), m(x), rtol=1e-4, atol=1e-4)
    assert cm.stats()["compiles"] == 1 and not cm.variants   # the general program serves 1


def test_auto_at_batch_one_with_a_size_guard_runs_a_variant():
    """Traced at batch 1 under ``auto``, a branch on the batch (``N > 1``): the size-1 axis
    traced at 2 takes the other side than the example, so the example's own sizes are traced
    (size-obliviously: N stays a dim) and the general program holds for N <= 1; batch 2 and 4
    run a variant compiled once, whose spec leaves out the axes the weight pinned (channels:
    declaring them would be a ShapeError)."""
    class Guarded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3)

        def forward(self, x):
            y = self.conv(x)
            return y * 2 if x.shape[0] > 1 else y

    m = Guarded().eval()
    cm = dl.compile(m, (torch.randn(1, 3, 8, 8),), dynamic="auto", backend="cpu")
    assert cm.stats()["variants"] == 0   # the example's side is the general program
    for n in (1, 4, 1, 2):
        x = torch.randn(n, 3, 8, 8)
        torch.testing.assert_close(cm(x), m(x))
    assert cm.stats()["compiles"] == 2 and cm.stats()["thunks"]["variant"] == 2


def test_a_widened_size_one_axis_never_flips_the_examples_branch():
    """A decode step's shape logic (issue: one new token, a mask of past + new): traced with the
    new-token axis at 2 the mask would be padded, a branch no real step takes; the example's own
    sizes are traced instead, so one program serves past lengths 0, 1 and more and the prefill,
    with no variant, and a compile from a (1, 1, 1) example runs on its example."""
    class Step(torch.nn.Module):
        def forward(self, q, mask, k):      # q[B,S,D], mask[B,P+S], k[B,P,D]
            if (pad := q.shape[1] + k.shape[1] - mask.shape[-1]) > 0:
                mask = torch.nn.functional.pad(mask, (0, pad))
            return torch.cat([k, q], 1) * mask[:, :, None]

    def mk(b, s, p):
        return torch.randn(b, s, 4), torch.ones(b, p + s), torch.randn(b, p, 4)

    m = Step()
    cm = dl.compile(m, mk(2, 1, 16), dynamic="auto", backend="cpu")
    for b, s, p in ((3, 1, 5), (2, 1, 1), (2, 1, 0), (4, 7, 3), (1, 1, 1)):
        xs = mk(b, s, p)
        torch.testing.assert_close(cm(*xs), m(*xs))
    assert cm.stats()["compiles"] == 1, cm.stats()
    xs = mk(1, 1, 1)
    torch.testing.assert_close(dl.compile(m, xs, dynamic="auto", backend="cpu")(*xs), m(*xs))
    for s, p in ((3, 2), (4, 3)):   # a mask shorter than past + new: export derived its length
        short = (torch.randn(2, s, 4), torch.ones(2, p + 1), torch.randn(2, p, 4))
        torch.testing.assert_close(cm(*short), m(*short))
    assert cm.stats()["variants"] == 1   # the pad branch, traced once at the first such call


def test_torch_compile_recompiles_where_dlcb_does_not():
    """The same batch 1 -> 8 -> 32 sequence: Dynamo compiles a new graph after batch 1 (0/1
    specialization); the DLCB module compiles nothing after ``dl.compile``."""
    m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU()).eval()
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    tc = torch.compile(m, backend=counting)
    cm = dl.compile(m, (torch.randn(1, 8),), dynamic="auto", backend="cpu")
    before = cm.stats()["compiles"]
    with torch.no_grad():
        for n in (1, 8, 32):
            x = torch.randn(n, 8)
            torch.testing.assert_close(cm(x), m(x))
            tc(x)
    torch._dynamo.reset()
    assert len(graphs) >= 2
    assert cm.stats()["compiles"] == before


def test_auto_explains_an_export_specialization():
    """torchvision's ViT asserts the image size: export specializes H and W, and the dims table
    says so; the batch stays free."""
    m = torchvision.models.VisionTransformer(image_size=32, patch_size=16, num_layers=1,
                                             num_heads=2, hidden_dim=16, mlp_dim=32).eval()
    cm = dl.compile(m, (torch.randn(2, 3, 32, 32),), dynamic="auto", backend="cpu",
                    fallback=False)
    rows = cm.pipeline.dims.of("x")
    assert [r.kind.value for r in rows] == ["named", "literal", "literal", "literal"]
    assert "torch.export" in rows[2].why and "specializes" in rows[2].why
    for n in (1, 3):
        x = torch.randn(n, 3, 32, 32)
        torch.testing.assert_close(cm(x), m(x), rtol=1e-4, atol=1e-4)
    with pytest.raises(dl.ShapeMismatch):
        cm(torch.randn(2, 3, 48, 48))


def test_auto_matches_the_hand_annotated_dims():
    m = torchvision.models.squeezenet1_1(num_classes=10).eval()
    x = torch.randn(2, 3, 48, 48)
    auto = dl.compile(m, (x,), dynamic="auto", backend="cpu")
    hand = dl.compile(m, (x,), dynamic={0: {0: "N", 2: "H", 3: "W"}}, backend="cpu")
    kinds = lambda cm: [r.kind for r in cm.pipeline.dims.of("x")]   # noqa: E731
    assert kinds(auto) == kinds(hand)


# --- HuggingFace transformers ---------------------------------------------------------------------

transformers = pytest.importorskip("transformers")


class Hidden(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids, attention_mask):
        return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def _bert():
    return transformers.BertModel(transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128))


def _gpt2():
    return transformers.GPT2Model(transformers.GPT2Config(
        vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=128, bos_token_id=0,
        eos_token_id=0))


def _llama():   # rotary embeddings, grouped-query attention, RMSNorm; compiled with grad on
    return transformers.LlamaModel(transformers.LlamaConfig(
        vocab_size=100, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128))


@pytest.mark.parametrize("make", [_bert, _gpt2, _llama], ids=["bert", "gpt2", "llama"])
def test_transformer_one_compile_serves_batch_and_sequence(make):
    torch.manual_seed(0)
    m = Hidden(make().eval())
    ids = torch.randint(0, 100, (2, 16))
    cm = dl.compile(m, (ids, torch.ones_like(ids)), dynamic="auto", backend="cpu",
                    fallback=False)
    named = {r.axis: r.kind.value for r in cm.pipeline.dims.of("input_ids")}
    assert named == {0: "named", 1: "named"}
    for b, s in ((1, 8), (3, 32), (2, 100)):
        ids = torch.randint(0, 100, (b, s))
        mask = torch.ones_like(ids)
        mask[0, -3:] = 0   # padding
        with torch.no_grad():
            want = m(ids, mask)
        torch.testing.assert_close(cm(ids, mask), want, rtol=1e-4, atol=1e-5)
    assert cm.stats()["compiles"] == 1


# --- thunks: a new rank or dtype is compiled on first use, then reused ------------------------------

def test_new_rank_is_a_cached_jit_thunk():
    class M(torch.nn.Module):
        def forward(self, x):
            return (x * 2).sum(-1)

    m = M()
    cm = dl.compile(m, (torch.randn(3, 8),), dynamic={0: {0: "N"}}, backend="cpu")
    cm(torch.randn(5, 8))
    assert cm.stats()["jit_builds"] == 0
    for shape in ((2, 4, 8), (7, 3, 8)):   # rank 3: one JIT compile serves both
        x = torch.randn(*shape)
        torch.testing.assert_close(cm(x), m(x))
    s = cm.stats()
    assert s["jit_builds"] == 1 and s["compiles"] == 2
    assert s["thunks"] == {"dynamic": 1, "jit": 2, "variant": 0}
    x = torch.randn(4, 8, dtype=torch.float64)   # another dtype: its own compile, on first use
    torch.testing.assert_close(cm(x), m(x))
    torch.testing.assert_close(cm(x[:2]), m(x[:2]))
    s = cm.stats()
    assert s["dtype_builds"] == 1 and s["jit_builds"] == 1 and s["compiles"] == 3
    with pytest.raises(dl.ShapeMismatch):   # same signature, bad shape: an error, not a JIT
        cm(torch.randn(5, 7))


def test_size_one_dims_get_a_variant_not_a_recompile_per_shape():
    """Two dims tied by broadcasting: at run time either may be 1 (torch broadcasts it); each
    such pattern is one variant, compiled once, and the general program serves the rest."""
    class Add(torch.nn.Module):
        def forward(self, x, y):
            return (x + y).relu()

    m = Add()
    cm = dl.compile(m, (torch.randn(3, 4), torch.randn(3, 4)),
                    dynamic={0: {0: "N"}, 1: {0: "M"}}, backend="cpu")
    for a, b in ((3, 3), (5, 1), (8, 1), (1, 6), (4, 4), (2, 1)):
        x, y = torch.randn(a, 4), torch.randn(b, 4)
        torch.testing.assert_close(cm(x, y), m(x, y))
    s = cm.stats()
    assert s["variants"] == 2 and s["compiles"] == 3, s   # (1, -) and (-, 1)
    with pytest.raises(dl.ShapeMismatch):
        cm(torch.randn(3, 4), torch.randn(2, 4))


def test_branch_on_a_size_is_a_host_check_and_its_other_side_a_variant():
    """``if x.size(0) > 3`` traced the branch for sizes >= 4: the host program checks that range,
    and a smaller size gets a variant traced at it (the other branch), never the traced one."""
    class Branch(torch.nn.Module):
        def forward(self, x):
            return x * 2 if x.shape[0] > 3 else x

    cm = dl.compile(Branch(), (torch.randn(5, 3),), dynamic={0: {0: "N"}}, backend="cpu")
    x = torch.randn(9, 3)
    torch.testing.assert_close(cm(x), x * 2)
    with pytest.raises(dl.ShapeMismatch, match=r"N > 3 \(s\d+ > 3\)"):
        cm._thunk(torch.randn(2, 3))
    for n in (2, 3):
        x = torch.randn(n, 3)
        torch.testing.assert_close(cm(x), x)
    assert cm.stats()["variants"] == 1, cm.stats()


class _Windows(torch.nn.Module):
    """Swin's two branches on sizes: pad the last axis to a multiple of 7, and roll by 3 only
    where the padded axis spans more than one window (torch.export keeps neither guard, an
    ``h + (-h) % 7 <= 7`` beyond any range, in its program)."""

    def forward(self, x):
        h = x.shape[-1]
        x = F.pad(x, (0, (-h) % 7))
        shift = 0 if x.shape[-1] <= 7 else 3
        return torch.roll(x, -shift, -1) * 2 if shift else x + 1


@pytest.mark.parametrize("example", [6, 10])
def test_a_guard_beyond_ranges_is_checked_and_its_other_side_a_variant(example):
    """Compiled on either side of ``h + (-h) % 7 <= 7``, each call matches eager: the other side
    fails the guard's host check (a call on it was answered by the traced branch before) and
    runs a variant traced there, one per side, reused."""
    m = _Windows()
    cm = dl.compile(m, (torch.randn(2, example),), dynamic={0: {1: "W"}}, backend="cpu")
    for w in (6, 3, 10, 13, 7, 20):
        x = torch.randn(2, w)
        torch.testing.assert_close(cm(x), m(x))
    assert cm.stats()["compiles"] == 2 and cm.stats()["variants"] == 1, cm.stats()


# --- the zoo under dynamic="auto" ------------------------------------------------------------------

def _auto_matches_declared(name: str) -> None:
    """``dynamic="auto"`` frees exactly the axes the zoo's hand-written spec declares (the
    declared ones the solve keeps free), and matches eager at the spec's test shapes."""
    from dlcb_lab.bench import zoo

    spec = zoo.MODELS[name]
    cm = zoo.compile_model(name, "cpu", dynamic="auto")
    free = {r.axis for r in cm.pipeline.dims.of("x") if r.kind.value != "literal"}
    assert free == set(spec.dynamic[0]), (name, free, [r.why for r in cm.pipeline.dims.of("x")])
    row = zoo.check_model(name, backend="cpu", cm=cm)
    # a variant is no recompile: Swin at 256 takes the other side of its branch on the
    # resolution. ConvNeXt has none: torch's fake convolution guards ``batch > 1`` for its
    # memory format, a guard of torch's own that a size-oblivious trace's ranges leave out
    assert row["ok"] and row["variants"] <= spec.variants, row   # ok: no other compile


@pytest.mark.slow
@pytest.mark.parametrize("name", __import__("dlcb_lab.bench.zoo", fromlist=["MODELS"]).MODELS)
def test_zoo_under_auto(name):
    _auto_matches_declared(name)


# --- logic on size predicates ----------------------------------------------------------------------

class _Imposed:
    """A stand-in for the lowering context: records what a predicate imposes."""

    def __init__(self):
        self.g, self.where, self.gaps, self.equal = self, "", [], []

    def require(self, e, *_):
        self.gaps.append(e)

    def constrain(self, a, b, *_):
        self.equal.append((a, b))

    def holds(self, env) -> bool:
        return all(e.evaluate(env) >= 0 for e in self.gaps) and \
            all(a.evaluate(env) == b.evaluate(env) for a, b in self.equal)


@pytest.mark.parametrize("a,b,c", [(a, b, c) for a in range(4) for b in range(4) for c in (1, 3)])
def test_size_predicate_logic_imposes_exactly_the_predicate(a, b, c):
    """export's assertions on unbacked sizes combine comparisons with ``|``, ``&`` and ``not``
    (``Eq(s70, u0) | Eq(u0, 1)``): what the lowering imposes holds exactly where the predicate
    does, on every (a, b, c) tried."""
    from dlcb_lab.bridge.common import DimPredicate as P
    from dlcb_lab.dims import var

    A, B, C = var("A"), var("B"), var("C")
    env = {"A": a, "B": b, "C": c}
    cases = [
        (P.either(P.of("==", A, B), P.of("==", A, 1)), a == b or a == 1),
        (P.either(P.of("==", A, B), P.either(P.of("==", A, C), P.of("==", B, 2))),
         a == b or a == c or b == 2),
        (P.both(P.of(">=", A, 2), P.of("<=", B, C)), a >= 2 and b <= c),
        (P.of("<", A, B).negate(), not a < b),
        (P.either(False, P.of("==", A, 3)), a == 3),
    ]
    for pred, want in cases:
        seen = _Imposed()
        pred.impose(seen, "assertion")
        assert seen.holds(env) == want, (pred, env)
    assert P.either(True, P.of("==", A, B)) is True and P.both(False, P.of("==", A, B)) is False
    with pytest.raises(dl.UnsupportedOp, match="only a disjunction of equalities"):
        P.either(P.of("<", A, B), P.of("==", A, 1))


# --- in-place writes into slices of a computed tensor ----------------------------------------------

class ShiftMask(torch.nn.Module):
    """Swin's shifted-window mask: regions of a size-dependent zero tensor filled in place."""

    def forward(self, x):
        h, w = x.shape[-2:]
        mask = x.new_zeros((h, w))
        count = 0
        for hs in ((0, -3), (-3, -1), (-1, None)):
            for ws in ((0, -2), (-2, None)):
                mask[hs[0]:hs[1], ws[0]:ws[1]] = count
                count += 1
        row = mask[1:2]          # a view taken after the writes sees them
        return x * mask + row.sum()


def test_writes_into_slices_of_a_computed_tensor():
    m = ShiftMask()
    cm = dl.compile(m, (torch.randn(2, 6, 5),), dynamic="auto", backend="cpu", fallback=False)
    assert {r.axis: r.kind.value for r in cm.pipeline.dims.of("x")} == \
        {0: "named", 1: "named", 2: "named"}
    for shape in ((2, 6, 5), (1, 9, 4), (3, 4, 7)):
        x = torch.randn(shape)
        torch.testing.assert_close(cm(x), m(x))


class StaleView(torch.nn.Module):
    def forward(self, x):
        t = x * 2
        v = t[:, 1:]
        t[:, :1] = 0     # overlaps no element of v, but v is read after the write
        return v + t[:, :1]


class StridedWrite(torch.nn.Module):
    def forward(self, x):
        t = x * 2
        t[:, ::2] = 0
        return t


@pytest.mark.parametrize("m,what", [(StaleView(), "view"), (StridedWrite(), "step 1")],
                         ids=["view-read-after", "step-2"])
def test_writes_through_views_refused_where_unsound(m, what):
    with pytest.raises(dl.UnsupportedOp, match=what):
        dl.compile(m, (torch.randn(3, 4),), dynamic={0: {0: "N"}}, backend="cpu", fallback=False)


def test_ceil_and_floor_of_a_ratio_of_sizes():
    """``math.ceil(H / p) * p`` (MobileViT pads to a multiple of its patch) and ``math.floor``:
    export's SymFloat ``H / p`` stays an exact ratio until rounded, then is a size again; one
    compile serves every H, W. A ratio used as a float is refused by name."""
    import math

    class PadCrop(torch.nn.Module):
        def forward(self, x):
            h, w = x.shape[-2:]
            x = torch.nn.functional.pad(x, (0, 0, 0, math.ceil(h / 4) * 4 - h))
            return x[..., :math.floor(w / 3) * 3] * 2

    m = PadCrop()
    cm = dl.compile(m, (torch.randn(2, 9, 10),), dynamic={0: {1: "H", 2: "W"}}, backend="cpu")
    for h, w in ((9, 10), (8, 3), (13, 17), (1, 5)):
        x = torch.randn(2, h, w)
        torch.testing.assert_close(cm(x), m(x))
    assert cm.stats()["compiles"] == 1

    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * (x.shape[-1] / 2)

    with pytest.raises(dl.UnsupportedOp, match="ratio of sizes"):
        dl.compile(Scale(), (torch.randn(2, 6),), dynamic={0: {1: "W"}}, backend="cpu")


def test_min_of_sizes_takes_the_traced_side_and_checks_it():
    """``torch.sym_min(L, 8)`` (GPT-Neo's local attention window): dims have no min, so the
    compile takes the side the example took (8) and the host checks ``8 <= L`` before any
    launch; a shorter L is refused by name, never answered with the wrong slice."""
    class Window(torch.nn.Module):
        def forward(self, x):
            return x[:, :torch.sym_min(x.size(1), 8)] * 2

    m = Window()
    cm = dl.compile(m, (torch.randn(2, 12),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
    for n, L in ((3, 12), (1, 8), (2, 30)):
        x = torch.randn(n, L)
        torch.testing.assert_close(cm(x), m(x))
    with pytest.raises(dl.ShapeMismatch, match=r"min\(L, 8\) is 8 as traced"):
        cm(torch.randn(3, 5))


HF = {   # model_type -> config beyond the common tiny one (random weights, nothing downloaded)
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], num_layers=2, window_size=8),
    "t5": dict(d_model=32, d_ff=64, num_layers=2, num_heads=4, d_kv=8),
    "roberta": {}, "distilbert": dict(dim=32, n_layers=2, n_heads=4, hidden_dim=64),
    "albert": dict(embedding_size=16), "electra": dict(embedding_size=32), "deberta-v2": {},
    "mpnet": {}, "bart": {}, "opt": dict(ffn_dim=64, word_embed_proj_dim=32), "bloom": {},
    "falcon": dict(num_kv_heads=4), "mistral": dict(num_key_value_heads=2),
    "qwen2": dict(num_key_value_heads=2), "qwen3": dict(num_key_value_heads=2, head_dim=8),
    "gemma": dict(num_key_value_heads=2, head_dim=8), "phi": {}, "phi3": dict(pad_token_id=0),
    "gpt_neox": {}, "mobilebert": {}, "squeezebert": dict(embedding_size=32,
                                                           intermediate_size=32),
    "convbert": {}, "nystromformer": {}, "megatron-bert": {}, "olmo": {},
    "stablelm": dict(num_key_value_heads=4), "starcoder2": {}, "granite": {}, "cohere": {},
    "modernbert": dict(pad_token_id=0, bos_token_id=0, eos_token_id=0, cls_token_id=0,
                       sep_token_id=0),
}
"""Architectures compiled by the sweep below (``gpt_neo`` and ``t5`` in ``make test``)."""


def _hf(model_type: str) -> torch.nn.Module:
    """The architecture's base model (the encoder of an encoder-decoder) with SDPA attention where
    it has it, else its own."""
    kw = {**dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                 intermediate_size=64, max_position_embeddings=128), **HF[model_type]}
    make = lambda: transformers.AutoConfig.for_model(model_type, **kw)   # noqa: E731
    if model_type == "t5":
        return transformers.T5EncoderModel(make())
    try:
        m = transformers.AutoModel.from_config(make(), attn_implementation="sdpa")
    except ValueError:   # no SDPA path in this architecture
        m = transformers.AutoModel.from_config(make(), attn_implementation="eager")
    return m.get_encoder() if model_type == "bart" else m


@pytest.mark.parametrize("model_type", [
    pytest.param(t, marks=() if t in ("gpt_neo", "t5") else pytest.mark.slow) for t in HF])
def test_transformers_architecture_one_compile(model_type):
    torch.manual_seed(0)
    m = Hidden(_hf(model_type).eval())
    ids = torch.randint(0, 100, (2, 16))
    cm = dl.compile(m, (ids, torch.ones_like(ids)), dynamic="auto", backend="cpu")
    for b, s in ((1, 8), (3, 32), (2, 24)):
        ids = torch.randint(0, 100, (b, s))
        mask = torch.ones_like(ids)
        mask[0, -3:] = 0
        with torch.no_grad():
            want = m(ids, mask)
        torch.testing.assert_close(cm(ids, mask), want, rtol=1e-4, atol=1e-5)
    assert cm.stats()["compiles"] == 1


def test_slice_bounds_on_a_symbolic_axis_clamp_as_the_example_falls():
    """torch clamps a slice bound to its axis (``[-6:]`` of 4 elements is all 4; ``[:9]`` of 4 is
    all 4): on a symbolic axis the compile takes the piece its example falls in (Mistral's
    sliding-window cache ``[-4095:]``: all of it while L <= 4095) and the host checks a call
    falls in it too; ``[L - 10:]`` with L >= 10 at the example counts from the start."""
    class Ends(torch.nn.Module):
        def forward(self, x):
            return x[:, -6:] * 2 + x[:, :9].sum(1, keepdim=True)

    class Tail(torch.nn.Module):
        def forward(self, x):
            return x[:, x.size(1) - 10:] * 2

    m = Ends()
    cm = dl.compile(m, (torch.randn(2, 4),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
    for n, L in ((3, 4), (1, 1), (2, 6), (2, 5)):
        x = torch.randn(n, L)
        torch.testing.assert_close(cm(x), m(x))
    with pytest.raises(dl.ShapeMismatch, match=r"slice bound -6 .*before the start as traced"):
        cm(torch.randn(3, 7))
    m = Tail()
    cm = dl.compile(m, (torch.randn(2, 17),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
    for L in (17, 10, 30):
        x = torch.randn(3, L)
        torch.testing.assert_close(cm(x), m(x))
    with pytest.raises(dl.ShapeMismatch, match=r"needs L - 10 >= 0"):
        cm(torch.randn(3, 8))
    cm = dl.compile(m, (torch.randn(2, 4),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
    for L in (4, 1, 5):   # L - 10 + L < 0: clamped to 0, the whole axis
        x = torch.randn(3, L)
        torch.testing.assert_close(cm(x), m(x))


def test_max_over_a_dim_gives_its_values_and_runs_its_indices_eagerly():
    """``x.max(1)[0]`` (VOLO pools its tokens so) is an amax, NaN included, bit for bit; a use of
    the indices runs ``max`` eagerly for them (one eager op, its indices), and is listed by name
    under ``fallback=False``."""
    class Values(torch.nn.Module):
        def forward(self, x):
            return x.max(1)[0] + x.min(1, keepdim=True).values.squeeze(1)

    class Indices(torch.nn.Module):
        def forward(self, x):
            return x.max(1)[1].float()

    for dtype in (torch.float32, torch.float16):
        x = torch.randn(3, 5, 7).to(dtype)
        x[0, 2, 3] = float("nan")
        cm = dl.compile(Values(), (x,), dynamic={0: {0: "N", 1: "L"}}, backend="cpu")
        for shape in ((3, 5, 7), (4, 1, 7), (2, 9, 7)):
            y = torch.randn(shape).to(dtype)
            y.view(-1)[0] = float("nan")
            torch.testing.assert_close(cm(y), Values()(y), equal_nan=True, rtol=0, atol=0)
    cm = dl.compile(Indices(), (torch.randn(3, 5),), dynamic={0: {0: "N"}}, backend="cpu")
    x = torch.randn(6, 5)
    torch.testing.assert_close(cm(x), Indices()(x))
    assert [n.attrs["item"] for n in cm.pipeline.graph.nodes if n.op.name == "eager"] == [1]
    with pytest.raises(dl.UnsupportedOp, match=r"(?s)aten\.max\.dim.*indices of max\(dim=1\)"):
        dl.compile(Indices(), (torch.randn(3, 5),), dynamic={0: {0: "N"}}, backend="cpu",
                   fallback=False)


_VIT = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
            image_size=32, patch_size=8)
_CONV = dict(conv_dim=[8, 8], conv_stride=[5, 2], conv_kernel=[10, 3], num_conv_pos_embeddings=16,
             num_conv_pos_embedding_groups=2, hidden_size=32, num_hidden_layers=2,
             num_attention_heads=4, intermediate_size=64)
HF_PIXELS = {   # model_type -> (config, input: "pixels" at image_size, or "audio" samples)
    "vit": _VIT, "deit": _VIT, "beit": _VIT, "data2vec-vision": _VIT,
    "yolos": dict(_VIT, num_detection_tokens=4, image_size=[32, 32]),
    "clip_vision_model": _VIT, "siglip_vision_model": _VIT,
    "dpt": dict(_VIT, backbone_out_indices=[0, 1], neck_hidden_sizes=[8, 16],
                reassemble_factors=[4, 2], fusion_hidden_size=16, head_hidden_size=8),
    "swin": dict(embed_dim=16, depths=[1, 1], num_heads=[2, 2], image_size=32, patch_size=4,
                 window_size=2),
    "swinv2": dict(embed_dim=16, depths=[1, 1], num_heads=[2, 2], image_size=32, patch_size=4,
                   window_size=2),
    "convnext": dict(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2),
    "convnextv2": dict(hidden_sizes=[8, 16], depths=[1, 1], num_stages=2),
    "resnet": dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1]),
    "regnet": dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8),
    "poolformer": dict(hidden_sizes=[8, 16], depths=[1, 1], num_encoder_blocks=2,
                       patch_sizes=[7, 3], strides=[4, 2], padding=[2, 1]),
    "segformer": dict(hidden_sizes=[8, 16], depths=[1, 1], num_encoder_blocks=2,
                      num_attention_heads=[1, 2], sr_ratios=[2, 1], patch_sizes=[7, 3],
                      strides=[4, 2], mlp_ratios=[2, 2], decoder_hidden_size=16),
    "mobilevit": dict(image_size=64, hidden_sizes=[16, 24, 32],
                      neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 48]),
    "levit": dict(image_size=64), "mobilenet_v2": dict(image_size=64, depth_multiplier=0.25),
    "wav2vec2": _CONV, "hubert": _CONV,
}
"""Vision and audio architectures: one compile serves every batch (and audio length)."""


class Encoded(torch.nn.Module):
    def __init__(self, m, key):
        super().__init__()
        self.m, self.key = m, key

    def forward(self, x):
        return self.m(**{self.key: x}).last_hidden_state


@pytest.mark.parametrize("model_type", [
    pytest.param(t, marks=() if t in ("vit", "wav2vec2") else pytest.mark.slow)
    for t in HF_PIXELS])
def test_transformers_vision_and_audio_one_compile(model_type):
    torch.manual_seed(0)
    make = lambda: transformers.AutoConfig.for_model(model_type, **HF_PIXELS[model_type])  # noqa: E731
    try:
        m = transformers.AutoModel.from_config(make(), attn_implementation="sdpa")
    except ValueError:   # no SDPA path in this architecture
        m = transformers.AutoModel.from_config(make(), attn_implementation="eager")
    audio = model_type in ("wav2vec2", "hubert")
    m = Encoded(m.eval(), "input_values" if audio else "pixel_values")
    r = HF_PIXELS[model_type].get("image_size", 32)
    r = r[0] if isinstance(r, list) else r
    make_x = (lambda b, s: torch.randn(b, s)) if audio else \
        (lambda b, s: torch.randn(b, 3, r, r))   # noqa: E731
    cm = dl.compile(m, (make_x(2, 400),), dynamic="auto", backend="cpu")
    for b, s in ((3, 640), (1, 330), (2, 400)):
        x = make_x(b, s)
        with torch.no_grad():
            want = m(x)
        torch.testing.assert_close(cm(x), want, rtol=1e-4, atol=1e-5)
    assert cm.stats()["compiles"] == 1 + cm.stats()["variants"] <= 2


def test_autocast_off_region_lowers_in_place():
    """``with torch.autocast(..., enabled=False)`` (timm's EfficientViT computes its attention
    so) is a region export wraps in ``wrap_with_autocast``: lowered in place, one compile; an
    autocast region that is on is refused by name."""
    class Off(torch.nn.Module):
        def forward(self, x):
            y = x.relu()
            with torch.autocast("cpu", enabled=False):
                z = (y * 2).softmax(-1)
            return z + 1

    class On(torch.nn.Module):
        def forward(self, x):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                return torch.nn.functional.linear(x, x)

    m = Off()
    cm = dl.compile(m, (torch.randn(2, 6),), dynamic={0: {0: "N", 1: "L"}}, backend="cpu",
                    fallback=False)
    for shape in ((2, 6), (5, 3), (1, 9)):
        x = torch.randn(shape)
        torch.testing.assert_close(cm(x), m(x))
    with pytest.raises(dl.UnsupportedOp, match="autocast region on cpu"):
        dl.compile(On(), (torch.randn(4, 4),), backend="cpu")


class _Shuffle(torch.nn.Module):
    """A channel shuffle after two stride-2 layers: the view's sizes are export's arithmetic on
    the input's size (``(H - 1) // 4 + 1``), the tensor's the layers' rules (``((H + 1) // 2 + 1)
    // 2``): one value, two spellings."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.pool = torch.nn.MaxPool2d(3, 2, 1)

    def forward(self, x):
        y = self.pool(self.conv(x))
        n, c, h, w = y.shape
        return y.view(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w).relu()


def test_a_size_from_export_arithmetic_takes_the_graphs_spelling():
    """Spelt as the graph spells the axis (``bridge.aten.Spellings``), the view leaves no residual
    check and its kernel no floor division by a runtime size (before: one residual, ten)."""
    import re

    torch.manual_seed(0)
    m = _Shuffle().eval()
    cm = dl.compile(m, (torch.randn(2, 3, 32, 32),), dynamic="auto", backend="cpu")
    assert not cm.pipeline.residuals
    src = "\n".join(k.cuda_source for k in cm.pipeline.kernels)
    assert not re.findall(r"dlcb_f(?:div|mod)<I>\([^,]+, [a-z]", src)
    with torch.no_grad():
        for shape in ((1, 3, 17, 9), (3, 3, 40, 31), (2, 3, 32, 32)):
            x = torch.randn(*shape)
            torch.testing.assert_close(cm(x), m(x))
    assert cm.stats()["compiles"] == 1


class _PadToWindows(torch.nn.Module):
    """Swin's window partition: pad H and W up to a multiple of 7, view into 7 x 7 windows."""

    def forward(self, x):
        n, h, w, c = x.shape
        x = F.pad(x, (0, 0, 0, (7 - w % 7) % 7, 0, (7 - h % 7) % 7))
        hp, wp = x.shape[1], x.shape[2]
        x = x.view(n, hp // 7, 7, wp // 7, 7, c).permute(0, 1, 3, 2, 4, 5).reshape(-1, 49, c)
        return F.pad(x.softmax(-1), (0, c % 2)).sum(-1)


def test_a_pad_to_a_multiple_divides_into_windows_exactly():
    """The padded extent is spelt ``7*((H + 6) // 7)`` (``dims.expr.rounded_up``), so the window
    view's numel equals the tensor's without a residual host check (before: one)."""
    m = _PadToWindows()
    cm = dl.compile(m, (torch.randn(2, 9, 12, 5),), dynamic="auto", backend="cpu")
    assert not cm.pipeline.residuals
    for shape in ((1, 7, 7, 3), (2, 15, 8, 4), (3, 1, 20, 5)):
        x = torch.randn(*shape)
        torch.testing.assert_close(cm(x), m(x))
    assert cm.stats()["compiles"] == 1
