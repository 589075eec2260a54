#!/usr/bin/env python3
# One rank of scripts/check-exports: builds the shrunken Hugging Face model the plan was made for (its config.json,
# random weights, the same seed on every rank), hands it to the exported script's apply_plan, and trains STEPS steps
# of random tokens; prints "loss <step> <value>" per step from rank 0 and fails on a non-finite loss. Run under
# torchrun: train_export.py --config CONFIG --plan-script fsdp2_plan.py --device cpu|cuda [--steps 2] [--seq-len 64]
import argparse
import importlib.machinery
import importlib.util
import json
import math
import os
import sys
import tempfile


def load_plan(path):
    loader = importlib.machinery.SourceFileLoader("shardplan_fsdp2_plan", path)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def build_model(config_path, plan, torch, transformers):
    with open(config_path, encoding="utf-8") as stream:
        fields = json.load(stream)
    model_type = fields.pop("model_type")
    fields.pop("architectures", None)
    config = transformers.AutoConfig.for_model(model_type, **fields)
    torch.manual_seed(0)  # every rank builds the same weights: FSDP and TP shard each rank's own copy
    model = transformers.AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    quantization = plan.quantization_config() if hasattr(plan, "quantization_config") else None
    if quantization is None:
        return model
    # QLoRA: bitsandbytes quantizes while loading, so the random weights go through from_pretrained once.
    with tempfile.TemporaryDirectory(prefix=f"check-exports-{os.environ.get('RANK', '0')}-") as directory:
        model.save_pretrained(directory)
        return transformers.AutoModelForCausalLM.from_pretrained(
            directory, quantization_config=quantization, torch_dtype=getattr(torch, plan.FROZEN_DTYPE))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--plan-script", required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), required=True)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--seq-len", type=int, default=64)
    args = parser.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn.functional as functional
    import transformers

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    plan = load_plan(args.plan_script)
    model = build_model(args.config, plan, torch, transformers)
    trained = plan.apply_plan(model, device_type=args.device)
    parameters = [p for p in trained.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(parameters, lr=1e-4)
    vocab = model.config.vocab_size
    with open(args.plan_script, encoding="utf-8") as stream:
        float8_all_gather = "enable_fsdp_float8_all_gather=True" in stream.read()
    generator = torch.Generator().manual_seed(1)  # the same tokens on every rank (a TP group must see one batch)
    for step in range(args.steps):
        tokens = torch.randint(0, vocab, (1, args.seq_len), generator=generator).to(args.device)
        if plan.TENSOR_PARALLEL_DEGREE > 1:
            # The export keeps the logits sharded over the vocabulary (lm_head ColwiseParallel, use_local_output
            # False): the loss is taken under loss_parallel, as torchtitan does.
            from torch.distributed.tensor.parallel import loss_parallel

            with loss_parallel():
                logits = trained(input_ids=tokens).logits
                loss = functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(), tokens[:, 1:].flatten())
                loss.backward()
            loss = loss.full_tensor() if hasattr(loss, "full_tensor") else loss
        else:
            loss = trained(input_ids=tokens, labels=tokens).loss
            loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if float8_all_gather:  # what the script's comment asks for after each optimizer step
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

            precompute_float8_dynamic_scale_for_fsdp(trained)
        value = float(loss.detach().float().cpu())
        if dist.get_rank() == 0:
            print(f"loss {step} {value:.4f}", flush=True)
        if not math.isfinite(value):
            print(f"non-finite loss {value} at step {step}", file=sys.stderr)
            return 1
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
