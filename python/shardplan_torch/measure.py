# Measurements of the wrap candidates: one forward of the whole model records the order modules run in, each
# candidate's input, and every other parameter group's FLOPs and saved tensors; each distinct candidate is then run
# alone, on inputs of two token counts, for its forward FLOPs (FlopCounter) and the bytes autograd saves
# (SavedTensors), per model token. Two token counts separate the terms linear in the sequence (projections, norms,
# MLPs) from the quadratic ones (attention scores).
import torch

from .flop_count import FlopCounter
from .meta_trace import storage_key
from .saved_bytes import SavedTensors


def whole_model_pass(model, example_input, group_paths, block_paths):
    """One forward of the whole model with autograd recording: the paths of modules in the order they first ran, each
    block's positional inputs, and the FLOPs and saved tensors of each parameter group (by the innermost group module
    running when the op ran; ops of no group go to None)."""
    order, seen, inputs, handles, stack = [], set(), {}, [], []
    groups, blocks = set(group_paths), set(block_paths)
    counter, saved = FlopCounter(), SavedTensors(model)

    def enter(path):
        stack.append(path)
        counter.current = saved.current = path

    def leave():
        stack.pop()
        counter.current = saved.current = stack[-1] if stack else None

    for path, module in model.named_modules():
        def pre_hook(module, args, path=path):
            if path not in seen:
                seen.add(path)
                order.append(path)
            if path in blocks and path not in inputs:
                inputs[path] = tuple(a.detach() if torch.is_tensor(a) else a for a in args)
            if path in groups:
                enter(path)

        def post_hook(module, args, output, path=path):
            if path in groups:
                leave()
        handles.append(module.register_forward_pre_hook(pre_hook))
        handles.append(module.register_forward_hook(post_hook))
    model.train()
    try:
        with counter, saved:
            model(*example_input) if isinstance(example_input, tuple) else model(example_input)
    finally:
        for handle in handles:
            handle.remove()
    return {"order": order, "inputs": inputs, "flops": counter.by_part, "saved": saved.by_part}


def token_layout(tensor):
    """A block input is batch-first and channels-last (b × s × h, or b × H × W × c in Swin): tokens per sample and
    width."""
    if tensor.dim() < 3:
        raise ValueError(f"shardplan_torch: a block input of shape {list(tensor.shape)} has no token dimension; "
                         "expected batch × tokens × hidden (or batch × H × W × channels)")
    tokens = 1
    for extent in tensor.shape[1:-1]:
        tokens *= extent
    return tokens, tensor.shape[-1]


def scaled_input(tensor, scale):
    """A random block input with `scale`× the tokens: the sequence length times scale (b × s × h), or each spatial
    side times √scale (b × H × W × c, scale a square)."""
    spatial = tensor.dim() - 2
    side = round(scale ** (1.0 / spatial))
    if side ** spatial != scale:
        raise ValueError(f"shardplan_torch: cannot scale {spatial} token dimensions by {scale}")
    shape = [tensor.shape[0]] + [extent * side for extent in tensor.shape[1:-1]] + [tensor.shape[-1]]
    if tensor.is_meta:
        return torch.empty(shape, dtype=tensor.dtype, device="meta")
    generator = torch.Generator().manual_seed(0)
    return torch.randn(shape, dtype=tensor.dtype, generator=generator)


def scaled_further_input(tensor, tokens, scale):
    """A block's further input (beyond the hidden states) at `scale`× the tokens: a random tensor whose dimensions
    equal to the token count `tokens` are `scale`× as long (HF's rotary tables 1 × s × head_dim, a mask s × s); one
    with no such dimension is passed as it is."""
    if not torch.is_tensor(tensor) or tokens not in tuple(tensor.shape):
        return tensor
    shape = [extent * scale if extent == tokens else extent for extent in tensor.shape]
    if tensor.is_meta:
        return torch.empty(shape, dtype=tensor.dtype, device="meta")
    if not tensor.is_floating_point():
        return torch.zeros(shape, dtype=tensor.dtype)
    return torch.randn(shape, dtype=tensor.dtype, generator=torch.Generator().manual_seed(1))


def measure_block(block, args, scale, shared=()):
    """One block on a random input `scale`× its captured one: forward FLOPs, saved bytes, tokens per sample.
    shared: indices of further inputs the model hands to every block alike (HF's position_embeddings, computed once
    per forward): what the block saves of them is kept once for the whole model, not per block, so it is not counted
    here (like the parameters)."""
    x = scaled_input(args[0], scale).requires_grad_(args[0].is_floating_point())
    tokens = args[0].shape[1] if args[0].dim() == 3 else None
    rest = tuple(scaled_further_input(a, tokens, scale) if tokens and scale != 1 else a for a in args[1:])
    block.train()
    with FlopCounter() as counter:
        with torch.no_grad():
            block(x, *rest)
    with SavedTensors(block, [rest[i - 1] for i in shared if torch.is_tensor(rest[i - 1])]) as saved:
        out = block(x, *rest)
    first = out[0] if isinstance(out, (tuple, list)) else out
    if not x.is_meta:  # on the meta device (--fast) the saved tensors' shapes are all there is to read
        first.float().sum().backward()  # the saved tensors are the ones backward reads; it runs
        block.zero_grad(set_to_none=True)
    tokens, hidden = token_layout(x)
    return {"scale": scale, "batch": x.shape[0], "block_tokens": tokens, "hidden": hidden, "flops": counter.flops,
            "saved_floating_bytes": saved.total.floating_bytes,
            "saved_floating_elements": saved.total.floating_elements,
            "saved_other_bytes": saved.total.other_bytes, "dtype": str(x.dtype).replace("torch.", "")}


def shared_inputs(inputs, path):
    """Indices of the further inputs of block `path` (whole_model_pass's inputs) that another block was handed too,
    the same tensor: per-forward state the model computes once (HF's rotary position_embeddings)."""
    def pointer(tensor):
        if not torch.is_tensor(tensor) or tensor.numel() == 0:
            return None
        return storage_key(tensor) if tensor.is_meta else tensor.data_ptr()
    mine = inputs[path]
    others = [args for other, args in inputs.items() if other != path]
    return tuple(i for i in range(1, len(mine))
                 if pointer(mine[i]) is not None and
                 any(i < len(args) and pointer(args[i]) == pointer(mine[i]) for args in others))


def linear_fit(x1, y1, x2, y2):
    """y = a + b·x through two points: (a, b)."""
    slope = (y2 - y1) / (x2 - x1)
    return y1 - slope * x1, slope


def per_token_terms(samples, model_tokens):
    """Per model token, as a + b·s in the model's token count s, from two samples at 1× and k× the tokens:
    matmul FLOPs a and attention FLOPs per position b; floating elements and other bytes kept likewise."""
    first, second = samples
    s1, s2 = model_tokens * first["scale"], model_tokens * second["scale"]
    per = lambda sample, key, s: sample[key] / (sample["batch"] * s)  # noqa: E731
    terms = {}
    for key, out in (("flops", "flops"), ("saved_floating_elements", "elements"), ("saved_other_bytes", "bytes")):
        at_model_size = per(first, key, s1)
        linear, quadratic = linear_fit(s1, at_model_size, s2, per(second, key, s2))
        if quadratic < 0 or linear < 0:
            # Not a + b·s with both terms ≥ 0: the block changed behaviour between the two sizes (Swin drops its
            # window shift where the feature map is no larger than a window). Keep what it does at the model's size.
            linear, quadratic = at_model_size, 0.0
        # Measured counts are exact integers, so a term below a billionth of the other is rounding, not a real one.
        scale = max(linear, quadratic * s1, 1.0)
        terms[out] = (0.0 if linear < 1e-9 * scale else linear, 0.0 if quadratic * s1 < 1e-9 * scale else quadratic)
    return terms
