"""Per-sample outcome of the OpInfo samples of the zoo's ops (float32), run exactly as
tests/ops/test_opinfo.py runs them (``_check``): static compile, dynamic compile (every axis > 1 named;
on refusal, the first input's axes only), grown inputs. A sample passes when its static compile
and one dynamic compile run and match eager; it is refused when the static compile or every
dynamic one is refused (a dl error); wrong when a value differs. Compile counts: ran / refused.

Run from the repository root: ``python tests/tools/opinfo_census.py [--all] [op names...]`` (``--all``:
every sample, as ``-m slow`` runs them; default the ``FAST_SAMPLES`` per op that ``make test``
runs). Prints one line per op, the commonest refusal reasons, and the total."""
import sys, time, collections
sys.path[:0] = ["tests/tools", "tests/ops"]
import torch
import test_opinfo as T

limit = None if "--all" in sys.argv else T.FAST_SAMPLES
only = [a for a in sys.argv[1:] if not a.startswith("--")]
counts = collections.Counter()
t0 = time.time()
log = []
orig_compile = T._compile
def rec_compile(m, ts, spec):
    try:
        cm = orig_compile(m, ts, spec)
    except Exception as e:
        log.append((bool(spec), False, f"{type(e).__name__}: {str(e).splitlines()[0].split('**kwargs): ')[-1][:150]}"))
        raise
    log.append((bool(spec), True, ""))
    return cm
T._compile = rec_compile
seen = set()
for op in T.OPINFOS:
    name = f"{op.name}.{op.variant_test_name}".rstrip(".")
    if only and name not in only:
        continue
    seen.add(name)
    if torch.float32 not in op.supported_dtypes("cpu"):
        continue
    c = collections.Counter()
    reasons = collections.Counter()
    for j, sample in T._samples(op, torch.float32, limit):
        orig = T._samples
        T._samples = lambda *_a, s=(j, sample): [s]
        log.clear()
        try:
            ran, refused = T._check(op, torch.float32)
            c["ran_compiles"] += ran
            c["refused_compiles"] += refused
            st = [ok for dyn, ok, _ in log if not dyn]
            dy = [ok for dyn, ok, _ in log if dyn]
            if not log:
                c["skipped"] += 1
            elif all(st) and any(dy):
                c["pass"] += 1
            else:
                c["refused"] += 1
                for _, ok, why in log:
                    if not ok:
                        reasons[why] += 1
        except AssertionError as e:
            c["wrong"] += 1
            print("WRONG", name, j, str(e)[:400], flush=True)
        except Exception as e:
            c["error"] += 1
            print("ERROR", name, j, type(e).__name__, str(e)[:300], flush=True)
        finally:
            T._samples = orig
    counts.update(c)
    print(f"{name}: {dict(c)}  [{time.time()-t0:.0f}s]", flush=True)
    for why, n in reasons.most_common(4):
        print(f"    {n}x {why}", flush=True)
if set(only) - seen:
    sys.exit(f"no OpInfo of the zoo's ops named {sorted(set(only) - seen)} (names are "
             f"op.variant, e.g. nn.functional.pad.reflect)")
tot = counts["pass"] + counts["refused"] + counts["wrong"] + counts["error"]
print("TOTAL", dict(counts), f"pass {counts['pass']}/{tot} = {counts['pass']/max(tot,1):.1%}")
