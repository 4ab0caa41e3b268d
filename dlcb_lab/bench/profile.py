"""Where a compiled call's time goes on CUDA: the host program, the library calls (cuDNN/cuBLAS
kernels launched through ATen) and the generated kernels.

    python -m dlcb_lab.bench.profile --models resnet50,densenet121 [--batch 32] [--out p.csv]

Device times come from ``torch.profiler`` (CUPTI sees every kernel, whoever launched it): a kernel
whose name starts with ``dlcb_k`` is generated, any other is a library kernel. ``host_ms`` is the
host program alone (shape checks and launch slots, timed by ``perf_counter``); ``wall_ms`` the whole
call with a device synchronize, so ``wall_ms`` well above the device total means the call is bound
by Python-side launch overhead.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from typing import Any

import torch

import dlcb_lab as dl


def profile_call(cm: dl.CompiledModule, args: tuple, reps: int = 20) -> dict[str, Any]:
    """Per-call breakdown of ``cm(*args)`` (medians / per-call means over ``reps`` calls)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        cm(*args)
    torch.cuda.synchronize()
    walls = []
    for _ in range(reps):
        t0 = time.perf_counter()
        cm(*args)
        torch.cuda.synchronize()
        walls.append(time.perf_counter() - t0)
    thunk = cm._thunk
    shapes = [t.shape for t in (*args, *cm._constants)]
    hosts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        thunk._run_host(shapes)
        hosts.append(time.perf_counter() - t0)
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            cm(*args)
        torch.cuda.synchronize()
    gen = lib = 0.0
    n_gen = n_lib = 0
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        us = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
        if e.name.startswith("dlcb_k"):
            gen, n_gen = gen + us, n_gen + 1
        elif not e.name.startswith(("Memcpy", "Memset")):
            lib, n_lib = lib + us, n_lib + 1
    return {"wall_ms": statistics.median(walls) * 1e3,
            "host_ms": statistics.median(hosts) * 1e3,
            "generated_ms": gen / reps / 1e3, "library_ms": lib / reps / 1e3,
            "generated_launches": n_gen / reps, "library_kernels": n_lib / reps}


def main(argv=None) -> int:
    import pandas as pd

    from .zoo import MODELS, compile_model, make_input

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", required=True)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    rows = []
    for name in a.models.split(","):
        res = (MODELS[name].native,) * 2
        cm = compile_model(name, "cuda", a.batch, res, device="cuda")
        x = make_input(a.batch, res, "cuda")
        with torch.no_grad():
            rows.append({"model": name, "batch": a.batch, **profile_call(cm, (x,))})
        print(rows[-1], file=sys.stderr, flush=True)
    df = pd.DataFrame(rows)
    if a.out:
        df.to_csv(a.out, index=False)
    print(df.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
