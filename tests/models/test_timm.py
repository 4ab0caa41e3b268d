"""timm models (random weights from timm's own configs; nothing downloaded), each compiled once
with ``dynamic="auto"`` on the CPU backend and checked against eager at three (batch, resolution)
shapes without a recompile; their generated kernels compile to an sm_90 cubin with NVRTC. The
families DLCB covers are a slow sweep (``SWEEP``: 85 models)."""

from __future__ import annotations

import functools

import pytest
import torch

import dlcb_lab as dl
from dlcb_lab.kgen.emit import cuda_module
from dlcb_lab.runtime.nvrtc import compile_cubin

timm = pytest.importorskip("timm")

FAST = {
    "regnetx_002": 64,            # grouped convolutions
    "convnext_atto": 64,          # depthwise 7x7, layer norm over channels, layer scale
    "vit_tiny_patch16_224": 224,  # attention, class token, fixed position table (H, W pinned)
    "mobilevit_xxs": 64,          # unfold to patches: ceil(H / p) * p, attention over patches
    "cspresnet50": 64,            # cross-stage partial blocks, leaky_relu in place
}
"""Model -> example resolution (``make test``)."""

SWEEP = {
    **FAST, "resnet50d": 64, "resnext26ts": 64, "seresnext26d_32x4d": 64, "efficientnet_b0": 64,
    "efficientnetv2_rw_t": 64, "mobilenetv3_small_100": 64, "mobilenetv4_conv_small": 64,
    "ghostnet_100": 64, "regnety_002": 64, "rexnet_100": 64, "densenet121": 64, "dla34": 64,
    "hrnet_w18_small": 64, "convnextv2_atto": 64, "deit_tiny_distilled_patch16_224": 224,
    "swin_tiny_patch4_window7_224": 224, "coatnet_nano_rw_224": 224, "levit_128s": 224,
    "mobilevitv2_050": 64, "efficientformer_l1": 224, "poolformer_s12": 64,
    "resmlp_12_224": 224, "gmlp_ti16_224": 224, "cait_xxs24_224": 224,
    "xcit_nano_12_p16_224": 224, "pit_ti_224": 224, "crossvit_tiny_240": 240,
    "edgenext_xx_small": 64, "fastvit_t8": 64, "repvit_m1": 64, "tinynet_e": 64,
    "lcnet_050": 64, "hgnetv2_b0": 64, "inception_v3": 128, "darknet53": 64,
    "ese_vovnet19b_dw": 64, "selecsls42b": 64, "skresnet18": 64, "res2net50_14w_8s": 64,
    "resnest14d": 64, "gernet_s": 64, "lambda_resnet26t": 64, "eva02_tiny_patch14_224": 224,
    "deit3_small_patch16_224": 224, "nf_resnet26": 64, "maxvit_nano_rw_256": 256,
    "beit_base_patch16_224": 224, "volo_d1_224": 224, "twins_svt_small": 224,
    "efficientvit_b0": 64, "efficientvit_m0": 224, "nextvit_small": 64, "tresnet_m": 64,
    "focalnet_tiny_srf": 64, "gcvit_xxtiny": 224, "tiny_vit_5m_224": 64, "pvt_v2_b0": 64,
    "convit_tiny": 224, "visformer_tiny": 224, "regnetz_b16": 64, "nest_tiny": 224,
    "inception_next_tiny": 64, "hiera_tiny_224": 224, "fastvit_sa12": 64,
    "vit_small_patch14_dinov2": 518, "vit_base_patch16_siglip_224": 224, "mambaout_femto": 64,
    "rdnet_tiny": 64, "starnet_s1": 64, "efficientnet_lite0": 64, "mixnet_s": 64,
    "semnasnet_050": 64, "fbnetc_100": 64, "hardcorenas_a": 64, "spnasnet_100": 64,
    "mnasnet_small": 64, "dpn48b": 64, "xception41": 64, "vgg11_bn": 64, "coat_tiny": 224,
}
"""Model -> example resolution (the slow sweep)."""


def _fixed(m: torch.nn.Module) -> bool:
    return bool(getattr(m, "pretrained_cfg", {}).get("fixed_input_size", False))


@functools.lru_cache(maxsize=None)
def _compiled(name: str, res: int):
    torch.manual_seed(0)
    m = timm.create_model(name, pretrained=False, num_classes=10).eval()
    cm = dl.compile(m, (torch.randn(2, 3, res, res),), dynamic="auto", backend="cpu")
    return m, cm


def check(name: str, res: int) -> None:
    m, cm = _compiled(name, res)
    big = res if _fixed(m) else 2 * res   # a fixed position table pins the resolution
    torch.manual_seed(1)
    with torch.no_grad():
        for b, r in ((3, res), (1, big), (2, big)):
            x = torch.randn(b, 3, r, r)
            want, got = m(x), cm(x)
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-4 * want.abs().max()):
                # random weights blow activations up (EfficientNetV2 to 3e3): against float64,
                # DLCB's error may be at most twice eager's own
                exact = m.double()(x.double())
                m.float()
                err = [float((y.double() - exact).abs().max() / exact.abs().max())
                       for y in (want, got)]
                assert err[1] <= 2 * err[0] + 1e-6, f"{b}x{r}: DLCB {err[1]:.2e}, eager {err[0]:.2e}"
    s = cm.stats()
    assert s["compiles"] == 1 + s["variants"] and s["variants"] <= 1, s   # batch 1, once
    axes = {r.axis: r.kind.value for r in cm.pipeline.dims.of("x")}
    assert axes[0] == "named", axes   # the batch stays dynamic
    if not _fixed(m):
        assert axes[2] == axes[3] == "named", axes


@pytest.mark.parametrize("name", list(FAST))
def test_timm_model_matches_eager(name):
    check(name, FAST[name])


@pytest.mark.parametrize("name", list(FAST))
def test_timm_kernels_compile_with_nvrtc(name):
    _, cm = _compiled(name, FAST[name])
    cubin = compile_cubin(cuda_module([k.body for k in cm.pipeline.kernels]), arch="sm_90")
    assert cubin[:4] == b"\x7fELF"


@pytest.mark.slow
@pytest.mark.parametrize("name", [n for n in SWEEP if n not in FAST])
def test_timm_sweep_matches_eager(name):
    check(name, SWEEP[name])
