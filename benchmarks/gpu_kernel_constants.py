#!/usr/bin/env python3
# gpu_kernel_constants.py: the per-GPU constants the op-level compute model needs, measured as PyTorch runs its
# kernels (DESIGN.md: GEMMs by shape, attention at FlashAttention's throughput, memory-bound kernels at achievable HBM
# bandwidth, plus a launch cost): bf16 GEMM TFLOP/s for a model's layer shapes (forward and both backward products)
# and square sizes, SDPA forward and backward TFLOP/s by sequence length, copy/read/elementwise bandwidth, and kernel
# launch cost. Prints a table; --out writes a shardplan.gpu-measurements/v1 section ("kernels"), units in every key.
#
#   python3 benchmarks/gpu_kernel_constants.py --config examples/hf/llama3.2-1b.json --tokens 4096 --out k.json
#
# Method (the device tool's METHOD.md): random data, never zeros (a bf16 product ran 13% faster on zeros there);
# warm-up first; CUDA events around repeated calls, the median of several trials; inputs rotated over enough copies
# that a trial's data is several times the 60 MB L2. Exit 77 when there is no CUDA device (nothing measured), 2 on
# bad arguments.
import argparse
import json
import statistics
import sys

SKIP = 77
L2_ROTATION_BYTES = 4 * 60 * 2**20  # 4× the H200's L2 (60 MB: KINDS.md, read off the device by PyTorch)
TRIALS, CALLS = 5, 10


def fail(message, status=2):
    print(f"gpu_kernel_constants: {message}", file=sys.stderr)
    sys.exit(status)


def median_call_seconds(torch, run, calls=CALLS, trials=TRIALS, warmup=3):
    """Median over trials of (event time of `calls` back-to-back calls) / calls; run(i) does call i."""
    for i in range(warmup):
        run(i)
    times = []
    for _ in range(trials):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            run(i)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e-3 / calls)
    return statistics.median(times)


def rotation(bytes_per_set):
    return max(1, min(16, -(-L2_ROTATION_BYTES // max(1, bytes_per_set))))


def gemm_rows(torch, config, tokens):
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads = config["num_attention_heads"]
    d = config.get("head_dim") or h // heads
    kv = config.get("num_key_value_heads", heads) * d
    # y = x·Wᵀ with x [tokens × in], W [out × in]; backward: dX = dY·W (m=tokens, n=in, k=out), dW = dYᵀ·X
    # (m=out, n=in, k=tokens). Shapes of the llama block and head (HF LlamaForCausalLM's nn.Linear layers).
    layers = [("q_proj", h, heads * d), ("k_proj", h, kv), ("o_proj", heads * d, h), ("gate_proj", h, i),
              ("down_proj", i, h), ("lm_head", h, v)]
    # Operand layouts as autograd calls them: forward F.linear (x·Wᵀ, "nt"), dX = dY·W ("nn"), dW = dYᵀ·X ("tn").
    cases = []
    for name, n_in, n_out in layers:
        cases += [(f"{name} forward", tokens, n_out, n_in, "nt"), (f"{name} backward input", tokens, n_in, n_out, "nn"),
                  (f"{name} backward weight", n_out, n_in, tokens, "tn")]
    cases += [(f"square {s}", s, s, s, "nt") for s in (1024, 2048, 4096, 8192)]
    rows = []
    for name, m, n, k, layout in cases:
        copies = rotation((m * k + n * k) * 2)
        # Stored shapes: A is [m, k] ("tn": stored [k, m], used transposed); B is [n, k] for "nt", else [k, n].
        a_shape = (k, m) if layout == "tn" else (m, k)
        b_shape = (n, k) if layout == "nt" else (k, n)
        a = [torch.randn(*a_shape, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        b = [torch.randn(*b_shape, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
        if layout == "nt":
            run = lambda j: torch.nn.functional.linear(a[j % copies], b[j % copies])  # noqa: E731
        elif layout == "nn":
            run = lambda j: torch.matmul(a[j % copies], b[j % copies])  # noqa: E731
        else:
            run = lambda j: torch.matmul(a[j % copies].t(), b[j % copies])  # noqa: E731
        seconds = median_call_seconds(torch, run)
        rows.append({"name": name, "m": m, "n": n, "k": k, "layout": layout, "dtype": "bf16", "seconds": seconds,
                     "tflop_per_s": 2.0 * m * n * k / seconds / 1e12})
        del a, b
    return rows


def attention_rows(torch, config, tokens):
    import torch.nn.functional as F
    heads = config["num_attention_heads"]
    d = config.get("head_dim") or config["hidden_size"] // heads
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        backends = [("flash", SDPBackend.FLASH_ATTENTION), ("default", None)]
    except ImportError:
        backends = [("default", None)]
    rows = []
    for seq in (512, 1024, 2048, 4096, 8192):
        batch = max(1, tokens // seq)
        # HF's sdpa path repeats the kv heads to the query heads before the call (repeat_kv), so all have `heads`.
        q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
                   for _ in range(3))
        grad = torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16)
        # FLOPs as flash-attn's benchmarks count them (benchmarks/benchmark_flash_attention.py, flops()):
        # forward 4·b·s²·h·d, halved when causal; backward 2.5× forward.
        forward_flop = 4.0 * batch * seq * seq * heads * d / 2
        for label, backend in backends:
            def forward(_):
                return F.scaled_dot_product_attention(q, k, v, is_causal=True)

            def forward_backward(_):
                q.grad = k.grad = v.grad = None
                forward(0).backward(grad)
            try:
                if backend is None:
                    fwd_s = median_call_seconds(torch, forward)
                    both_s = median_call_seconds(torch, forward_backward)
                else:
                    with sdpa_kernel(backend):
                        fwd_s = median_call_seconds(torch, forward)
                        both_s = median_call_seconds(torch, forward_backward)
            except RuntimeError as error:
                rows.append({"seq_len": seq, "backend": label, "error": str(error).splitlines()[0]})
                continue
            bwd_s = both_s - fwd_s
            rows.append({"seq_len": seq, "batch": batch, "heads": heads, "head_dim": d, "causal": True,
                         "backend": label, "dtype": "bf16", "forward_seconds": fwd_s, "backward_seconds": bwd_s,
                         "forward_tflop_per_s": forward_flop / fwd_s / 1e12,
                         "backward_tflop_per_s": 2.5 * forward_flop / bwd_s / 1e12})
        del q, k, v, grad
    return rows


def bandwidth(torch):
    elements = 2**29  # 2 GiB of fp32: far past the L2, as H200.md advises ("a few gigabytes")
    x = torch.randn(elements, device="cuda")
    y = torch.randn(elements, device="cuda")
    z = torch.empty_like(x)
    size = elements * 4
    copy_s = median_call_seconds(torch, lambda _: z.copy_(x), calls=5)
    read_s = median_call_seconds(torch, lambda _: x.sum(), calls=5)
    add_s = median_call_seconds(torch, lambda _: torch.add(x, y, out=z), calls=5)
    return {"buffer_bytes": size,
            "copy_bytes_per_s": 2 * size / copy_s,           # read + write, as KINDS.md's 4.3 TB/s counts it
            "read_bytes_per_s": size / read_s,               # a sum reads once
            "elementwise_add_bytes_per_s": 3 * size / add_s}  # two reads, one write


def launch(torch):
    x = torch.zeros(1, device="cuda")
    count = 2000
    import time
    for _ in range(100):
        x.add_(1.0)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(count):
        x.add_(1.0)
    torch.cuda.synchronize()
    eager_s = (time.perf_counter() - start) / count
    # The same tiny kernel replayed from a CUDA graph: what one kernel costs on the device without the host.
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):
            x.add_(1.0)
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        for _ in range(200):
            x.add_(1.0)
    graph_s = median_call_seconds(torch, lambda _: graph.replay(), calls=5) / 200
    # One launch and its wait, start to finish, as a synchronising op pays it.
    round_trips = []
    for _ in range(200):
        start = time.perf_counter()
        x.add_(1.0)
        torch.cuda.synchronize()
        round_trips.append(time.perf_counter() - start)
    return {"eager_launch_seconds": eager_s, "graph_kernel_seconds": graph_s,
            "launch_and_sync_seconds": statistics.median(round_trips)}


def main():
    parser = argparse.ArgumentParser(prog="gpu_kernel_constants.py")
    parser.add_argument("--config", required=True, help="Hugging Face config.json giving the layer shapes")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per micro-batch (GEMM m, attention b·s)")
    parser.add_argument("--out", help="JSON file to write")
    args = parser.parse_args()
    if args.tokens < 512:
        fail(f"--tokens: expected at least 512, got {args.tokens}")
    try:
        config = json.load(open(args.config))
    except (OSError, ValueError) as error:
        fail(f"{args.config}: cannot read ({error})")
    for key in ("hidden_size", "intermediate_size", "vocab_size", "num_attention_heads"):
        if key not in config:
            fail(f"{args.config}: field '{key}' missing")
    try:
        import torch
    except ImportError as error:
        fail(f"no torch here ({error})", SKIP)
    if not torch.cuda.is_available():
        fail(f"no usable CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)", SKIP)
    properties = torch.cuda.get_device_properties(0)
    document = {"device": {"name": properties.name, "multiprocessors": properties.multi_processor_count,
                           "memory_bytes": properties.total_memory, "torch_version": torch.__version__,
                           "cuda_version": torch.version.cuda}, "config": args.config, "tokens": args.tokens}
    print(f"# {properties.name}, torch {torch.__version__}, CUDA {torch.version.cuda}; shapes of {args.config} "
          f"at {args.tokens} tokens")
    document["launch"] = launch(torch)
    print("launch: eager {eager_launch_seconds:.2e} s per kernel, graph replay {graph_kernel_seconds:.2e} s, "
          "launch + sync {launch_and_sync_seconds:.2e} s".format(**document["launch"]), flush=True)
    document["memory_bandwidth"] = bandwidth(torch)
    print("HBM: copy {copy_bytes_per_s:.3e} B/s, read {read_bytes_per_s:.3e} B/s, add {elementwise_add_bytes_per_s:.3e}"
          " B/s".format(**document["memory_bandwidth"]), flush=True)
    document["gemm"] = gemm_rows(torch, config, args.tokens)
    print(f"{'GEMM (torch.matmul, bf16)':32s} {'m':>7s} {'n':>7s} {'k':>7s} {'TFLOP/s':>9s}")
    for row in document["gemm"]:
        print(f"{row['name']:32s} {row['m']:7d} {row['n']:7d} {row['k']:7d} {row['tflop_per_s']:9.1f}")
    document["attention"] = attention_rows(torch, config, args.tokens)
    print(f"{'SDPA causal bf16':18s} {'seq':>6s} {'batch':>5s} {'fwd TFLOP/s':>12s} {'bwd TFLOP/s':>12s}")
    for row in document["attention"]:
        if "error" in row:
            print(f"{row['backend']:18s} {row['seq_len']:6d}  not run: {row['error']}")
        else:
            print(f"{row['backend']:18s} {row['seq_len']:6d} {row['batch']:5d} {row['forward_tflop_per_s']:12.1f} "
                  f"{row['backward_tflop_per_s']:12.1f}")
    if args.out:
        with open(args.out, "w") as stream:
            json.dump(document, stream, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
