#!/usr/bin/env python3
"""Writes the error bands of the published-runs check into costmodel/error_band_data.cpp, or checks that file.

Usage: error_bands.py [--shardplan PATH] [--csv dev-runs.csv] [--out FILE] (--write | --check)
Runs every row of dev-runs.csv through run_dev_set.py's simulation and groups the residuals (Note [Error bands] in
costmodel/error_band.h): by GPU class (the catalog name before its first '-': A100-40GB and A100-80GB are "A100") and
run kind ("single-node pre-training" when the row's `nodes` is 1, else "multi-node pre-training"; every row of the set
is a pre-training run: llm-foundry's pretrain YAMLs, torchtitan's and the IBM blog's Llama pre-training), each class
over all kinds, and the whole set. Per group and metric: the runs, the median |error| and the largest underestimate.
Step-time error = predicted / published step - 1; memory error = predicted / published reserved peak - 1, on the rows
that publish memory. --check exits 1 (and prints a diff) when the committed file differs from what the runs give now.
"""
import argparse, difflib, os, statistics, sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import run_dev_set  # noqa: E402

OUT = os.path.join(HERE, "..", "..", "costmodel", "error_band_data.cpp")


def gpu_class(gpu):
    return gpu.split("-")[0]


def run_kind(result):
    return ("multi-node" if result["nodes"] > 1 else "single-node") + " pre-training"


def band(errors):
    """(runs, median |error|, largest underestimate), rounded to 0.01 % so the file changes only with the errors."""
    return (len(errors), round(statistics.median(abs(e) for e in errors), 4), round(max(0.0, -min(errors)), 4))


def render(results, failed):
    step = [(r, r["err"]) for r in results]
    memory = [(r, r["pred_mem_gib"] / r["pub_mem_gib"] - 1) for r in results if r["pub_mem_gib"]]
    groups = []
    for metric, residuals in (("step_time", step), ("memory", memory)):
        keys = sorted({(gpu_class(r["gpu"]), run_kind(r)) for r, _ in residuals})
        for cls, kind in keys:
            groups.append((metric, cls, kind, band([e for r, e in residuals
                                                    if gpu_class(r["gpu"]) == cls and run_kind(r) == kind])))
        for cls in sorted({cls for cls, _ in keys}):
            groups.append((metric, cls, "", band([e for r, e in residuals if gpu_class(r["gpu"]) == cls])))
        groups.append((metric, "", "", band([e for _, e in residuals])))
    classes = {}
    for r in results:
        classes.setdefault(gpu_class(r["gpu"]), set()).add(r["gpu"])
    lines = [
        "// The published-runs check's error bands: written by benchmarks/published-runs/error_bands.py --write, do "
        "not edit.",
        '#include "error_band.h"',
        "",
        "namespace shardplan {",
        "",
        f"// Note [Error bands] (error_band.h): {len(results)} rows of benchmarks/published-runs/dev-runs.csv, "
        f"{len(failed)} failed.",
        "std::vector<ErrorBandGroup> published_error_band_groups() {",
        "  // metric, GPU class (\"\": any), run kind (\"\": any), runs, median |error|, largest underestimate",
        "  return {",
    ]
    for metric, cls, kind, (runs, median, under) in groups:
        lines.append(f'      {{ErrorMetric::{metric}, "{cls}", "{kind}", {runs}, {median:.4f}, {under:.4f}}},')
    lines += ["  };", "}", "", "// The published GPU names each class holds.",
              "std::vector<GpuClass> published_gpu_classes() {", "  return {"]
    for cls in sorted(classes):
        names = ", ".join(f'"{name}"' for name in sorted(classes[cls]))
        lines.append(f'      {{"{cls}", {{{names}}}}},')
    lines += ["  };", "}", "", "}  // namespace shardplan", ""]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardplan", default=os.path.join(HERE, "..", "..", "build", "shardplan"))
    ap.add_argument("--csv", default=os.path.join(HERE, "dev-runs.csv"))
    ap.add_argument("--out", default=OUT)
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true")
    mode.add_argument("--check", action="store_true")
    args = ap.parse_args()
    results, failed = run_dev_set.run_rows(args.shardplan, args.csv)
    if failed:
        print("rows failed: " + ", ".join(failed), file=sys.stderr)
        return 1
    text = render(results, failed)
    if args.write:
        with open(args.out, "w") as f:
            f.write(text)
        return 0
    committed = open(args.out).read() if os.path.exists(args.out) else ""
    if committed == text:
        print(f"{os.path.relpath(args.out)} matches the {len(results)} published runs")
        return 0
    sys.stdout.writelines(difflib.unified_diff(committed.splitlines(True), text.splitlines(True), "committed",
                                               "from the published runs now"))
    print("\nthe error bands are stale: run benchmarks/published-runs/error_bands.py --write", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
