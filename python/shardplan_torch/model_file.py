# Assembles the `shardplan.model/v1` document of an nn.Module (costmodel/model_json.cpp reads it) and writes it.
import json
import os
import tempfile

import torch

from . import measure
from .module_tree import class_name, module_tree, parameter_groups, wrap_candidate_classes, wrap_instances

SCHEMA = "shardplan.model/v1"


def _attention_heads(block):
    """Heads of the block's attention (nn.MultiheadAttention.num_heads, Swin's ShiftedWindowAttention.num_heads, a
    hand-written n_heads); None when none is found."""
    for module in block.modules():
        for attribute in ("num_heads", "n_heads", "num_attention_heads"):
            value = getattr(module, attribute, None)
            if isinstance(value, int) and value > 0:
                return value
    return None


def _layer_kind(module, is_block):
    if is_block:
        return "transformer_block"
    if isinstance(module, torch.nn.Embedding):
        return "embedding"
    if "norm" in type(module).__name__.lower():
        return "norm"
    return "other"


def _block_layer(group, block, samples, model_tokens, causal):
    terms = measure.per_token_terms(samples, model_tokens)
    first = samples[0]
    heads = _attention_heads(block)
    # The block input, per model token: what full recompute keeps (torch.utils.checkpoint saves the inputs).
    input_elements = first["block_tokens"] * first["hidden"] / (model_tokens * first["scale"])
    layer = {
        "name": group["path"], "class": group["class"], "kind": "transformer_block", "tensors": group["tensors"],
        "matmul_flops_per_token": terms["flops"][0],
        "attention_flops_per_token_per_position": terms["flops"][1],
        "activation_elements_per_token": terms["elements"][0],
        "activation_score_elements_per_token_per_position": terms["elements"][1],
        "activation_mask_bytes_per_token": terms["bytes"][0],
        "activation_score_mask_bytes_per_token_per_position": terms["bytes"][1],
        "checkpoint_elements_per_token": input_elements,
        "causal": causal,
        "measured": {"activation_dtype": first["dtype"], "samples": [
            {"model_tokens": model_tokens * s["scale"], "block_tokens": s["block_tokens"], "batch": s["batch"],
             "forward_flops": s["flops"], "saved_floating_bytes": s["saved_floating_bytes"],
             "saved_other_bytes": s["saved_other_bytes"]} for s in samples]},
    }
    if heads:
        layer["attention_heads"] = heads
    return layer


def _other_layer(group, module, whole, model_tokens, batch):
    kept = whole["saved"].get(group["path"])
    per_token = lambda value: value / (batch * model_tokens)  # noqa: E731
    layer = {"name": group["path"], "class": group["class"], "kind": _layer_kind(module, False),
             "tensors": group["tensors"],
             "matmul_flops_per_token": per_token(whole["flops"].get(group["path"], 0.0)),
             "activation_elements_per_token": per_token(kept.floating_elements) if kept else 0.0,
             "activation_mask_bytes_per_token": per_token(kept.other_bytes) if kept else 0.0}
    return layer


def describe_model(model, example_input, name=None, wrap_classes=None, causal=False, source=None, progress=None):
    """The shardplan.model/v1 document of `model` run on `example_input` (a tensor or a tuple of positional inputs,
    batch first; its size is the model's default sequence). wrap_classes: the candidate classes' qualified names
    (default: wrap_candidate_classes). causal: the blocks' attention is causal, so a kernel may skip the masked half.
    A model and input on the meta device (meta_trace.on_meta) are measured from shapes alone. progress: called with
    a line of text at each stage (scripts/import-torch prints them to stderr)."""
    progress = progress or (lambda line: None)
    model = model.float() if any(p.is_floating_point() and p.dtype != torch.float32 for p in model.parameters()) \
        else model
    candidates = list(wrap_classes) if wrap_classes else wrap_candidate_classes(model)
    if not candidates:
        raise ValueError("shardplan_torch: no repeated module class to wrap; name one with wrap_classes")
    block_paths = wrap_instances(model, set(candidates))
    if not block_paths:
        raise ValueError(f"shardplan_torch: the model has no module of the classes {candidates}")
    groups = parameter_groups(model, block_paths, [])
    progress(f"forward of the whole model ({len(block_paths)} blocks of {', '.join(candidates)})")
    whole = measure.whole_model_pass(model, example_input, [g["path"] for g in groups], block_paths)
    groups = parameter_groups(model, block_paths, whole["order"])
    modules = dict(model.named_modules())

    ran = [path for path in whole["order"] if path in whole["inputs"]]
    if not ran:
        raise ValueError("shardplan_torch: no wrap candidate ran in forward")
    first_input = whole["inputs"][ran[0]][0]
    batch = first_input.shape[0]
    model_tokens, hidden = measure.token_layout(first_input)

    measured = {}  # one measurement per distinct block: class, parameter shapes and input shape
    layers = []
    for group in groups:
        module = modules[group["path"]]
        if not group["is_block"]:
            layers.append(_other_layer(group, module, whole, model_tokens, batch))
            continue
        args = whole["inputs"].get(group["path"])
        if args is None:
            raise ValueError(f"shardplan_torch: block {group['path']!r} did not run in forward")
        key = (group["class"], tuple(tuple(t["shape"]) for t in group["tensors"]), tuple(args[0].shape))
        if key not in measured:
            progress(f"measuring block {group['path']} ({group['class'].rsplit('.', 1)[-1]}) alone at 1x and "
                     f"{2 if args[0].dim() == 3 else 4}x the tokens")
            scales = (1, 2) if args[0].dim() == 3 else (1, 4)
            shared = measure.shared_inputs(whole["inputs"], group["path"])
            samples = [measure.measure_block(module, args, scale, shared) for scale in scales]
            measured[key] = _block_layer(group, module, samples, model_tokens, causal)
        layer = dict(measured[key])
        layer["name"] = group["path"]
        layers.append(layer)

    first_block = modules[ran[0]]
    embedding = next((m for m in model.modules() if isinstance(m, torch.nn.Embedding)), None)
    document = {
        "schema": SCHEMA,
        "name": name or class_name(model).rsplit(".", 1)[-1],
        "hidden_size": int(hidden),
        "num_heads": int(_attention_heads(first_block) or 1),
        "default_seq_len": int(model_tokens),
        "params": sum(p.numel() for p in model.parameters()),
        "source": dict(source or {}, torch=torch.__version__,
                       example_input=[list(t.shape) for t in
                                      (example_input if isinstance(example_input, tuple) else (example_input,))]),
        "wrap_candidates": candidates,
        "layers": layers,
        "module_tree": module_tree(model),
    }
    if embedding is not None:
        document["vocab_size"] = int(embedding.num_embeddings)
    return document


def write_model_file(document, path):
    """Writes the document whole or not at all (a temporary file renamed into place)."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, suffix=".tmp")
    try:
        with os.fdopen(handle, "w") as out:
            json.dump(document, out, indent=1)
            out.write("\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(temporary, 0o666 & ~umask)  # mkstemp's file is private; the model file is an ordinary one
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
