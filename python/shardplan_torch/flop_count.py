# Forward FLOPs of the matmuls and convolutions a piece of code runs, counted at the ATen level with a
# TorchDispatchMode (torch >= 1.13; torch.utils.flop_counter.FlopCounterMode, its later built-in, counts the same
# ops with the same formulas). One multiply-add is 2 FLOPs.
import math

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _shape(tensor):
    return list(tensor.shape)


def _mm(args):  # (m × k) · (k × n)
    a, b = args[0], args[1]
    return 2.0 * a.shape[0] * a.shape[1] * b.shape[1]


def _addmm(args):  # bias + (m × k) · (k × n)
    return _mm(args[1:3])


def _bmm(args):  # (b × m × k) · (b × k × n)
    a, b = args[0], args[1]
    return 2.0 * a.shape[0] * a.shape[1] * a.shape[2] * b.shape[2]


def _baddbmm(args):
    return _bmm(args[1:3])


def _convolution(args):
    # output elements × (input channels / groups) × kernel elements, one multiply-add each (FlopCounterMode's
    # conv_flop_count; transposed convolutions have the same count with input and output swapped).
    x, w = args[0], args[1]
    transposed = bool(args[6]) if len(args) > 6 else False
    groups = args[8] if len(args) > 8 else 1
    out = _conv_output_shape(x, w, args) if not transposed else _shape(x)
    kernel = math.prod(w.shape[2:])
    in_per_group = w.shape[1] if not transposed else w.shape[0] // groups
    batch_spatial = out[0] * math.prod(out[2:])
    out_channels = w.shape[0] if not transposed else w.shape[1] * groups
    return 2.0 * batch_spatial * out_channels * in_per_group * kernel


def _conv_output_shape(x, w, args):
    stride, padding, dilation = args[3], args[4], args[5]
    spatial = []
    for i, size in enumerate(x.shape[2:]):
        pick = (lambda v: v[i] if len(v) > 1 else v[0])
        spatial.append((size + 2 * pick(padding) - pick(dilation) * (w.shape[2 + i] - 1) - 1) // pick(stride) + 1)
    return [x.shape[0], w.shape[0]] + spatial


def _sdpa(args):
    # softmax(Q·Kᵀ)·V: 2·s_q·s_k·d for Q·Kᵀ and again for P·V, per batch and head (query, key, value: b × h × s × d).
    q, k = args[0], args[1]
    return 4.0 * math.prod(q.shape[:-1]) * k.shape[-2] * q.shape[-1]


def _formulas():
    table = {aten.mm.default: _mm, aten.addmm.default: _addmm, aten.bmm.default: _bmm,
             aten.baddbmm.default: _baddbmm, aten.convolution.default: _convolution}
    # Fused attention kernels of torch >= 2.0 (absent in 1.13, where attention runs as bmm).
    for name in ("_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                 "_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_cudnn_attention"):
        packet = getattr(aten, name, None)
        if packet is not None:
            table[packet.default] = _sdpa
    return table


class FlopCounter(TorchDispatchMode):
    """with FlopCounter() as counter: run(); counter.flops → FLOPs of the matmuls, convolutions and attention, and
    counter.by_part[name] for the parts named by setting counter.current while it runs."""

    def __init__(self):
        super().__init__()
        self.flops = 0.0
        self.current = None
        self.by_part = {}
        self._table = _formulas()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        formula = self._table.get(func)
        if formula is not None:
            flops = formula(args)
            self.flops += flops
            self.by_part[self.current] = self.by_part.get(self.current, 0.0) + flops
        return func(*args, **kwargs)
