#!/usr/bin/env python3
# fsdp2_train.py: PyTorch's own FSDP2 on the plan shardplan exported — the ground truth beside shardplan's
# predictions (issue 21). Builds a Hugging Face causal LM from a config.json with random weights, wraps it with the
# script `shardplan plan --export fsdp2` wrote (its apply_plan: fully_shard per unit, prefetch lists, activation
# checkpointing, mixed precision), trains a few steps with AdamW on random tokens and writes a JSON document
# (shardplan.fsdp2-measurement/v1): the median step time and CUDA memory peaks (torch.cuda.max_memory_allocated and
# max_memory_reserved) over the steps after warm-up, and over all steps.
#
#   python3 -m torch.distributed.run --standalone --nproc_per_node 1 benchmarks/fsdp2_train.py \
#       --config examples/hf/llama3.2-1b.json --plan-script fsdp2_plan.py --seq-len 2048 --micro-batch 2 \
#       --steps 6 --warmup 2 --out fsdp2.json
#
# Exit status: 0 measured; 2 bad arguments (one line naming what); 77 no usable CUDA device or no FSDP2 in this
# torch (nothing measured, the reason on one line, as meson's SKIP); 1 anything else. --check-only stops before
# CUDA: it reads the arguments, the config and the plan script's tables (a CPU dry run needs no GPU and no torch).
import argparse
import importlib.machinery
import importlib.util
import json
import os
import re
import statistics
import sys
import time

SKIP = 77


def fail(message, status=2):
    print(f"fsdp2_train: {message}", file=sys.stderr)
    sys.exit(status)


def parse_args():
    parser = argparse.ArgumentParser(prog="fsdp2_train.py")
    parser.add_argument("--config", required=True, help="Hugging Face config.json of the model (random weights)")
    parser.add_argument("--plan-script", required=True, help="fsdp2_plan.py from `shardplan plan --export fsdp2`")
    parser.add_argument("--seq-len", type=int, required=True)
    parser.add_argument("--micro-batch", type=int, required=True)
    parser.add_argument("--steps", type=int, default=6, help="steps in all, warm-up included")
    parser.add_argument("--warmup", type=int, default=2, help="first steps left out of the medians and peaks")
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--check-only", action="store_true", help="check the inputs, then stop (no torch needed)")
    args = parser.parse_args()
    for name in ("seq_len", "micro_batch", "steps"):
        if getattr(args, name) < 1:
            fail(f"--{name.replace('_', '-')}: expected at least 1, got {getattr(args, name)}")
    if not 0 <= args.warmup < args.steps:
        fail(f"--warmup: expected 0 to --steps - 1 ({args.steps - 1}), got {args.warmup}")
    return args


def read_config(path):
    try:
        with open(path) as stream:
            config = json.load(stream)
    except OSError as error:
        fail(f"{path}: cannot read ({error.strerror})")
    except ValueError as error:
        fail(f"{path}: not JSON ({error})")
    for key in ("model_type", "vocab_size", "hidden_size", "num_hidden_layers"):
        if key not in config:
            fail(f"{path}: field '{key}' missing (expected a Hugging Face config.json)")
    return config


def load_plan_script(path):
    """The exported module: its tables are read here, its apply_plan later (it imports torch only when called)."""
    if not os.path.isfile(path):
        fail(f"{path}: no such plan script")
    loader = importlib.machinery.SourceFileLoader("shardplan_fsdp2_plan", path)  # any file name, .py or not
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    try:
        loader.exec_module(module)
    except Exception as error:  # a broken export is this script's finding, reported in one line
        fail(f"{path}: does not load ({type(error).__name__}: {error})")
    for name in ("apply_plan", "PLANNED_GROUPS", "FULL_CHECKPOINT_LAYERS", "SELECTIVE_CHECKPOINT_LAYERS",
                 "PLANNED_WORLD_SIZE"):
        if not hasattr(module, name):
            fail(f"{path}: has no {name} (not a `shardplan plan --export fsdp2` script?)")
    return module


def fsdp_facts(model, torch):
    """What FSDP2 actually applied, read after the steps (its dtypes resolve at lazy init, the first forward): how
    many fully_shard groups, the policy as given, the dtypes one parameter really uses, checkpoint wrappers. Note
    [FSDP2 reduce dtype]: MixedPrecisionPolicy(reduce_dtype=None) reduced in param_dtype in earlier torch releases
    and follows the gradient's dtype in later ones (its docstring in torch/distributed/fsdp/_fully_shard/_fsdp_api.py
    says each), so the resolved reduce dtype is recorded, not inferred from the policy."""
    facts = {"fsdp_modules": 0, "checkpoint_wrappers": 0, "policy": None, "resolved": None}
    try:
        from torch.distributed.fsdp import FSDPModule
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper
    except ImportError as error:
        facts["error"] = str(error)
        return facts
    for module in model.modules():
        if isinstance(module, CheckpointWrapper):
            facts["checkpoint_wrappers"] += 1
        if isinstance(module, FSDPModule):
            facts["fsdp_modules"] += 1
            try:  # private API: read it when it is there, say so when not
                group = module._get_fsdp_state()._fsdp_param_group
                if group is not None and facts["policy"] is None:
                    facts["policy"] = repr(group.mp_policy)
                    param = group.fsdp_params[0]
                    facts["resolved"] = {name: str(getattr(param, name, "?"))
                                         for name in ("orig_dtype", "param_dtype", "reduce_dtype")}
            except (AttributeError, IndexError) as error:
                facts["read_error"] = f"{type(error).__name__}: {error}"
    return facts


def main():
    args = parse_args()
    config = read_config(args.config)
    plan = load_plan_script(args.plan_script)
    if args.check_only:
        print(f"fsdp2_train: inputs fine: {config['model_type']} with {config['num_hidden_layers']} layers, "
              f"plan of {len(plan.PLANNED_GROUPS)} units, {len(plan.FULL_CHECKPOINT_LAYERS)} fully checkpointed "
              f"and {len(plan.SELECTIVE_CHECKPOINT_LAYERS)} selectively checkpointed layers")
        return 0
    try:
        import torch
        import torch.distributed as dist
    except ImportError as error:
        fail(f"no torch here ({error})", SKIP)
    # FSDP2's fully_shard is exported from torch.distributed.fsdp since torch 2.6 (the export's requirement).
    version = tuple(int(part) for part in re.findall(r"\d+", torch.__version__)[:2])
    if version < (2, 6):
        fail(f"torch {torch.__version__} has no FSDP2 (torch.distributed.fsdp.fully_shard needs torch >= 2.6; "
             f"the lent GPU machine has 2.11)", SKIP)
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except Exception as error:  # a broken install fails in many ways; one line says which
        fail(f"torch {torch.__version__}: importing FSDP2 failed ({type(error).__name__}: {error})", SKIP)
    if not torch.cuda.is_available():
        fail(f"no usable CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)", SKIP)
    try:
        import transformers
    except ImportError as error:
        fail(f"no transformers here ({error})", SKIP)

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl")
    torch.manual_seed(args.seed)
    fields = {k: v for k, v in config.items() if k != "model_type"}
    hf_config = transformers.AutoConfig.for_model(config["model_type"], **fields)
    hf_config.use_cache = False
    with torch.device("cuda"):
        model = transformers.AutoModelForCausalLM.from_config(hf_config, attn_implementation="sdpa")
    model = model.float()  # fp32 sharded parameters: FSDP2's mixed precision casts them for compute
    parameters = sum(p.numel() for p in model.parameters())
    plan.apply_plan(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    generator = torch.Generator(device="cuda").manual_seed(args.seed)
    vocab = config["vocab_size"]

    step_times, losses, peaks = [], [], []
    warmup_peaks = (0, 0)
    torch.cuda.reset_peak_memory_stats()
    for step in range(args.steps):
        if step == args.warmup:
            warmup_peaks = (torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved())
            torch.cuda.reset_peak_memory_stats()  # steady state: optimizer states exist, allocator is warm
        tokens = torch.randint(0, vocab, (args.micro_batch, args.seq_len), device="cuda", generator=generator)
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        step_times.append(time.perf_counter() - start)
        losses.append(loss.item())
        peaks.append((torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()))
    facts = fsdp_facts(model, torch)
    measured = step_times[args.warmup:]
    median = statistics.median(measured)
    document = {
        "schema": "shardplan.fsdp2-measurement/v1",
        "torch_version": torch.__version__, "transformers_version": transformers.__version__,
        "device": torch.cuda.get_device_name(), "world_size": dist.get_world_size(),
        "config": args.config, "plan_script": args.plan_script, "parameters": parameters,
        "seq_len": args.seq_len, "micro_batch": args.micro_batch, "steps": args.steps, "warmup_steps": args.warmup,
        "attn_implementation": getattr(model.config, "_attn_implementation", "sdpa"),
        "fsdp": facts,
        "step_times_s": step_times, "losses": losses,
        "step_time_s": median, "tokens_per_s": args.micro_batch * args.seq_len / median,
        # After warm-up (steady state) and over every step, warm-up included.
        "max_memory_allocated_bytes": peaks[-1][0], "max_memory_reserved_bytes": peaks[-1][1],
        "all_steps_max_memory_allocated_bytes": max(warmup_peaks[0], peaks[-1][0]),
        "all_steps_max_memory_reserved_bytes": max(warmup_peaks[1], peaks[-1][1]),
    }
    if dist.get_rank() == 0:
        with open(args.out, "w") as stream:
            json.dump(document, stream, indent=1)
        print(f"fsdp2_train: median step {median:.4f} s, max allocated {peaks[-1][0] / 2**30:.2f} GiB, "
              f"max reserved {peaks[-1][1] / 2**30:.2f} GiB, losses {[round(x, 3) for x in losses]}")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
