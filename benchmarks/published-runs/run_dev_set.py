#!/usr/bin/env python3
"""Runs every row of dev-runs.csv through `shardplan simulate` and prints published vs predicted step time.

Usage: run_dev_set.py [--shardplan PATH] [--csv dev-runs.csv] [--rows ID,ID] [--json out.json]
--csv multi-d-runs.csv: torchtitan's FSDP x TP x PP and FSDP x CP runs (issue 33's check). They are not dev-set rows:
no constant, error band or headroom reads them (error_bands.py reads dev-runs.csv only).
sp_plan_edit is applied to the default plan that `simulate --json` prints (ac_every=K: full AC on every K-th block,
1-based K-th, K-2K-..., as torchtitan's layer policy counts; last_block_reshard=false: the last block unit keeps its
unsharded params after forward), and the edited plan is simulated again with --plan.
Step-time error = predicted / published - 1, published step = global_batch * seq_len / (pub_tok_s_gpu * gpus).
"""
import argparse, csv, json, os, re, shlex, statistics, subprocess, sys, tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def simulate(shardplan, flags, plan=None):
    cmd = ["nice", "-n", "15", shardplan, "simulate", *flags, "--json"]
    if plan:
        cmd += ["--plan", plan]
    out = subprocess.run(cmd, cwd=HERE, capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"exit {out.returncode}: {' '.join(cmd)}\n{out.stderr.strip()}")
    return json.loads(out.stdout)


def edit_plan(plan, edits):
    blocks = [u for u in plan["units"] if re.search(r"\.(\d+)$", u["name"]) and not u.get("root")]
    for edit in filter(None, edits.split(";")):
        key, value = edit.split("=")
        if key == "ac_every":
            k = int(value)
            for i, unit in enumerate(blocks, start=1):
                if i % k == 0:
                    unit["ac_layers"] = ["full"] * len(unit.get("ac_layers", ["none"]))
        elif key == "last_block_reshard":
            blocks[-1]["reshard_after_forward"] = value == "true"
        else:
            raise ValueError("unknown sp_plan_edit " + edit)
    return plan


def run_rows(shardplan, csv_path, wanted=frozenset(), on_row=None):
    """Simulates every wanted row: (results, failed row ids). on_row(row, result or exception) is called per row."""
    results, errors = [], []
    for row in csv.DictReader(open(csv_path)):
        if wanted and row["row_id"] not in wanted:
            continue
        flags = shlex.split(row["sp_flags"])
        try:
            sim = simulate(shardplan, flags)
            if row.get("sp_plan_edit"):
                plan = edit_plan(sim["plan"], row["sp_plan_edit"])
                with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                    json.dump(plan, f)
                sim = simulate(shardplan, flags, f.name)
                os.unlink(f.name)
        except Exception as e:  # report and go on
            errors.append(row["row_id"])
            if on_row:
                on_row(row, e)
            continue
        gpus = int(row["gpus"])
        pub_step = int(row["global_batch"]) * int(row["seq_len"]) / (float(row["pub_tok_s_gpu"]) * gpus)
        pred_step = sim["step_time_s"]
        pred_tok = int(row["global_batch"]) * int(row["seq_len"]) / (pred_step * gpus)
        if "ranks" in sim:
            # A pipeline plan (`simulate`'s pipeline JSON): torchtitan reports the largest peak over the ranks
            # (its Table 5 footnote), so the largest rank's device peak; no exposed-communication figure.
            exposed_comm_s = 0.0
            reserved_bytes = max(rank["device_peak_bytes"] for rank in sim["ranks"])
            allocated_bytes = max(rank["peak_memory_bytes"] for rank in sim["ranks"])
        else:
            # torchtitan logs the caching allocator's reserved peak (torch.cuda.max_memory_reserved): compare with
            # the simulator's estimate of it (Note [Reserved memory] in planner/simulator.cpp).
            exposed_comm_s = sim["exposed_comm_s"]
            reserved_bytes = sim["reserved_peak_bytes"]
            allocated_bytes = sim["peak_memory_bytes"]
        result = {"row_id": row["row_id"], "gpu": row["gpu"], "nodes": int(row["nodes"]),
                  "err": pred_step / pub_step - 1, "pred_tok_s_gpu": pred_tok,
                  "pred_mfu": sim["mfu"], "exposed_comm_s": exposed_comm_s, "pred_step_s": pred_step,
                  "pub_step_s": pub_step, "pred_mem_gib": reserved_bytes / 2**30, "scope": row["scope"],
                  "pub_mem_gib": float(row["pub_mem_gib"]) if row.get("pub_mem_gib") else None,
                  "alloc_mem_gib": allocated_bytes / 2**30}
        results.append(result)
        if on_row:
            on_row(row, result)
    return results, errors


def print_row(row, result):
    if isinstance(result, Exception):
        print(f"{row['row_id']:6} FAILED: {result}")
        return
    print(f"{row['row_id']:6} {row['gpu']:10} {int(row['gpus']):4} {row['model']:14} {row['seq_len']:>6} "
          f"{float(row['pub_tok_s_gpu']):13.0f} {result['pred_tok_s_gpu']:9.0f} {result['err']:+7.1%} "
          f"{result['pred_mfu']:8.3f} {row['pub_mfu'] or '':>7.7} "
          f"{result['exposed_comm_s'] / result['pred_step_s']:8.1%} {result['pred_mem_gib']:8.1f} "
          f"{row['pub_mem_gib'] or '':>7}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shardplan", default=os.path.join(HERE, "..", "..", "build", "shardplan"))
    ap.add_argument("--csv", default=os.path.join(HERE, "dev-runs.csv"))
    ap.add_argument("--rows", default="")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    wanted = set(filter(None, args.rows.split(",")))
    print(f"{'row':6} {'gpu':10} {'gpus':>4} {'model':14} {'seq':>6} {'pub tok/s/gpu':>13} {'pred':>9} {'err':>7} "
          f"{'pred MFU':>8} {'pub MFU':>7} {'exp.comm':>8} {'pred mem':>8} {'pub mem':>7}")
    results, errors = run_rows(args.shardplan, args.csv, wanted, print_row)
    if results:
        abs_err = [abs(r["err"]) for r in results]
        print(f"\n{len(results)} rows, {len(errors)} failed; median |err| {statistics.median(abs_err):.1%}, "
              f"within 10%: {sum(e <= 0.10 for e in abs_err)}, mean signed {statistics.mean(r['err'] for r in results):+.1%}")
        for gpu in sorted({r["gpu"] for r in results}):
            g = [abs(r["err"]) for r in results if r["gpu"] == gpu]
            print(f"  {gpu:12} n={len(g):3} median |err| {statistics.median(g):.1%}")
        with_memory = [r for r in results if r["pub_mem_gib"]]
        if with_memory:
            mem_err = [r["pred_mem_gib"] / r["pub_mem_gib"] - 1 for r in with_memory]
            print(f"  memory (reserved peak) where published: n={len(mem_err)}, errors "
                  + ", ".join(f"{r['row_id']} {e:+.1%}" for r, e in zip(with_memory, mem_err)))
    if args.json:
        json.dump(results, open(args.json, "w"), indent=1)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
