# The module tree of an nn.Module: each module's path and class, its parameters (shapes, dtypes), and the wrap
# candidates — the repeated composite classes transformer_auto_wrap_policy would be given.
import collections

import torch

# Containers hold modules without a forward of their own; FSDP users never name them as the transformer layer class.
CONTAINER_CLASSES = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


def class_name(module):
    return type(module).__module__ + "." + type(module).__qualname__


def module_tree(model):
    """Every module in definition order: path, class, and its own (not its children's) parameters."""
    tree = []
    for path, module in model.named_modules():
        params = [{"name": name, "shape": list(param.shape), "dtype": str(param.dtype).replace("torch.", "")}
                  for name, param in module.named_parameters(recurse=False)]
        tree.append({"path": path, "class": class_name(module), "parameters": params})
    return tree


def _has_parameters(module):
    return any(True for _ in module.parameters())


def _is_composite(module):
    """A module with children that is not a bare container: a transformer block, an MLP, a patch-merging layer."""
    return not isinstance(module, CONTAINER_CLASSES) and any(True for _ in module.children())


def wrap_candidate_classes(model):
    """The classes transformer_auto_wrap_policy would take: composite, with parameters, and at least two instances
    not nested inside an instance of another such repeated class (ViT's EncoderBlock, Swin's SwinTransformerBlock and
    PatchMerging, a Llama decoder layer — not the LayerNorm or Linear inside them, nor a container)."""
    modules = dict(model.named_modules())
    counts = collections.Counter(class_name(m) for m in modules.values()
                                 if _is_composite(m) and _has_parameters(m))
    repeated = {name for name, count in counts.items() if count >= 2}

    def outermost(path):
        # No proper ancestor's class is a repeated one.
        parts = path.split(".") if path else []
        for cut in range(1, len(parts)):
            if class_name(modules[".".join(parts[:cut])]) in repeated:
                return False
        return True

    top = collections.Counter(class_name(m) for path, m in modules.items()
                              if class_name(m) in repeated and path and outermost(path))
    return sorted(name for name, count in top.items() if count >= 2)


def wrap_instances(model, candidate_classes):
    """Paths of the outermost instances of the candidate classes, in definition order."""
    chosen = []
    for path, module in model.named_modules():
        if not path or class_name(module) not in candidate_classes:
            continue
        if any(path.startswith(parent + ".") for parent in chosen):
            continue
        chosen.append(path)
    return chosen


def parameter_groups(model, instance_paths, execution_order):
    """The model as an ordered list of parameter groups, each a future ModelSpec layer: one per wrap instance (all its
    parameters) and one per other module holding parameters directly (its own only), in the order the modules first
    ran in forward (modules that never ran keep their definition order, after those that did)."""
    instances = set(instance_paths)
    groups = []
    for path, module in model.named_modules():
        inside = any(path.startswith(parent + ".") for parent in instances)
        if inside:
            continue
        # A wrap instance takes all its parameters; any other module its own (the root's: ViT's class_token).
        params = list(module.named_parameters(recurse=path in instances))
        if not params:
            continue
        groups.append({"path": path, "class": class_name(module), "is_block": path in instances,
                       "tensors": [{"name": name, "shape": list(p.shape),
                                    "dtype": str(p.dtype).replace("torch.", "")} for name, p in params]})
    rank = {path: index for index, path in enumerate(execution_order)}
    never = len(rank)
    return sorted(groups, key=lambda group: rank.get(group["path"], never))  # stable: definition order within ties
