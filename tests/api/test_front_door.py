"""The way in, as a new user calls it: ``dl.compile(model, x)`` with no ``dynamic=`` serves every
batch and resolution from one compile, with readable dim names; models are compiled from the
example call their users make (positional and keyword arguments, constants) and answer calls
made the same way with what the model returns; another dtype, another rank, an op that returns
several tensors, size arithmetic and export's own logging are handled, not refused."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import dlcb_lab as dl
from dlcb_lab.bridge import dynamo

TOL = dict(rtol=1e-4, atol=1e-4)


def _resnet18():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    return torchvision.models.resnet18(weights=None).eval()


def test_default_compile_serves_batches_and_resolutions():
    """No ``dynamic=``: N, H and W free, C fixed by the first convolution's weight."""
    m = _resnet18()
    cm = dl.compile(m, torch.randn(1, 3, 32, 32), backend="cpu")
    x_dims = [repr(e) for e in cm.pipeline.graph.dims(cm.pipeline.graph.inputs[0])]
    assert x_dims == ["N", "3", "H", "W"], x_dims
    with torch.no_grad():
        for n, (h, w) in [(1, (32, 32)), (3, (32, 32)), (4, (32, 32)), (2, (48, 40))]:
            x = torch.randn(n, 3, h, w)
            torch.testing.assert_close(cm(x), m(x), **TOL)
    s = cm.stats()
    assert s["compiles"] == 1 and s["variants"] == 0 and s["thunk"] == "dynamic"


def test_dynamic_true_is_auto_and_false_is_static():
    class Scale(nn.Module):
        def forward(self, x):
            return x * 2

    x = torch.randn(2, 3)
    auto, true = (dl.compile(Scale(), x, backend="cpu", dynamic=d) for d in ("auto", True))
    assert repr(auto.pipeline.dims) == repr(true.pipeline.dims)
    torch.testing.assert_close(true(torch.randn(5, 7)).shape, torch.Size([5, 7]))
    static = dl.compile(Scale(), x, backend="cpu", dynamic=False)
    assert static.stats()["thunk"] == "static"
    with pytest.raises(dl.ShapeMismatch, match=r"input 0 'x' axis 0: size 5 != 2 \(a static axis"
                       r".*dynamic='auto' \(the default\) or naming it, e\.g\. "
                       r"dynamic=\{'x': \{0: 'D'\}\}, makes it free\)"):
        static(torch.randn(5, 3))


def test_auto_with_some_dims_named():
    """``dl.auto({...})`` names the axes given (and checks them: a named axis the program fixes
    is an error); every other axis is chosen as with ``"auto"``."""
    class Lin(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(x)

    cm = dl.compile(Lin(), torch.randn(2, 5, 8), backend="cpu", dynamic=dl.auto(x={0: "B"}))
    assert [repr(e) for e in cm.pipeline.graph.dims(cm.pipeline.graph.inputs[0])] == \
        ["B", "C", "8"]
    with pytest.raises(dl.ShapeError, match=r"dim F .* is declared dynamic but the program "
                                            r"fixes it to 8"):
        dl.compile(Lin(), torch.randn(2, 5, 8), backend="cpu", dynamic=dl.auto({"x": {2: "F"}}))


# --- models called the way their users call them ------------------------------------------------

@pytest.fixture(scope="module")
def bert():
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=100)
    m = transformers.BertModel(cfg).eval()
    ids = torch.randint(0, 100, (2, 8))
    cm = dl.compile(m, kwargs={"input_ids": ids, "attention_mask": torch.ones_like(ids)},
                    backend="cpu")
    return m, cm


def test_bert_from_keyword_examples_returns_a_model_output(bert):
    m, cm = bert
    assert repr(cm.signature) == "(input_ids=None, attention_mask=None)"
    names = {v.name: [repr(e) for e in cm.pipeline.graph.dims(v)]
             for v in cm.pipeline.graph.inputs[:2]}
    assert names["input_ids"] == ["batch", "seq"] and names["attention_mask"][1] == "seq", names
    for b, s, dtype in [(3, 11, torch.long), (1, 5, torch.bool), (2, 8, torch.int32),
                        (2, 7, torch.float32)]:
        ids = torch.randint(0, 100, (b, s))
        mask = torch.ones(b, s, dtype=dtype)
        mask[0, -2:] = 0
        out, want = cm(input_ids=ids, attention_mask=mask), m(input_ids=ids, attention_mask=mask)
        assert type(out) is type(want)
        torch.testing.assert_close(out.last_hidden_state, want.last_hidden_state, **TOL)
        torch.testing.assert_close(out.pooler_output, want.pooler_output, **TOL)
    torch.testing.assert_close(cm(ids, mask).last_hidden_state, want.last_hidden_state, **TOL)
    s = cm.stats()
    assert s["dtype_builds"] == 3 and s["jit_builds"] == 0 and s["compiles"] == 4, s


def test_constants_of_the_example_call_are_checked():
    class Opt(nn.Module):
        def forward(self, x, scale=None, twice=False):
            y = x * scale if scale is not None else x
            return {"y": y * 2 if twice else y, "pair": (x, x + 1)}

    m, x = Opt(), torch.randn(2, 3)
    cm = dl.compile(m, (x,), {"twice": True}, backend="cpu")
    assert repr(cm.signature) == "(x, twice=True)"
    x = torch.randn(4, 5)
    out = cm(x, twice=True)
    assert set(out) == {"y", "pair"} and isinstance(out["pair"], tuple)
    torch.testing.assert_close(out["y"], m(x, twice=True)["y"])
    with pytest.raises(dl.ArgumentError, match=r"argument 'twice' = False, but the compile's "
                                               r"example passed True"):
        cm(x, twice=False)
    with pytest.raises(dl.ArgumentError, match=r"argument 'twice' = False, but the compile's"):
        cm(x)   # omitted: its default False, not the compiled True
    with pytest.raises(dl.ArgumentError, match=r"argument 'scale' is a tensor, but the "
                                               r"compile's example did not pass it"):
        cm(x, torch.randn(5), twice=True)


def test_compiled_output_structure_survives_an_artifact(bert, tmp_path):
    m, cm = bert
    loaded = dl.load(cm.save(tmp_path / "bert.dlcb"))
    ids = torch.randint(0, 100, (2, 6))
    out = loaded(input_ids=ids, attention_mask=torch.ones_like(ids))
    want = m(input_ids=ids, attention_mask=torch.ones_like(ids))
    assert type(out) is type(want) and repr(loaded.signature) == repr(cm.signature)
    torch.testing.assert_close(out.last_hidden_state, want.last_hidden_state, **TOL)


def test_axes_equal_only_in_the_example_stay_apart():
    """A mask longer than the sequence, which the model slices: the example has them equal, but
    nothing ties them (no duck sizing), so a longer mask is served by the same compile."""
    class Masked(nn.Module):
        def forward(self, x, mask):
            return x * mask[:, : x.shape[1], None]

    cm = dl.compile(Masked(), (torch.randn(2, 6, 4), torch.ones(2, 6)), backend="cpu")
    for s, m_len in [(6, 6), (5, 9), (3, 3)]:
        x, mask = torch.randn(2, s, 4), torch.rand(2, m_len)
        torch.testing.assert_close(cm(x, mask), Masked()(x, mask))
    assert cm.stats()["compiles"] == 1
    with pytest.raises(dl.ShapeMismatch):   # shorter than the sequence: eager fails too
        cm(torch.randn(2, 6, 4), torch.rand(2, 4))


# --- ops and arithmetic that used to refuse a whole model ---------------------------------------

class SortBetweenConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.c2 = nn.Conv2d(3, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        y = self.c1(x)
        values, _ = torch.sort(y, dim=1)
        top = torch.topk(y, 3, dim=1).values
        peak, where = y.max(dim=1, keepdim=True)
        return self.c2(values) + where + top.sum(1, keepdim=True) + peak


def test_ops_returning_several_tensors_run_eagerly():
    torch.manual_seed(0)
    m = SortBetweenConvs().eval()
    cm = dl.compile(m, torch.randn(2, 3, 8, 8), backend="cpu")
    eager = sorted(n.out.name for n in cm.pipeline.graph.nodes if n.op.name == "eager")
    assert len(eager) == 3, eager   # sort's values, topk's values, max's indices
    with torch.no_grad():
        for shape in [(1, 3, 8, 8), (3, 3, 10, 12)]:
            x = torch.randn(*shape)
            torch.testing.assert_close(cm(x), m(x))
    with pytest.raises(dl.UnsupportedOp, match=r"(?s)3 ATen nodes not supported.*aten\.sort"):
        dl.compile(m, torch.randn(2, 3, 8, 8), backend="cpu", fallback=False)


def test_lstm_runs_eagerly_between_compiled_ops():
    torch.manual_seed(0)

    class Tagger(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm, self.fc = nn.LSTM(8, 16, batch_first=True), nn.Linear(16, 4)

        def forward(self, x):
            out, (h, _) = self.lstm(x)
            return self.fc(out) + self.fc(h[-1])[:, None]

    m = Tagger().eval()
    cm = dl.compile(m, torch.randn(2, 5, 8), backend="cpu")
    with torch.no_grad():
        for n in (1, 3):
            x = torch.randn(n, 5, 8)
            torch.testing.assert_close(cm(x), m(x))


def test_fallback_false_counts_what_dead_code_leaves():
    """An unsupported op whose result nobody reads is removed with dead code: no refusal."""
    class Unused(nn.Module):
        def forward(self, x):
            _ = torch.logcumsumexp(x, 1)   # unsupported, and unused
            return x.relu()

    cm = dl.compile(Unused(), torch.randn(2, 3), backend="cpu", fallback=False)
    assert not [n for n in cm.pipeline.graph.nodes if n.op.name == "eager"]
    x = torch.randn(4, 3)
    torch.testing.assert_close(cm(x), x.relu())


def test_power_of_a_size_lowers_into_dims():
    class Square(nn.Module):
        def forward(self, x):
            n = x.shape[1]
            return x.reshape(x.shape[0], -1)[:, : n ** 2] * 2

    cm = dl.compile(Square(), torch.randn(2, 3, 3), backend="cpu", fallback=False)
    for shape in [(1, 4, 4), (3, 5, 5)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(cm(x), Square()(x))


def test_a_rank_torch_rejects_names_input_and_compiled_rank():
    cm = dl.compile(nn.Conv2d(3, 4, 3), torch.randn(2, 3, 8, 8), backend="cpu")
    with pytest.raises(dl.DLError, match=r"^input 0 'input' is rank 2 float32, compiled for "
                                         r"rank 4 float32; compiling for it failed: .*"):
        cm(torch.randn(3, 8))


def test_export_logging_is_held_back_and_kept_on_the_error(capfd):
    class Branch(nn.Module):
        def forward(self, x):
            return x * 2 if x.sum() > 0 else x - 1

    with pytest.raises(dl.UnsupportedOp, match="torch.export cannot capture Branch") as ei:
        dl.compile(Branch(), torch.randn(3, 4), backend="cpu")
    out, err = capfd.readouterr()
    assert out == "" and err == "", (out, err)
    assert "data-dependent" in ei.value.export_log or "u0" in ei.value.export_log


# --- torch.compile(backend="dlcb") and dl.optimize ---------------------------------------------

class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8, 5)

    def forward(self, x):
        return self.fc(F.adaptive_avg_pool2d(self.conv(x).relu(), 1).flatten(1))


def test_torch_compile_backend_follows_dynamos_graphs():
    """Plain ``torch.compile(backend="dlcb")``: Dynamo traces the first shape statically and
    the first changed size again with it symbolic (automatic dynamic), so the backend compiles
    two graphs over three batch sizes; ``dl.optimize`` makes Dynamo's first graph symbolic in
    every size (size-obliviously, without duck sizing): one DLCB compile for every batch and
    resolution."""
    torch._dynamo.reset()
    dynamo.clear_log()
    torch.manual_seed(0)
    m = ConvNet().eval()
    f = torch.compile(m, backend="dlcb")
    with torch.no_grad():
        for n in (1, 2, 4):
            x = torch.randn(n, 3, 16, 16)
            torch.testing.assert_close(f(x), m(x), **TOL)
    assert dynamo.compiles() == 2, dynamo.records()
    torch._dynamo.reset()
    dynamo.clear_log()
    opt = dl.optimize(m)
    with torch.no_grad():
        for n, hw in [(1, 16), (2, 16), (4, 16), (3, 24), (2, 20)]:
            x = torch.randn(n, 3, hw, hw + 4)
            torch.testing.assert_close(opt(x), m(x), **TOL)
    assert dynamo.compiles() == 1, dynamo.records()
    rec = dynamo.records()[0]
    assert rec.calls == 5 and rec.eager_calls == 0
    import torch.fx.experimental._config as fx_config
    assert not fx_config.backed_size_oblivious and fx_config.use_duck_shape   # restored


def test_a_size_without_dim_form_makes_its_axes_static_under_auto():
    """``floor(0.7 * H)`` has no dim expression: ``"auto"`` keeps H and W at the example's size
    (and the batch free); a spec that names H still refuses, naming the size."""
    class Shrink(nn.Module):
        def forward(self, x):
            return F.interpolate(x, scale_factor=0.7, mode="bilinear") * 2

    cm = dl.compile(Shrink(), torch.randn(2, 3, 10, 12), backend="cpu")
    assert [repr(e) for e in cm.pipeline.graph.dims(cm.pipeline.graph.inputs[0])] == \
        ["N", "C", "10", "12"]
    x = torch.randn(5, 4, 10, 12)
    torch.testing.assert_close(cm(x), Shrink()(x))
    with pytest.raises(dl.UnsupportedOp, match=r"floor\(H \* 0\.7\)"):
        dl.compile(Shrink(), torch.randn(2, 3, 10, 12), backend="cpu", dynamic={0: {2: "H"}})


def test_dims_and_the_report_count_residual_alike(tmp_path):
    """``pipeline.dims.counts()`` counts distinct dims (a residual one sizes many axes); the
    report's summary shows those counts, and calls the host-checked constraints residual
    constraints."""
    m = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2), nn.ReLU(), nn.Conv2d(4, 4, 3, stride=2))
    cm = dl.compile(m.eval(), torch.randn(2, 3, 15, 17), backend="cpu")
    dims = cm.pipeline.dims
    frame = dims.to_frame()
    for kind, n in dims.counts().items():
        assert n == frame[frame.kind == kind].expr.nunique()
    assert dims.axis_counts()["residual"] >= dims.counts()["residual"] > 0
    html = cm.report().to_html(tmp_path / "r.html").read_text()
    assert f"residual {dims.counts()['residual']}</span>" in html
    assert f"{len(cm.pipeline.residuals)} residual (host-checked)" in html


def test_axes_a_guard_ties_get_a_variant_where_they_differ():
    """``if h == w`` ties H and W in the square example's trace (one dim); a non-square call runs
    a variant traced at its sizes (the other branch), compiled once."""
    class Square(nn.Module):
        def forward(self, x):
            return x * 2 if x.shape[2] == x.shape[3] else x + 1

    cm = dl.compile(Square(), torch.randn(2, 3, 8, 8), backend="cpu")
    dims = [repr(e) for e in cm.pipeline.graph.dims(cm.pipeline.graph.inputs[0])]
    assert dims[2] == dims[3], dims
    for shape in [(1, 3, 5, 5), (2, 3, 6, 9), (3, 3, 4, 7), (2, 3, 7, 7)]:
        x = torch.randn(*shape)
        torch.testing.assert_close(cm(x), Square()(x))
    assert cm.stats()["compiles"] == 2 and cm.stats()["variants"] == 1


def test_a_cache_in_the_output_is_a_clear_refusal():
    """A transformers decoder returns its cache by default (``use_cache=True``): not a container
    export can flatten, refused by name with the way around it."""
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=50, n_positions=32,
                                  bos_token_id=0, eos_token_id=0)
    m = transformers.GPT2Model(cfg).eval()
    ids = torch.randint(0, 50, (2, 6))
    with pytest.raises(dl.UnsupportedOp, match=r"DynamicCache.*pass use_cache=False"):
        dl.compile(m, kwargs={"input_ids": ids}, backend="cpu")
    cm = dl.compile(m, kwargs={"input_ids": ids, "use_cache": False}, backend="cpu")
    ids = torch.randint(0, 50, (3, 9))
    torch.testing.assert_close(cm(input_ids=ids, use_cache=False).last_hidden_state,
                               m(input_ids=ids, use_cache=False).last_hidden_state, **TOL)
