# The --fast path of the torch bridge: the model built without running its initialisers and moved to the meta
# device, so forward runs on shapes alone — FLOPs come from the shapes of each matmul, convolution and attention
# (FlopCounter's formulas), saved bytes from the shapes of what autograd keeps — and nothing is computed. ViT-H/14
# (632 M parameters) takes seconds instead of minutes of CPU forward and backward (issue 36).
import contextlib

import torch


@contextlib.contextmanager
def initialisers_skipped():
    """torch.nn.init's in-place initialisers as no-ops while a model is built: its parameters are left as
    torch.empty made them (fast; their values are never read on the meta device)."""
    names = [name for name in dir(torch.nn.init) if name.endswith("_") and not name.startswith("_")]
    saved = {name: getattr(torch.nn.init, name) for name in names}
    try:
        for name in names:
            setattr(torch.nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, function in saved.items():
            setattr(torch.nn.init, name, function)


def on_meta(model, example_input):
    """The model and example input on the meta device (shapes and dtypes kept, no data)."""
    model = model.to("meta")
    if isinstance(example_input, tuple):
        return model, tuple(t.to("meta") if torch.is_tensor(t) else t for t in example_input)
    return model, example_input.to("meta")


def storage_key(tensor):
    """What identifies a tensor's storage: its address, or on the meta device (where every address is 0) the
    storage object itself."""
    storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
    return storage._cdata if tensor.is_meta else storage.data_ptr()
