"""The conformance report: per-file pass rates, failure categories with their first error
line, and JAX's own skips with its reasons.

A case counts as applicable when JAX ran it (not skipped), it built an rlx_jax program and it
passes under plain jax.jit on this machine; the others are reported apart."""
import collections
import re

BAD = ("fail", "error", "crash", "timeout")


STAGES_API = re.compile(r"'(Lowered|Compiled|Jitted|Bound)' object has no attribute")


def outcome(r):
    """One of: pass, fail, skip (JAX skipped it), no-rlx (no rlx_jax program was built or run),
    jax-fails (it fails under plain jax.jit too), api (it failed after reading the program's
    text, which is rlx_jax's IR and not JAX's StableHLO, or JAX's own dispatch / compile event
    counters (jtu.count_*), or on a jax.stages attribute that rlx_jax's stages do not
    have, or the test defines primitives by their MLIR lowerings (mlir.register_lowering):
    XLA's compiler IR is their only meaning, and rlx_jax compiles without it)."""
    if r["status"] == "skip":
        return "skip"
    if r["status"] in BAD and r.get("jax_status") in BAD:
        return "jax-fails"
    if r["status"] in BAD and (r.get("read_ir") or r.get("mlir_lowerings")
                               or STAGES_API.search(r.get("reason") or "")):
        return "api"
    built = (r.get("jitted") or 0) + (r.get("programs") or 0) + (r.get("calls") or 0) > 0
    if not built and r["status"] == "pass":
        return "no-rlx"
    return "pass" if r["status"] == "pass" else "fail"


def category(r):
    reason = re.sub(r"\d+", "N", r.get("reason") or "")
    reason = re.sub(r"'[^']*'", "'…'", reason)[:140]
    return f"{r.get('exc', '?')}: {reason}"


def per_file(results):
    rows = collections.OrderedDict()
    for r in results:
        row = rows.setdefault(r["file"], collections.Counter())
        row[outcome(r)] += 1
        row["cases"] += 1
    return rows


def rate(row):
    applicable = row["pass"] + row["fail"]
    return row["pass"] / applicable if applicable else None


def markdown(results, backend, listed, title=None):
    rows = per_file(results)
    out = [f"### {title or 'JAX tests through rlx_jax.jit(backend=%r)' % backend}", "",
           "| file | cases (of listed) | passed | failed | rate | JAX skips | no rlx_jax "
           "program | fail under jax.jit too | API differences |",
           "|---|---|---|---|---|---|---|---|---|"]
    total = collections.Counter()
    for name, row in rows.items():
        total.update(row)
        out.append(_row(name, row, listed.get(name)))
    out.append(_row("**all**", total, sum(listed.get(n, 0) for n in rows)))
    bad = [r for r in results if outcome(r) == "fail"]
    if bad:
        out += ["", f"Failures ({len(bad)}), by first error line:", ""]
        groups = collections.defaultdict(list)
        for r in bad:
            groups[category(r)].append(r)
        for cat, rs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            where = next((r["where"] for r in rs if r.get("where")), None)
            cases = ", ".join(f"{r['file']}.{r['case']}" for r in rs[:3])
            more = f" (+{len(rs) - 3} more)" if len(rs) > 3 else ""
            out.append(f"- {len(rs)} × `{cat}`" + (f" at {where}" if where else "") +
                       f": {cases}{more}")
    api = [r for r in results if outcome(r) == "api"]
    if api:
        out += ["", f"API differences ({len(api)}): the test reads JAX's compiler text "
                    f"(`.lower().as_text()`: rlx_jax gives its IR), JAX's dispatch and "
                    f"compile counters (jtu.count_*) or a jax.stages attribute, or defines "
                    f"its primitives by MLIR lowerings (mlir.register_lowering):",
                ""]
        out += [f"- {r['file']}.{r['case']}: `{category(r)}`" for r in api[:20]]
    apart = [r for r in results if outcome(r) == "jax-fails"]
    if apart:
        out += ["", f"Failing under plain jax.jit on this machine too ({len(apart)}):", ""]
        out += [f"- {r['file']}.{r['case']}: `{category(r)}`" for r in apart[:20]]
    skips = collections.Counter(re.sub(r"\d+", "N", r.get("reason") or "")[:120]
                                for r in results if r["status"] == "skip")
    if skips:
        out += ["", "JAX's own skips, by reason:", ""]
        out += [f"- {n} × {why}" for why, n in skips.most_common(12)]
    return "\n".join(out) + "\n"


def _row(name, row, listed):
    r = rate(row)
    shown = "–" if r is None else f"{100 * r:.2f}%"
    return (f"| {name} | {row['cases']} ({listed if listed is not None else '?'}) | "
            f"{row['pass']} | {row['fail']} | {shown} | {row['skip']} | {row['no-rlx']} | "
            f"{row['jax-fails']} | {row['api']} |")


def combined(runs):
    """One table for several runs ({label: results}): per file, each run's passed/applicable
    and rate, then the cases reported apart in the first run."""
    labels = list(runs)
    rows = {label: per_file(rs) for label, rs in runs.items()}
    files = list(dict.fromkeys(f for r in rows.values() for f in r))
    out = ["| file | " + " | ".join(labels) + " | JAX skips / no rlx_jax program / API "
           "differences (" + labels[0] + ") |", "|---" * (len(labels) + 2) + "|"]
    total = {label: collections.Counter() for label in labels}
    for f in files + ["**all**"]:
        cells = []
        for label in labels:
            row = rows[label].get(f, collections.Counter()) if f != "**all**" else total[label]
            if f != "**all**":
                total[label].update(row)
            r = rate(row)
            cells.append("–" if r is None else
                         f"{row['pass']}/{row['pass'] + row['fail']} ({100 * r:.2f}%)")
        first = rows[labels[0]].get(f, collections.Counter()) if f != "**all**" \
            else total[labels[0]]
        out.append(f"| {f} | " + " | ".join(cells) +
                   f" | {first['skip']} / {first['no-rlx']} / {first['api']} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":       # python -m rlx_jax.conformance.report LABEL=results.jsonl ...
    import json
    import sys
    runs = {}
    for arg in sys.argv[1:]:
        label, path = arg.split("=", 1)
        found = {}                   # a results file appended to by --resume: the last line wins
        with open(path) as f:
            for line in f:
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:      # a line a stopped run left unfinished
                    continue
                found[(r["file"], r["case"])] = r
        runs[label] = list(found.values())
    print(combined(runs))
