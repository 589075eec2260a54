# The FSDP2 export kinds that the export checker (test_export_checker.py) and scripts/check-exports generate, each
# for four ranks and a shrunken Hugging Face model whose config.json is written here, so the run check can build the
# very model the plan was made for with transformers (random weights, no download).
import json
import os
import subprocess

TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256, "hidden_size": 64,
              "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 256, "tie_word_embeddings": False}
TINY_MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "vocab_size": 256,
                "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
                "num_key_value_heads": 2, "num_local_experts": 4, "num_experts_per_tok": 2,
                "max_position_embeddings": 256, "tie_word_embeddings": False}
WORLD_SIZE = 4

# name, config, `plan` flags, a line the script must contain for the kind to be what it says (the search chooses
# strategies, so a kind that stopped being produced fails rather than passing as another kind).
KINDS = [
    ("1-D", TINY_LLAMA, ["-c", "4xcpu", "--seq-len", "64"], 'dp_mesh = mesh["dp_shard"]'),
    ("2-D TP", TINY_LLAMA, ["-c", "4xcpu", "--seq-len", "64", "--tensor-parallel", "2"], "TENSOR_PARALLEL_DEGREE = 2"),
    ("HSDP", TINY_LLAMA, ["-c", "2x2xcpu", "--seq-len", "256"], 'hsdp_mesh = mesh["dp_replicate", "dp_shard"]'),
    ("LoRA", TINY_LLAMA, ["-c", "4xcpu", "--seq-len", "64", "--finetune", "lora"], "get_peft_model("),
    ("QLoRA", TINY_LLAMA, ["-c", "4xcpu", "--seq-len", "64", "--finetune", "qlora"], "BitsAndBytesConfig("),
    ("fp8", TINY_LLAMA, ["-c", "4xH100-80GB", "--seq-len", "64", "--precision", "fp8-tensorwise",
                         "--tensor-parallel", "1"], "convert_to_float8_training("),
    ("fp8 TP", TINY_LLAMA, ["-c", "4xH100-80GB", "--seq-len", "64", "--precision", "fp8-tensorwise",
                            "--tensor-parallel", "2"], "Float8ColwiseParallel"),
    ("EP (MoE)", TINY_MIXTRAL, ["-c", "4xcpu", "--seq-len", "64"], "EXPERT_PARALLEL_DEGREE = 1"),
    ("offload", TINY_LLAMA, ["-c", "4xcpu", "--seq-len", "64", "--memory-cap", "0.001"],
     "offload_policy=offload_policy"),
]


def write_config(directory, config):
    path = os.path.join(directory, config["model_type"] + "-config.json")
    with open(path, "w", encoding="utf-8") as stream:
        json.dump(config, stream)
    return path


def generate(binary, directory, kind):
    """Runs `plan ... --export fsdp2` for one kind into directory/<slug>/; returns the script's path and its text.
    Raises RuntimeError naming the command when the plan fails or the script is not of that kind."""
    name, config, flags, marker = kind
    slug = "".join(c if c.isalnum() else "-" for c in name.lower())
    out_dir = os.path.join(directory, slug)
    os.makedirs(out_dir, exist_ok=True)
    command = [binary, "plan", "-m", write_config(directory, config), *flags, "--export", "fsdp2", "--out-dir", out_dir]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: exit {result.returncode}: {result.stderr.strip()}")
    path = os.path.join(out_dir, "fsdp2_plan.py")
    with open(path, encoding="utf-8") as stream:
        text = stream.read()
    if marker not in text:
        raise RuntimeError(f"{' '.join(command)}: the script is not a {name} export (no '{marker}')")
    return path, text
