"""squeezenet1_1's first max pool (3x3, stride 2, ceil_mode, after the conv's bias and relu) at
batch 8, 224²: the dynamic kernel against its static twin and hand-edited spellings of the
dynamic one. Sources in ``src/sq_*`` (``emit_sq.py``: ``kgen`` at 6b602e9, and
``sq_tree_*`` at the commit after it, the bias read once unguarded); run from the repository root on the
device:

    PYTHONPATH=. python3 data/bench/h100_stage4m/maxpool.py

Prints the median µs of each spelling and its max abs difference from eager."""
import re

import torch
import torch.nn.functional as F

from dlcb_lab.kgen.abi import magic
from window import SRC, edit, kernel, timed

NAME = "dlcb_k1_max_pool2d_nhwc"
N, X = 8, 224


def params(src: str) -> list[int]:
    """The int parameters, evaluated from the header's expressions at batch N, X x X."""
    env = {"x_0": N, "x_2": X, "x_3": X, "magic": magic}
    head = src[:src.index(f"void {NAME}_body(")]
    return [eval(e, env) for e in re.findall(r"^// (?:p|dv)\d+ = (.*)$", head, re.M)]


def bias_hoisted(b: str) -> str:   # the bias read once, unmasked (a masked term is -inf anyway)
    b = b.replace("        const float x18 = (m8 ? in1[i15] : 0.0f);\n", "")
    return b.replace("    for (I l0 = 0;", "    const float x18 = in1[i15];\n    for (I l0 = 0;", 1)


def index_hoisted(b: str) -> str:  # the window's offset from one base: two terms in the loop
    b = re.sub(r"const I i16 = [^\n]*", "const I i16 = 64 * l1 + l0 * (64 * p5 - 64) + base;", b)
    return b.replace("    for (I l0 = 0;", "    const I base = (-64) * i11 + 64 * i12 + (-64) * i13 + "
                     "128 * i14 + 64 * i10 + i15 + 128 * i6 + (-128) * i3;\n    for (I l0 = 0;", 1)


def unmasked(b: str) -> str:       # a bound, not a fix: no mask (the 111 input needs none)
    return b.replace("const bool m8 = i4 < p2 && i7 < p4;", "const bool m8 = true;")


def rows_unrolled(b: str) -> str:
    return b.replace("    for (I l0 = 0; l0 < 3;", "    #pragma unroll\n    for (I l0 = 0; l0 < 3;")


def main():
    dyn = (SRC / f"sq_dyn_{NAME}.cu").read_text()
    static = (SRC / f"sq_b8_static_{NAME}.cu").read_text()
    x = torch.randn(N, 111, 111, 64, device="cuda")
    bias = torch.randn(64, device="cuda")
    ref = F.max_pool2d(torch.relu(x + bias).permute(0, 3, 1, 2), 3, 2, ceil_mode=True)
    ref = ref.permute(0, 2, 3, 1).reshape(-1)
    numel = ref.numel()
    grid = (min(-(-numel // 256), 1 << 20), 256)
    args = [numel] + params(dyn)
    both = lambda b: index_hoisted(bias_hoisted(b))   # noqa: E731
    spell = {"dyn (emitted)": (dyn, args), "static (emitted)": (static, [numel]),
             "dyn bias hoisted": (edit(dyn, NAME, bias_hoisted), args),
             "dyn index hoisted": (edit(dyn, NAME, index_hoisted), args),
             "dyn both": (edit(dyn, NAME, both), args),
             "dyn both, rows unrolled": (edit(dyn, NAME, lambda b: rows_unrolled(both(b))), args),
             "dyn (tree)": ((SRC / f"sq_tree_dyn_{NAME}.cu").read_text(), args),
             "static (tree)": ((SRC / f"sq_tree_b8_static_{NAME}.cu").read_text(), [numel]),
             "dyn unmasked (bound)": (edit(dyn, NAME, unmasked), args),
             "dyn both, unmasked (bound)": (edit(dyn, NAME, lambda b: unmasked(both(b))), args)}
    fns, outs = {}, {}
    for k, (src, a) in spell.items():
        out = torch.empty(numel, device="cuda")
        kern = kernel(src, NAME, 3, len(a))[grid]
        fns[k] = (lambda kern=kern, out=out, a=a: kern(out, x, bias, *a))
        outs[k] = out
    t = timed(fns)
    print(f"{torch.cuda.get_device_name()}\n{NAME} (squeezenet1_1, {N}x111x111x64 -> 55x55)")
    for k in fns:
        err = (outs[k] - ref).abs().max().item()
        print(f"  {k:28s} {t[k]:8.2f} us   {t[k] / t['dyn (emitted)']:5.3f} x dyn   max|d| {err:.2e}")


if __name__ == "__main__":
    main()
