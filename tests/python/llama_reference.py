# A Llama decoder written in plain torch, line for line as Hugging Face's LlamaDecoderLayer runs it
# (transformers/models/llama/modeling_llama.py: LlamaRMSNorm, rotate_half/apply_rotary_pos_emb, repeat_kv,
# eager_attention_forward, LlamaMLP), the reference the torch-bridge test measures shardplan's llama model against.
import math

import torch
from torch import nn


class RMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        variance = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(variance + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary_tables(seq_len, head_dim, dtype, theta=500000.0):
    """cos and sin, 1 × seq_len × head_dim in the activation dtype, as LlamaRotaryEmbedding.forward returns them for
    position_ids [1, s] (the default: one row shared by every sequence of the batch)."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    freqs = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)[None]
    return emb.cos().to(dtype), emb.sin().to(dtype)


class LlamaBlock(nn.Module):
    def __init__(self, hidden, intermediate, heads, kv_heads):
        super().__init__()
        self.num_heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.input_layernorm = RMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x, cos, sin):
        # cos, sin: LlamaDecoderLayer's position_embeddings, computed once by the model for every layer.
        b, s, h = x.shape
        residual = x
        x = self.input_layernorm(x)
        q = self.q_proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, -1, self.head_dim).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # apply_rotary_pos_emb's unsqueeze_dim=1
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        groups = self.num_heads // self.kv_heads
        k = k[:, :, None].expand(b, self.kv_heads, groups, s, self.head_dim).reshape(b, self.num_heads, s, -1)
        v = v[:, :, None].expand(b, self.kv_heads, groups, s, self.head_dim).reshape(b, self.num_heads, s, -1)
        scores = torch.matmul(q, k.transpose(2, 3)) * (1.0 / math.sqrt(self.head_dim))
        mask = torch.full((s, s), float("-inf")).triu(1)
        probs = torch.softmax(scores + mask, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).contiguous().reshape(b, s, h)
        x = residual + self.o_proj(out)
        residual = x
        x = self.post_attention_layernorm(x)
        x = self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))
        return residual + x


class LlamaModel(nn.Module):
    """embed_tokens → layers → norm → lm_head, as LlamaForCausalLM (untied). As LlamaModel.forward does with its
    rotary_emb, the rotary tables are computed once per forward and handed to every layer."""

    def __init__(self, vocab, hidden, intermediate, layers, heads, kv_heads):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(LlamaBlock(hidden, intermediate, heads, kv_heads) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, tokens):
        x = self.embed_tokens(tokens)
        cos, sin = rotary_tables(tokens.shape[1], self.layers[0].head_dim, x.dtype)
        for layer in self.layers:
            x = layer(x, cos, sin)
        return self.lm_head(self.norm(x))


def tiny_llama():
    """shardplan's tiny-llama preset: vocabulary 256, hidden 128, intermediate 352, 4 layers, 4 heads, 2 KV heads."""
    return LlamaModel(256, 128, 352, 4, 4, 2)
