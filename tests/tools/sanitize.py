"""compute-sanitizer over DLCB's launch paths (issue 16), and the summary of its logs.

``workload`` runs, on CUDA, what the sanitizers should see: vectorized and scalar entry points
(aligned, one element off, odd element counts), the 32-bit index entry point just under its limit
and the 64-bit one past it, CUDA-graph captures and replays across shape changes, index checks,
a fast TorchVision subset at small sizes, tiny BERT and GPT-2, and fuzzed graphs. ``summarize``
reads the sanitizer logs and counts errors per tool, telling generated code from the rest by the
kernel an error names: DLCB's kernels are ``dlcb_k<N>_...`` (every generated entry point), every
other name is a library or torch kernel.

    .ci/gpu_sanitize [TOOLS]   # each tool over the workload, then the summary (GPU machine)
    python tests/tools/sanitize.py workload [--big]    # --big: the 2**31-element boundary too
    python tests/tools/sanitize.py summarize OUT
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

ERROR = re.compile(r"^========= (?!ERROR SUMMARY|RACECHECK SUMMARY|COMPUTE-SANITIZER|Saved host|Host Frame)\S")
OURS = re.compile(r"\bdlcb_k\d+\w*")
AT = re.compile(r"^=========\s+at (?:0x[0-9a-f]+ in )?((?:void )?[A-Za-z_][\w:]*(?:<[^(]*>)?)",
                re.MULTILINE)
SUMMARY = re.compile(r"ERROR SUMMARY: (\d+) errors?$|RACECHECK SUMMARY: .*\((\d+) errors?",
                     re.MULTILINE)   # not "... were not printed"
API = re.compile(r"on CUDA API call to (\w+)")


def parse(text: str) -> list[tuple[str, str]]:
    """(first line, kernel) per error block of one sanitizer log: a block starts at an unindented
    ``=========`` line and runs over the indented ones after it; its kernel is ``api:<call>`` for
    an error a CUDA API call returned (no kernel ran: the host frames may name a DLCB launch, as
    when cuda.core probes a driver entry point), ``sanitizer`` for the tool's own internal error
    (a launch it failed to track), else the generated kernel it names (``dlcb_k<N>...``), else
    the first ``at <function>``, else ''."""
    blocks: list[list[str]] = []
    for line in text.splitlines():
        if ERROR.match(line):
            blocks.append([line])
        elif blocks and line.startswith("=========    "):
            blocks[-1].append(line)
    out = []
    for b in blocks:
        body = "\n".join(b)
        api, ours, at = API.search(b[0]), OURS.search(body), AT.search(body)
        first = b[0][10:].strip()
        out.append((first, "sanitizer" if first.startswith("Internal Sanitizer Error") else
                    f"api:{api.group(1)}" if api else ours.group(0) if ours
                    else at.group(1) if at else ""))
    return out


def generated(kernel: str) -> bool:
    return kernel.startswith("dlcb_k")


def summarize(folder: Path) -> list[dict]:
    """One row per log ``<tool>.log``: errors reported, those in generated kernels, those a CUDA
    API call returned, the others (library and torch kernels)."""
    rows = []
    for log in sorted(folder.glob("*.log")):
        text = log.read_text(errors="replace")
        errs = parse(text)
        summary = SUMMARY.findall(text)   # none: the run was cut off; count what it printed
        total = sum(int(a or b) for a, b in summary) if summary else len(errs)
        gen = sum(generated(k) for _, k in errs)
        api = sum(k.startswith("api:") for _, k in errs)
        rows.append({"log": log.stem, "errors": total, "generated": gen, "api": api,
                     "other": total - gen - api, "complete": bool(summary),
                     "kernels": dict(Counter(k or "?" for _, k in errs))})
    return rows


def workload(big: bool = False, cudnn: bool = True) -> None:
    """``cudnn`` False: convolutions on ATen's own kernels (initcheck: see ``.ci/gpu_sanitize``)."""
    import torch
    import torchvision

    import dlcb_lab as dl
    from dlcb_lab.bench.bridge import text_model
    from dlcb_lab.kgen import entries

    dev = "cuda"
    torch.backends.cudnn.enabled = cudnn

    class Affine(torch.nn.Module):
        def forward(self, x, s):
            return torch.relu(x * s + 1)

    s = torch.randn(1, 6, 1, 1, device=dev)
    for dtype in (torch.float32, torch.float16):
        cm = dl.compile(Affine(), (torch.randn(2, 6, 5, 8, device=dev, dtype=dtype), s.to(dtype)),
                        dynamic={0: {0: "N", 3: "W"}})
        buf = torch.randn(4 * 6 * 5 * 8 + 1, device=dev, dtype=dtype)
        for x in (buf[:960].view(4, 6, 5, 8), buf[1:].view(4, 6, 5, 8),
                  torch.randn(3, 6, 5, 7, device=dev, dtype=dtype)):
            for _ in range(3):   # plain, capture, replay
                torch.testing.assert_close(cm(x, s.to(dtype)), Affine()(x, s.to(dtype)))
    # the 32-bit entry point just under its limit (``big``: 2.1e9 elements, 8.4 GB a tensor),
    # the 64-bit one on small tensors (forced)
    cm = dl.compile(Affine(), (torch.randn(2, 6, 5, 8, device=dev), s), dynamic={0: {0: "N"}})
    x = torch.randn(entries.NARROW_LIMIT // (6 * 5 * 8) if big else 9, 6, 5, 8, device=dev)
    torch.testing.assert_close(cm(x, s), Affine()(x, s))
    limit = entries.NARROW_LIMIT
    entries.NARROW_LIMIT = -1
    cm._thunk.graphs = None
    torch.testing.assert_close(cm(x[:7], s), Affine()(x[:7], s))
    entries.NARROW_LIMIT = limit
    del x
    torch.cuda.empty_cache()
    # models: shape changes between replays, index checks
    with torch.no_grad():
        for name in ("resnet18", "mobilenet_v3_large", "squeezenet1_1"):
            m = getattr(torchvision.models, name)(num_classes=10).eval().to(dev)
            cm = dl.compile(m, (torch.randn(2, 3, 64, 64, device=dev),),
                            dynamic={0: {0: "N", 2: "H", 3: "W"}})
            for b, h in ((2, 64), (3, 48), (2, 64), (3, 48), (1, 64), (2, 64)):
                x = torch.randn(b, 3, h, h, device=dev)
                torch.testing.assert_close(cm(x), m(x), rtol=1e-3, atol=1e-3)
        for name in ("bert", "gpt2"):
            m = text_model(name, tiny=True).to(dev)
            ids = torch.randint(0, 100, (2, 16), device=dev)
            cm = dl.compile(m, (ids, torch.ones_like(ids)), dynamic="auto")
            for b, sq in ((2, 16), (1, 7), (2, 16), (3, 33), (1, 7)):
                ids = torch.randint(0, 100, (b, sq), device=dev)
                torch.testing.assert_close(cm(ids, torch.ones_like(ids)),
                                           m(ids, torch.ones_like(ids)), rtol=1e-3, atol=1e-3)
            try:
                cm(torch.full((2, 8), 10**6, device=dev), torch.ones(2, 8, device=dev).long())
            except dl.ShapeMismatch:
                pass
    sys.path.insert(0, str(Path(__file__).parent))
    import fuzz

    counts = Counter(fuzz.run_case(fuzz.generate(seed), dev).status for seed in range(40))
    print("workload done; fuzzed graphs:", dict(counts))


if __name__ == "__main__":
    if sys.argv[1:2] == ["workload"]:
        workload(big="--big" in sys.argv, cudnn="--no-cudnn" not in sys.argv)
    elif sys.argv[1:2] == ["summarize"]:
        rows = summarize(Path(sys.argv[2]))
        for r in rows:
            print(f"{r['log']:>12}: {r['errors']} errors, {r['generated']} in generated kernels, "
                  f"{r['api']} returned by API calls, {r['other']} elsewhere"
                  f"{'' if r['complete'] else ' (cut off: no summary)'} "
                  f"{r['kernels'] if r['errors'] else ''}")
        sys.exit(1 if any(r["generated"] for r in rows) else 0)
    else:
        sys.exit(__doc__)
