#!/usr/bin/env python3
"""density-report.py RUNTIME=DIR... — the density suites' figures of one or more runs, side by side.

Each DIR (several may name one RUNTIME) is the results directory of a run of
`FOCUS=density test/node-e2e/run.sh` (the
e2e_node suite's --report-dir): it reads the perf files the suite writes there
(performance-{latency,throughput,cpu,memory}-*-<test>.json, test/e2e_node benchmark_util.go),
junit.xml for the asserting specs' verdicts and runtime.txt for the runtime's version, and
prints Markdown: one row per spec and runtime, with

  p50/p90/p99   pod startup latency (creation to Running seen by a watch), seconds
  lag           the batch's lag: first creation to last Running (podsNr / throughput)
  pods/min      creation throughput (podsNr / lag)
  rt CPU        the runtime's cgroup, cores: p50 / p95 of the 0.5 s samples (10 s for
                Resource-usage) over the measured window
  rt RSS        the runtime's cgroup, MiB, at the last sample
  kubelet       the same for the kubelet (p95 cores, RSS MiB)
  verdict       the spec's junit result; the asserting specs ([Flaky] upstream) check the
                limits, the [Benchmark] ones only record

Two specs of one run may write the same file name (the asserting "10 pods with 0s interval"
and its [Benchmark] twin: both density_create_batch_10_0_0_5), so density-compare.sh runs
the asserting specs and the [Benchmark] ones apart; rows are told apart by the "desc" label.
"""
import glob
import json
import os
import re
import sys
import xml.etree.ElementTree as ET


def load(path):
    with open(path) as f:
        return json.load(f)


def items(doc, **labels):
    return [i for i in doc.get("dataItems", []) if all(i["labels"].get(k) == v for k, v in labels.items())]


def spec_key(test):
    """(kind, pods, background, interval ms, qps) of a test name, for ordering and titles."""
    m = re.match(r"density_create_(batch|sequence)_(\d+)_(\d+)_(\d+)_(\d+)$", test)
    if m:
        return (m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)))
    m = re.match(r"resource_(\d+)$", test)
    if m:
        return ("resource", int(m.group(1)), 0, 0, 0)
    return ("other", 0, 0, 0, 0)


def title(key):
    kind, pods, bg, interval, qps = key
    if kind == "batch":
        t = f"batch of {pods}, {interval} ms apart"
        return t + (f", API QPS {qps}" if qps != 5 else "")
    if kind == "sequence":
        return f"{pods} in sequence, {bg} in the background"
    if kind == "resource":
        return f"steady, {pods} pods (10 min)"
    return "?"


def verdicts(junit):
    """desc -> passed/FAILED/skipped, from ginkgo's junit file."""
    out = {}
    if not os.path.exists(junit):
        return out
    for c in ET.parse(junit).getroot().iter("testcase"):
        name = c.get("name", "")
        if not name.startswith("[It] "):
            continue
        if c.find("skipped") is not None:
            continue
        failed = c.find("failure") is not None or c.find("error") is not None
        out[name] = "FAILED" if failed else "passed"
    return out


def spec_kind(desc):
    return "benchmark" if desc.endswith("[Benchmark]") else "asserting"


def run_figures(d, figs):
    """adds the figures of one results directory to figs, (test name, kind) -> figures."""
    for path in glob.glob(os.path.join(d, "performance-*.json")):
        kind = os.path.basename(path).split("-")[1]
        doc = load(path)
        labels = doc.get("labels") or {}
        test = labels.get("test", "")
        desc = labels.get("desc", "")
        f = figs.setdefault((test, spec_kind(desc)), {"desc": desc})
        if kind == "latency":
            for i in items(doc, datatype="latency"):
                f.update({k: i["data"][k] / 1000 for k in ("Perc50", "Perc90", "Perc99", "Perc100")})
        elif kind == "throughput":
            for i in items(doc, datatype="throughput"):
                f["throughput"] = i["data"]["batch"]
                pods = spec_key(test)[1]
                if i["data"]["batch"] > 0 and pods:
                    f["lag"] = pods / i["data"]["batch"] * 60
        elif kind == "cpu":
            for c in ("runtime", "kubelet"):
                for i in items(doc, resource="cpu", container=c):
                    f[c + "_cpu50"] = i["data"].get("Perc50", 0) / 1000
                    f[c + "_cpu95"] = i["data"].get("Perc95", 0) / 1000
        elif kind == "memory":
            for c in ("runtime", "kubelet"):
                for i in items(doc, resource="memory", container=c):
                    f[c + "_rss"] = i["data"]["rss"]


def num(v, fmt):
    return "" if v is None else fmt.format(v)


def main(args):
    runs = {}  # runtime -> (label, figures, verdicts), in the order of the arguments
    for a in args:
        name, _, d = a.partition("=")
        label, figs, verdict = runs.setdefault(name, (name, {}, {}))
        rt = os.path.join(d, "runtime.txt")
        if os.path.exists(rt):
            m = re.search(r"run\.sh: (.*?), pid", open(rt).read())
            if m:
                label = m.group(1)
        run_figures(d, figs)
        verdict.update(verdicts(os.path.join(d, "junit.xml")))
        runs[name] = (label, figs, verdict)
    runs = [(name, *v) for name, v in runs.items()]
    tests = sorted({t for _, _, figs, _ in runs for t in figs}, key=lambda t: (spec_key(t[0]), t[1]))
    print("| spec | runtime | p50 s | p90 s | p99 s | lag s | pods/min | rt CPU p50 / p95 | rt RSS MiB | kubelet CPU p95 | kubelet RSS MiB | verdict |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for t in tests:
        for name, label, figs, verdict in runs:
            f = figs.get(t)
            if f is None:
                continue
            desc = f.get("desc", "")
            # junit names a spec by its containers' text, its own, then its labels
            v = next((verdict[k] for k in verdict if desc and desc in k), "")
            kind = t[1]
            cpu = ""
            if "runtime_cpu95" in f:
                cpu = "{:.3f} / {:.3f}".format(f["runtime_cpu50"], f["runtime_cpu95"])
            print("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
                title(spec_key(t[0])), label,
                num(f.get("Perc50"), "{:.2f}"), num(f.get("Perc90"), "{:.2f}"), num(f.get("Perc99"), "{:.2f}"),
                num(f.get("lag"), "{:.2f}"), num(f.get("throughput"), "{:.1f}"), cpu,
                num(f.get("runtime_rss"), "{:.1f}"), num(f.get("kubelet_cpu95"), "{:.3f}"),
                num(f.get("kubelet_rss"), "{:.1f}"), (v + " (" + kind + ")") if v else kind))
    # the asserting specs that wrote no figures (they failed before)
    for name, label, figs, verdict in runs:
        descs = {f.get("desc") for f in figs.values()}
        for k, v in sorted(verdict.items()):
            if v == "FAILED" and not any(d and d in k for d in descs):
                print(f"\n{label}: FAILED without figures: {k[5:]}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
