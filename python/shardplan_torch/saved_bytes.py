# The bytes autograd keeps for backward while a piece of code runs forward, measured with
# torch.autograd.graph.saved_tensors_hooks (torch >= 1.10): every tensor an op saves for its backward passes through
# the pack hook. Each storage counts once however many ops save it (or views of it), and the model's own parameters
# and buffers count not at all (they are model state, not activations), nor do tensors named as shared.
import torch

from .meta_trace import storage_key


def _storage(tensor):
    # torch >= 2.0 has untyped_storage(); 1.13's storage() is a TypedStorage with the same data_ptr and nbytes.
    storage = tensor.untyped_storage() if hasattr(tensor, "untyped_storage") else tensor.storage()
    return storage_key(tensor), storage.nbytes()


class Kept:
    """What one part of the model keeps: floating-point tensors (activations; elements = bytes / element size) and
    the rest (bool and integer tensors: dropout masks, indices)."""

    def __init__(self):
        self.floating_bytes = 0
        self.floating_elements = 0
        self.other_bytes = 0


class SavedTensors:
    """with SavedTensors(model) as saved: forward(); saved.total (a Kept), or saved.by_part[name] for the parts named
    by setting saved.current while the forward runs (a module-stack hook does)."""

    def __init__(self, model, shared=()):
        # shared: further tensors that are not this part's own activations (inputs every block is handed alike).
        self._state = {_storage(t)[0] for t in list(model.parameters()) + list(model.buffers()) + list(shared)}
        self._seen = set()
        self.current = None
        self.total = Kept()
        self.by_part = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda packed: packed)

    def _pack(self, tensor):
        pointer, nbytes = _storage(tensor)
        if pointer in self._state or pointer in self._seen or nbytes == 0:
            return tensor
        self._seen.add(pointer)
        for kept in (self.total, self.by_part.setdefault(self.current, Kept())):
            if tensor.is_floating_point():
                kept.floating_bytes += nbytes
                kept.floating_elements += nbytes // tensor.element_size()
            else:
                kept.other_bytes += nbytes
        return tensor

    def __enter__(self):
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc):
        return self._hooks.__exit__(*exc)
