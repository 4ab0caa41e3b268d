"""The bad-input matrix (issue 16) on real models: a TorchVision CNN compiled for dynamic batch
and resolution, the same module saved and loaded as an artifact, and a tiny BERT (dynamic batch
and sequence). Every bad call gets eager's result (another rank: a JIT compile; another layout:
read as the values) or a ``dl`` error naming the input, raised before any launch or output
allocation."""

from __future__ import annotations

import pytest
import torch
import torchvision

import dlcb_lab as dl
from harness import Spy

transformers = pytest.importorskip("transformers")


def _resnet():
    torch.manual_seed(0)
    return torchvision.models.resnet18(num_classes=10).eval()


@pytest.fixture(scope="module")
def cnn(tmp_path_factory):
    m = _resnet()
    cm = dl.compile(m, (torch.randn(2, 3, 32, 32),), dynamic={0: {0: "N", 2: "H", 3: "W"}},
                    backend="cpu")
    path = tmp_path_factory.mktemp("art") / "resnet18.dlcb"
    cm.save(path)
    return m, {"compiled": cm, "loaded": dl.load(path)}


@pytest.fixture(scope="module")
def bert():
    torch.manual_seed(0)
    m = transformers.BertModel(transformers.BertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=64)).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask):
            return self.m(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    h = Hidden().eval()
    ids = torch.randint(0, 100, (2, 16))
    return h, dl.compile(h, (ids, torch.ones_like(ids)), dynamic={0: {0: "B", 1: "S"},
                                                                   1: {0: "B", 1: "S"}},
                         backend="cpu")


CNN_ERRORS = [
    ("dtype", lambda: torch.randn(2, 3, 32, 32, dtype=torch.float64), dl.DTypeError,
     r"input 0 'x'(: dtype torch.float64 != compiled torch.float32| is rank 4 float64, compiled "
     r"for rank 4 float32; compiling for it failed: .*float64, float32)"),
    ("device", lambda: torch.randn(2, 3, 32, 32, device="meta"), dl.DLError,
     r"input 0 'x': on meta"),
    ("sparse", lambda: torch.randn(2, 3, 32, 32).to_sparse(), dl.DLError, r"input 0 'x'"),
    ("channels", lambda: torch.randn(2, 4, 32, 32), dl.ShapeMismatch,
     r"input 0 'x' axis 1: size 4 != 3"),
    ("empty image", lambda: torch.randn(2, 3, 0, 32), dl.ShapeMismatch,
     r"padded extent H \+ 2\*3 holds the window \(7\).*H = input 0 'x' axis 2"),
    ("list", lambda: [[0.0]], dl.DLError, r"input 0 'x': expected a torch.Tensor, got list"),
]


@pytest.mark.parametrize("kind", ["compiled", "loaded"])
@pytest.mark.parametrize("what,make,exc,match", CNN_ERRORS, ids=[c[0] for c in CNN_ERRORS])
def test_cnn_bad_inputs_refused_before_launch(cnn, monkeypatch, kind, what, make, exc, match):
    """Refused before any launch; another dtype is first tried as a compile of its own (eager
    refuses float64 against float32 weights, and so does that compile), a loaded artifact has no
    module to compile and names the dtype."""
    m, cms = cnn
    cm = cms[kind]
    spy = Spy(cm, monkeypatch)
    with pytest.raises(exc, match=match):
        cm(make())
    _untouched(spy, tried=what == "dtype" and kind == "compiled")


def _untouched(spy, tried: bool) -> None:
    """Nothing launched; and nothing allocated, unless a compile was ``tried`` (export and its
    example run allocate: the main thunk still ran nothing)."""
    if tried:
        assert spy.launches == 0 and spy.thunk.calls == spy.calls0
    else:
        spy.assert_untouched()


@pytest.mark.parametrize("kind", ["compiled", "loaded"])
def test_cnn_unusual_but_valid_inputs_match_eager(cnn, kind):
    """Channels-last, a strided view, a batch of one and of none, a 1x1 image."""
    m, cms = cnn
    cm = cms[kind]
    x = torch.randn(3, 3, 40, 36)
    cases = [x.to(memory_format=torch.channels_last), torch.randn(2, 3, 64, 70)[:, :, ::2, 1::2],
             torch.randn(1, 3, 33, 32), torch.randn(0, 3, 32, 32), torch.randn(2, 3, 1, 1)]
    with torch.no_grad():
        for y in cases:
            torch.testing.assert_close(cm(y), m(y), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kind", ["compiled", "loaded"])
def test_cnn_another_rank_is_tried_then_refused(cnn, monkeypatch, kind):
    """An unbatched image: another rank, so the compiled module tries a JIT compile of that rank
    (torch's conv2d takes [C, H, W]) and ResNet's batch norm refuses it, as eager does; a loaded
    artifact has no module to compile and names the rank. Nothing is launched."""
    m, cms = cnn
    cm = cms[kind]
    spy = Spy(cm, monkeypatch)
    match = r"capture .* expected 4D input" if kind == "compiled" else r"input 0 'x': rank 3 != 4"
    with pytest.raises(dl.DLError, match=match):
        cm(torch.randn(3, 32, 32))
    with pytest.raises(ValueError, match="expected 4D input"):
        m(torch.randn(3, 32, 32))
    assert spy.launches == 0 and spy.thunk.calls == spy.calls0


BERT_ERRORS = [
    ("token id past the vocabulary", lambda: (torch.full((2, 8), 100),
                                              torch.ones(2, 8, dtype=torch.long)),
     dl.ShapeMismatch, r"index values in \[100, 100\], outside \[0, 100\)"),
    ("negative token id", lambda: (torch.full((2, 8), -1), torch.ones(2, 8, dtype=torch.long)),
     dl.ShapeMismatch, r"outside \[0, 100\)"),
    ("sequence past the positions", lambda: (torch.ones(2, 65, dtype=torch.long),
                                             torch.ones(2, 65, dtype=torch.long)),
     dl.ShapeMismatch, r"slice 'slice_1' \(slice \[0 : \+S : 1\] within axis 1 of extent 64\)"),
    ("mask of another length", lambda: (torch.ones(2, 8, dtype=torch.long),
                                        torch.ones(2, 9, dtype=torch.long)),
     dl.ShapeMismatch, r"attention_mask"),
    ("float ids", lambda: (torch.ones(2, 8), torch.ones(2, 8, dtype=torch.long)),
     dl.DTypeError, r"input 0 'input_ids' is rank 2 float32, compiled for rank 2 int64; "
                    r"compiling for it failed: .*indices"),
]


@pytest.mark.parametrize("what,make,exc,match", BERT_ERRORS, ids=[c[0] for c in BERT_ERRORS])
def test_bert_bad_inputs_refused_before_launch(bert, monkeypatch, what, make, exc, match):
    m, cm = bert
    spy = Spy(cm, monkeypatch)
    with pytest.raises(exc, match=match):
        cm(*make())
    _untouched(spy, tried=what in ("mask of another length", "float ids"))


def test_bert_keywords_and_shapes_match_eager(bert):
    m, cm = bert
    for b, s in ((1, 1), (3, 64), (2, 16)):
        ids = torch.randint(0, 100, (b, s))
        mask = (torch.rand(b, s) < 0.8).long()
        mask[:, 0] = 1
        with torch.no_grad():
            want = m(ids, mask)
            for got in (cm(ids, mask), cm(attention_mask=mask, input_ids=ids),
                        cm(ids, attention_mask=mask)):
                torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    with pytest.raises(dl.ArgumentError, match=r"unexpected keyword argument 'token_type_ids'"):
        cm(ids, mask, token_type_ids=ids)
