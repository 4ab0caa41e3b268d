"""Window kernels of convnext_tiny, dynamic against static, and hand-edited spellings of the
dynamic one: which spelling closes the gap. Sources in ``src/`` (``emit_src.py``: ``kgen`` output
at 63d1fe7 for batch 1 / 8, 224², and ``split_*`` at 6b602e9; the prelude once, in
``prelude.cuh``); run from the repository root on the device:

    PYTHONPATH=. python3 data/bench/h100_stage4m/window.py

Prints, per kernel and batch, the median µs of each spelling (rounds of back-to-back launches
between CUDA events, interleaved) and its max abs difference from the emitted dynamic kernel."""
import pathlib
import re
import statistics
import torch
from dlcb_lab.kgen.abi import magic
from dlcb_lab.runtime.cuda_launch import CudaModule
from dlcb_lab.runtime.nvrtc import compile_cubin, device_arch

SRC = pathlib.Path(__file__).parent / "src"
ROUNDS, REPS = 15, 100


def body(src: str, name: str) -> tuple[int, int]:
    a = src.index(f"void {name}_body(")
    return a, src.index("\n}\n", a)


def edit(src: str, name: str, fn) -> str:
    a, b = body(src, name)
    return src[:a] + fn(src[a:b]) + src[b:]


# --- conv: spellings of the dynamic 7x7 depthwise body --------------------------------------------
def unsigned(b: str) -> str:   # 0 <= e && e < n  ->  (unsigned)e < (unsigned)n
    return b.replace("0 <= i4 && 0 <= i7 && i4 < p1 && i7 < p2",
                     "(unsigned)i4 < (unsigned)p1 && (unsigned)i7 < (unsigned)p2")


def hoisted(b: str) -> str:    # the row's guard and offset once per row
    b = b.replace("      for (I l1 = 0; l1 < 7; ++l1) {\n",
                  "      const I i4 = l0 + i3 - 3;\n      const bool mr = (unsigned)i4 < (unsigned)p1;\n"
                  "      const I i9 = l0 * p2;\n      for (I l1 = 0; l1 < 7; ++l1) {\n", 1)
    b = re.sub(r"\n        const I i4 = [^\n]*", "", b)
    b = re.sub(r"\n        const I i9 = [^\n]*", "", b)
    return b.replace("0 <= i4 && 0 <= i7 && i4 < p1 && i7 < p2", "mr && (unsigned)i7 < (unsigned)p2")


def float_acc(b: str) -> str:
    return b.replace("double acc1 = 0.0;", "float acc1 = 0.0f;")


def rowptr(b: str) -> str:     # hoisted, and the row's input pointer once per row
    b = hoisted(b)
    b = b.replace("      const I i9 = l0 * p2;\n",
                  "      const float* __restrict__ row = in0 + (t + 384 * (l0 * p2) - 1152 * p2 - 1152);\n")
    b = re.sub(r"\n        const I i10 = [^\n]*", "", b)
    return b.replace("in0[i10]", "row[384 * l1]")


# --- pool: spellings of the dynamic head pool -----------------------------------------------------
def flat(unroll: int):
    def f(b: str) -> str:
        a = b.index("    for (I l0 = 0;")
        e = b.index("    const float v14")
        loop = (f"    #pragma unroll {unroll}\n    for (I lf = 0; lf < p2; ++lf) {{\n"
                "      const I i7 = 768 * lf + 768 * i6 + i2;\n"
                "      const float x8 = in1[i7];\n      const float v10 = (x8 + x9);\n"
                "      const float v11 = (x3 * v10);\n      const float x12 = in3[i7];\n"
                "      const float v13 = (v11 + x12);\n      acc1 += v13;\n    }\n")
        return b[:a] + loop + b[e:]
    return f


def nested_unroll(n: int):
    def f(b: str) -> str:
        return b.replace("      for (I l1 = 0; l1 < p0; ++l1) {",
                         f"      #pragma unroll {n}\n      for (I l1 = 0; l1 < p0; ++l1) {{")
    return f


def timed(fns, rounds=ROUNDS, reps=REPS):
    times = {k: [] for k in fns}
    for f in fns.values():
        f()
    torch.cuda.synchronize()
    for _ in range(rounds):
        for k, f in fns.items():
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(reps):
                f()
            b.record()
            b.synchronize()
            times[k].append(a.elapsed_time(b) * 1000 / reps)
    return {k: statistics.median(v) for k, v in times.items()}


def kernel(src: str, name: str, nptr: int, nint: int):
    """Entry point ``name``_i32 of ``src`` (kernels after ``src/prelude.cuh``, kgen's prelude)."""
    cub = compile_cubin((SRC / "prelude.cuh").read_text() + src, arch=device_arch())
    return CudaModule(cub, name=name).kernel(name + "_i32", ["ptr"] * nptr + ["i64"] * nint)


def report(title, fns, outs, ref):
    t = timed(fns)
    print(f"\n{title}")
    for k in fns:
        err = (outs[k] - outs[ref]).abs().max().item()
        print(f"  {k:28s} {t[k]:8.2f} us   {t[k] / t[ref]:5.3f} x dyn   max|d| {err:.2e}")


def conv(batch: int):
    name = "dlcb_k42_conv2d_9_nhwc"
    dyn = (SRC / f"dyn_{name}.cu").read_text()
    static = (SRC / f"{'b8_' if batch == 8 else ''}static_{name}.cu").read_text()
    H = W = 14
    C = 384
    x = torch.randn(batch, H, W, C, device="cuda")
    w = torch.randn(7, 7, C, device="cuda")
    numel = x.numel()
    grid = (min(-(-numel // 256), 1 << 20), 256)
    dyn_args = [numel, C * W, H, W, magic(C * W), magic(H), magic(W)]
    spell = {"dyn (emitted)": (dyn, dyn_args), "static (emitted)": (static, [numel]),
             "dyn unsigned guards": (edit(dyn, name, unsigned), dyn_args),
             "dyn row guard hoisted": (edit(dyn, name, hoisted), dyn_args),
             "dyn row pointer hoisted": (edit(dyn, name, rowptr), dyn_args),
             "dyn float acc": (edit(dyn, name, float_acc), dyn_args),
             "dyn hoisted + float acc": (edit(dyn, name, lambda b: float_acc(hoisted(b))), dyn_args),
             "static float acc": (edit(static, name, float_acc), [numel])}
    fns, outs = {}, {}
    for k, (src, args) in spell.items():
        out = torch.empty_like(x)
        kern = kernel(src, name, 3, len(args))[grid]
        fns[k] = (lambda kern=kern, out=out, args=args: kern(out, x, w, *args))
        outs[k] = out
    report(f"{name} (7x7 depthwise, {batch}x{H}x{W}x{C})", fns, outs, "dyn (emitted)")


def pool(batch: int):
    name = "dlcb_k115_adaptive_avg_pool2d"
    dyn = (SRC / f"dyn_{name}.cu").read_text()
    static = (SRC / f"{'b8_' if batch == 8 else ''}static_{name}.cu").read_text()
    C, H, W = 768, 7, 7
    a, c = torch.randn(C, device="cuda"), torch.randn(C, device="cuda")
    x, y = torch.randn(batch, H, W, C, device="cuda"), torch.randn(batch, H, W, C, device="cuda")
    numel = batch * C
    grid = (-(-numel // 256), 256)
    dyn_args = [numel, W, H, H * W]
    spell = {"dyn (emitted)": (dyn, dyn_args), "static (emitted)": (static, [numel]),
             "dyn nested, unroll 7": (edit(dyn, name, nested_unroll(7)), dyn_args),
             "dyn flat, unroll 4": (edit(dyn, name, flat(4)), dyn_args),
             "dyn flat, unroll 8": (edit(dyn, name, flat(8)), dyn_args),
             "dyn flat, unroll 16": (edit(dyn, name, flat(16)), dyn_args)}
    fns, outs = {}, {}
    for k, (src, args) in spell.items():
        out = torch.empty(numel, device="cuda")
        kern = kernel(src, name, 5, len(args))[grid]
        fns[k] = (lambda kern=kern, out=out, args=args: kern(out, a, x, c, y, *args))
        outs[k] = out
    report(f"{name} (head pool, {batch}x{H}x{W}x{C})", fns, outs, "dyn (emitted)")




# --- second round: the loads' order --------------------------------------------------------------
def unroll_rows(b: str) -> str:   # both literal loops unrolled: 49 taps in one straight line
    return b.replace("    for (I l0 = 0; l0 < 7; ++l0) {", "    #pragma unroll\n    for (I l0 = 0; l0 < 7; ++l0) {")


def loads_first(b: str) -> str:   # a row's 14 loads into registers, then its 7 products
    a = b.index("      for (I l1 = 0; l1 < 7; ++l1) {")
    e = b.index("    const float v17")
    row = ("      float xs[7], ws[7];\n      #pragma unroll\n      for (I l1 = 0; l1 < 7; ++l1) {\n"
           "        const I i7 = l1 + i6 - 3;\n"
           "        const bool m8 = 0 <= i4 && 0 <= i7 && i4 < p1 && i7 < p2;\n"
           "        const I i10 = 384 * l1 + t + 384 * i9 + (-1152) * p2 - 1152;\n"
           "        xs[l1] = m8 ? in0[i10] : 0.0f;\n"
           "        ws[l1] = in1[2688 * l0 + 384 * l1 + i13];\n      }\n"
           "      #pragma unroll\n      for (I l1 = 0; l1 < 7; ++l1) acc1 += xs[l1] * ws[l1];\n"
           "    }\n")
    b = b[:a] + row + b[e:]
    return b.replace("    for (I l0 = 0; l0 < 7; ++l0) {\n",
                     "    for (I l0 = 0; l0 < 7; ++l0) {\n      const I i4 = l0 + i3 - 3;\n"
                     "      const I i9 = l0 * p2;\n", 1)


def clamped(b: str) -> str:       # every load issued (index 0 where the guard fails), then selected
    return b.replace("(m8 ? in0[i10] : 0.0f)", "in0[m8 ? i10 : 0]")


def conv2(batch: int):
    name = "dlcb_k42_conv2d_9_nhwc"
    dyn = (SRC / f"dyn_{name}.cu").read_text()
    static = (SRC / f"{'b8_' if batch == 8 else ''}static_{name}.cu").read_text()
    H = W = 14
    C = 384
    x = torch.randn(batch, H, W, C, device="cuda")
    w = torch.randn(7, 7, C, device="cuda")
    numel = x.numel()
    grid = (min(-(-numel // 256), 1 << 20), 256)
    dyn_args = [numel, C * W, H, W, magic(C * W), magic(H), magic(W)]
    spell = {"dyn (emitted)": (dyn, dyn_args), "static (emitted)": (static, [numel]),
             "dyn rows unrolled": (edit(dyn, name, unroll_rows), dyn_args),
             "static rows unrolled": (edit(static, name, unroll_rows), [numel]),
             "dyn loads first": (edit(dyn, name, loads_first), dyn_args),
             "dyn loads first, rows unrolled": (edit(dyn, name, lambda b: unroll_rows(loads_first(b))), dyn_args),
             "dyn clamped loads": (edit(dyn, name, clamped), dyn_args),
             "static clamped loads": (edit(static, name, lambda b: b.replace("(m7 ? in0[i9] : 0.0f)", "in0[m7 ? i9 : 0]")), [numel])}
    fns, outs = {}, {}
    for k, (src, args) in spell.items():
        out = torch.empty_like(x)
        kern = kernel(src, name, 3, len(args))[grid]
        fns[k] = (lambda kern=kern, out=out, args=args: kern(out, x, w, *args))
        outs[k] = out
    report(f"{name} round 2 (7x7 depthwise, {batch}x{H}x{W}x{C})", fns, outs, "dyn (emitted)")


# --- third round: the tree's emission (emit_src.py split_: terms before their fold, flat pool) --
def tree(batch: int):
    st = f"{'b8_' if batch == 8 else ''}static_"
    name = "dlcb_k42_conv2d_9_nhwc"
    H = W = 14
    C = 384
    x = torch.randn(batch, H, W, C, device="cuda")
    w = torch.randn(7, 7, C, device="cuda")
    numel = x.numel()
    grid = (min(-(-numel // 256), 1 << 20), 256)
    dyn_args = [numel, C * W, H, W, magic(C * W), magic(H), magic(W)]
    dyn = (SRC / f"dyn_{name}.cu").read_text()
    spell = {"dyn (emitted)": (dyn, dyn_args),
             "static (emitted)": ((SRC / f"{st}{name}.cu").read_text(), [numel]),
             "dyn loads first": (edit(dyn, name, loads_first), dyn_args),
             "dyn (tree)": ((SRC / f"split_dyn_{name}.cu").read_text(), dyn_args),
             "static (tree)": ((SRC / f"split_{st}{name}.cu").read_text(), [numel])}
    fns, outs = {}, {}
    for k, (src, args) in spell.items():
        out = torch.empty_like(x)
        kern = kernel(src, name, 3, len(args))[grid]
        fns[k] = (lambda kern=kern, out=out, args=args: kern(out, x, w, *args))
        outs[k] = out
    report(f"{name} tree (7x7 depthwise, {batch}x{H}x{W}x{C})", fns, outs, "dyn (emitted)")

    name = "dlcb_k115_adaptive_avg_pool2d"
    C, H, W = 768, 7, 7
    a, c = torch.randn(C, device="cuda"), torch.randn(C, device="cuda")
    x, y = torch.randn(batch, H, W, C, device="cuda"), torch.randn(batch, H, W, C, device="cuda")
    numel = batch * C
    grid = (-(-numel // 256), 256)
    spell = {"dyn (emitted)": ((SRC / f"dyn_{name}.cu").read_text(), [numel, W, H, H * W]),
             "static (emitted)": ((SRC / f"{st}{name}.cu").read_text(), [numel]),
             "dyn (tree)": ((SRC / f"split_dyn_{name}.cu").read_text(), [numel, H, W, H * W]),
             "static (tree)": ((SRC / f"split_{st}{name}.cu").read_text(), [numel])}
    fns, outs = {}, {}
    for k, (src, args) in spell.items():
        out = torch.empty(numel, device="cuda")
        kern = kernel(src, name, 5, len(args))[grid]
        fns[k] = (lambda kern=kern, out=out, args=args: kern(out, a, x, c, y, *args))
        outs[k] = out
    report(f"{name} tree (head pool, {batch}x{H}x{W}x{C})", fns, outs, "dyn (emitted)")


if __name__ == "__main__":
    print(torch.cuda.get_device_name())
    for b in (1, 8):
        conv(b)
        pool(b)
        conv2(b)
    for b in (1, 8):
        tree(b)
