#!/usr/bin/env python3
# gpu_kernel_constants.py: the per-GPU constants the op-level compute model needs, measured as PyTorch runs its
# kernels (DESIGN.md: GEMMs by shape, attention at FlashAttention's throughput, memory-bound kernels at achievable HBM
# bandwidth, plus a launch cost): bf16 GEMM TFLOP/s for a model's layer shapes (forward and both backward products)
# and square sizes, SDPA forward and backward TFLOP/s by sequence length, copy/read/elementwise bandwidth, and kernel
# launch cost; and, for the largest GEMM and FlashAttention, the rate they keep over --sustain-seconds of back-to-back
# calls against their short-trial rate (Note [Sustained rate] below). Prints a table; --out writes a
# shardplan.gpu-measurements/v1 section ("kernels"), units in every key;
# --profile-out writes the same as a shardplan.profile/v1 that `--profile` applies (profile_from_measurements: the
# op-level model's GEMM curve, attention plateaus and s½, elementwise bandwidth and launch cost, fitted to them).
#
#   python3 benchmarks/gpu_kernel_constants.py --config examples/hf/llama3.2-1b.json --tokens 4096 --out k.json \
#       --profile-out profile.json
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
# Note [Sustained rate]: a short trial (CALLS calls after a warm-up: what MAMF-style GEMM tables and the rows above
# report) runs at the clock the GPU boosts to; a training step runs its kernels back to back for seconds, where a
# power or thermal limit lowers the clock. Issue 34 asks for the rate as training runs the kernel, so the largest GEMM
# and FlashAttention also run back to back for about SUSTAIN_SECONDS, timed in windows of SUSTAIN_WINDOW_S by CUDA
# events with the host never waiting between them (the GPU never idles and cools); the sustained rate is the median
# of the second half of the windows (the clock settles within seconds), and its ratio to the short-trial rate is the
# profile's clock_fraction (HardwareProfile::clock_fraction scales every tensor-core rate). nvidia-smi's SM clock and
# power beside it say why, where the machine has it.
SUSTAIN_SECONDS, SUSTAIN_WINDOW_S = 20.0, 1.0


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


def sustained_summary(short_per_s, window_per_s):
    """Note [Sustained rate]: the short-trial rate, the first window's, the sustained one (the median of the second
    half of the windows) and sustained / short. None without windows or a short rate."""
    if not window_per_s or short_per_s <= 0:
        return None
    sustained = statistics.median(window_per_s[len(window_per_s) // 2:])
    return {"short_per_s": short_per_s, "first_window_per_s": window_per_s[0], "sustained_per_s": sustained,
            "fraction": sustained / short_per_s}


def gpu_state():
    """The SM clock (MHz), power draw and limit (W) and temperature (°C) nvidia-smi reads for device 0; {} without
    it."""
    import subprocess
    fields = ["clocks.sm", "power.draw", "power.limit", "temperature.gpu"]
    try:
        line = subprocess.run(["nvidia-smi", "--id=0", "--query-gpu=" + ",".join(fields),
                               "--format=csv,noheader,nounits"], capture_output=True, text=True,
                              timeout=10).stdout.strip().splitlines()[0]
        values = [float(value) for value in line.split(",")]
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return {}
    return dict(zip(["sm_clock_mhz", "power_w", "power_limit_w", "temperature_c"], values))


def sustained_run(torch, name, run, flop_per_call, seconds):
    """Note [Sustained rate]: `run` back to back for about `seconds`; the short-trial and per-window rates (FLOP/s),
    their summary, and the GPU's state before and at the end of the run."""
    call_s = median_call_seconds(torch, run)
    calls = max(1, int(round(SUSTAIN_WINDOW_S / call_s)))
    windows = max(2, int(round(seconds / SUSTAIN_WINDOW_S)))
    before = gpu_state()
    events, loaded = [], {}
    for window in range(windows):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            run(window * calls + i)
        stop.record()
        events.append((start, stop))
        # The host blocks in the launch queue about a window behind the device: read under load, near the end.
        if window == windows - 2:
            loaded = gpu_state()
    torch.cuda.synchronize()
    rates = [flop_per_call * calls / (start.elapsed_time(stop) * 1e-3) for start, stop in events]
    return {"name": name, "seconds": sum(start.elapsed_time(stop) for start, stop in events) * 1e-3,
            "window_seconds": SUSTAIN_WINDOW_S, "window_flop_per_s": rates,
            "summary": sustained_summary(flop_per_call / call_s, rates), "gpu_before": before, "gpu_loaded": loaded}


def sustained_rows(torch, config, tokens, seconds):
    """Note [Sustained rate]: the square 8192 bf16 GEMM, and causal FlashAttention forward and backward at 8192
    tokens per sequence (the model's heads), each for about `seconds`."""
    import torch.nn.functional as F
    rows = []
    size = 8192
    copies = rotation(2 * size * size * 2)
    a = [torch.randn(size, size, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    b = [torch.randn(size, size, device="cuda", dtype=torch.bfloat16) for _ in range(copies)]
    rows.append(sustained_run(torch, f"GEMM {size}^3 bf16", lambda j: F.linear(a[j % copies], b[j % copies]),
                              2.0 * size ** 3, seconds))
    del a, b
    heads = config["num_attention_heads"]
    d = config.get("head_dim") or config["hidden_size"] // heads
    seq = 8192
    batch = max(1, tokens // seq)
    q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    grad = torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16)

    def forward_backward(_):
        q.grad = k.grad = v.grad = None
        F.scaled_dot_product_attention(q, k, v, is_causal=True).backward(grad)
    # flash-attn's count (attention_rows): forward 4·b·s²·h·d halved when causal, backward 2.5× that.
    flop = 3.5 * 4.0 * batch * seq * seq * heads * d / 2
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            rows.append(sustained_run(torch, f"SDPA flash causal fwd+bwd, seq {seq}", forward_backward, flop,
                                      seconds / 2))
    except (ImportError, RuntimeError) as error:
        rows.append({"name": f"SDPA flash causal fwd+bwd, seq {seq}", "error": str(error).splitlines()[0]})
    return rows


def fit_gemm_curve(rows):
    """Least squares of t = (F + f½) / R over the GEMM rows (weights 1/t: relative errors count alike), the op-level
    model's per-GEMM curve (costmodel/compute_cost.cpp gemm_time_s). Returns (R in FLOP/s, f½ in FLOPs)."""
    points = [(2.0 * r["m"] * r["n"] * r["k"], r["seconds"]) for r in rows if r.get("seconds", 0) > 0]
    if len(points) < 2:
        raise ValueError("fewer than two GEMM measurements")
    # t/t = F/(R t) + f½/(R t): normal equations of the weighted fit in a = 1/R, b = f½/R.
    sxx = sum((f / t) ** 2 for f, t in points)
    sxy = sum((f / t) * (1 / t) for f, t in points)
    syy = sum((1 / t) ** 2 for f, t in points)
    sx1 = sum(f / t for f, t in points)
    sy1 = sum(1 / t for f, t in points)
    det = sxx * syy - sxy * sxy
    a = (sx1 * syy - sy1 * sxy) / det
    b = (sxx * sy1 - sxy * sx1) / det
    if b < 0 or a <= 0:  # no fixed cost visible: the rate through the origin
        a, b = sx1 / sxx, 0.0
    return 1.0 / a, b / a


def fit_length_curve(lengths, rates):
    """The plateau E and s½ of rate(s) = E · s / (s + s½) (HardwareProfile's attention curve), by a scan of s½ with E
    least-squares at each (relative errors). Returns (E, s½)."""
    best = None
    for half in range(0, 4001, 5):
        shares = [s / (s + half) for s in lengths]
        # E minimising Σ (E·share/rate − 1)²: E = Σ(share/rate) / Σ(share/rate)².
        e = sum(sh / r for sh, r in zip(shares, rates)) / sum((sh / r) ** 2 for sh, r in zip(shares, rates))
        error = sum((e * sh / r - 1) ** 2 for sh, r in zip(shares, rates))
        if best is None or error < best[0]:
            best = (error, e, half)
    return best[1], best[2]


def profile_from_measurements(document):
    """A shardplan.profile/v1 (its compute section) from a measurement document: the fitted GEMM plateau becomes the
    peak (efficiency 1, clock 1: the rates are what the kernels reached), f½ the per-GEMM fixed cost, SDPA's forward
    and backward plateaus fractions of it (head dimension 64 and below scaled up by FlashAttention's 0.89, as
    compute_cost.cpp scales them down), the elementwise add's bandwidth the HBM rate, the eager launch the dispatch."""
    rate, half = fit_gemm_curve(document["gemm"])
    # Note [Sustained rate]: the GEMM's sustained / short ratio is the clock the tensor cores keep in training.
    sustained = {row["name"].split()[0]: row["summary"] for row in document.get("sustained", [])
                 if row.get("summary")}
    clock = min(1.0, sustained["GEMM"]["fraction"]) if "GEMM" in sustained else 1.0
    compute = {"peak_bf16_flops": rate, "peak_fp16_flops": rate, "max_compute_efficiency": 1.0,
               "half_efficiency_flops": max(1.0, half), "clock_fraction": clock}
    flash = [r for r in document.get("attention", []) if "error" not in r and r.get("backend") == "flash"]
    if len(flash) >= 2:
        scale = 1 / 0.89 if flash[0]["head_dim"] <= 64 else 1.0
        lengths = [r["seq_len"] for r in flash]
        forward, half_fwd = fit_length_curve(lengths, [r["forward_tflop_per_s"] * 1e12 * scale for r in flash])
        backward, half_bwd = fit_length_curve(lengths, [r["backward_tflop_per_s"] * 1e12 * scale for r in flash])
        # Attention's own sustained ratio where measured: the clock above scales it too, so its efficiencies carry
        # the difference (both plateaus then come out at their sustained rates).
        attention_clock = min(1.0, sustained["SDPA"]["fraction"]) if "SDPA" in sustained else clock
        forward, backward = forward * attention_clock / clock, backward * attention_clock / clock
        compute.update({"attention_forward_efficiency": min(1.0, forward / rate),
                        "attention_backward_efficiency": min(1.0, backward / rate),
                        "attention_half_seq_len": max(1.0, (half_fwd + half_bwd) / 2)})
    bandwidth = document.get("memory_bandwidth", {}).get("elementwise_add_bytes_per_s")
    if bandwidth:
        compute.update({"hbm_bytes_per_s": bandwidth, "memory_efficiency": 1.0})
    if "launch" in document:
        compute["kernel_dispatch_s"] = document["launch"]["eager_launch_seconds"]
    device = document.get("device", {}).get("name", "measured GPU")
    return {"schema": "shardplan.profile/v1", "source": "gpu_kernel_constants.py", "device": device,
            "compute": compute}


def main():
    parser = argparse.ArgumentParser(prog="gpu_kernel_constants.py")
    parser.add_argument("--config", required=True, help="Hugging Face config.json giving the layer shapes")
    parser.add_argument("--tokens", type=int, default=4096, help="tokens per micro-batch (GEMM m, attention b·s)")
    parser.add_argument("--out", help="JSON file to write")
    parser.add_argument("--profile-out", help="shardplan.profile/v1 file to write (profile_from_measurements)")
    parser.add_argument("--sustain-seconds", type=float, default=SUSTAIN_SECONDS,
                        help="seconds of back-to-back GEMMs (half that of attention) for the sustained rates; 0: none")
    args = parser.parse_args()
    if args.tokens < 512:
        fail(f"--tokens: expected at least 512, got {args.tokens}")
    if not 0 <= args.sustain_seconds <= 600:
        fail(f"--sustain-seconds: expected 0 to 600, got {args.sustain_seconds}")
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
    if args.sustain_seconds > 0:
        document["sustained"] = sustained_rows(torch, config, args.tokens, args.sustain_seconds)
        for row in document["sustained"]:
            if "error" in row:
                print(f"sustained {row['name']}: not run: {row['error']}")
                continue
            summary, before, loaded = row["summary"], row["gpu_before"], row["gpu_loaded"]
            state = ""
            if before and loaded:
                state = (f"; SM clock {before['sm_clock_mhz']:.0f} -> {loaded['sm_clock_mhz']:.0f} MHz, power "
                         f"{before['power_w']:.0f} -> {loaded['power_w']:.0f} W of {loaded['power_limit_w']:.0f} W, "
                         f"{loaded['temperature_c']:.0f} C")
            print(f"sustained {row['name']} for {row['seconds']:.1f} s: short {summary['short_per_s'] / 1e12:.1f} "
                  f"TFLOP/s, first window {summary['first_window_per_s'] / 1e12:.1f}, sustained "
                  f"{summary['sustained_per_s'] / 1e12:.1f} ({summary['fraction']:.3f}){state}", flush=True)
    if args.out:
        with open(args.out, "w") as stream:
            json.dump(document, stream, indent=1)
    if args.profile_out:
        with open(args.profile_out, "w") as stream:
            json.dump(profile_from_measurements(document), stream, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
