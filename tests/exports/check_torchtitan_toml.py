#!/usr/bin/env python3
# Meson test `torchtitan-export-checker`: the torchtitan job configs the built binary writes (`plan --export
# torchtitan`) for 1-D FSDP, HSDP, TP, float8, AC, compile and offload plans, parsed with tomllib: every key is a field
# of torchtitan's job config with the right type (and, for Literal fields, an allowed value), and the parallel degrees
# multiply to the world size. Plans torchtitan cannot run must be refused in one line with nothing written. Pipeline
# plans come from `plan --pipeline-parallel` and from the unit test that exports them (UNIT_TESTS_BIN, "torchtitan
# pipeline export"): their schedule, micro-batch size and stage count must be ones torchtitan's pipeline_llm accepts.
# Mutated files (an unknown key, a wrong type, degrees that do not multiply, a stage count the schedule cannot run)
# must be caught. Python 3.11+ stdlib only.
import os
import subprocess
import sys
import tempfile
import tomllib

# torchtitan's job config fields (section, name, type) in the sections the export writes, copied from
# torchtitan/config/job_config.py at pytorch/torchtitan@e347b1e5e6b6941d789d16d340145294d82dc71e (the last commit
# before #2386 replaced TOML configs with Python dataclass registries). "X | None" is X here: TOML has no null.
# Literal types carry their allowed values.
TORCHTITAN_FIELDS = [
    ("job", "config_file", "str"),
    ("job", "dump_folder", "str"),
    ("job", "description", "str"),
    ("job", "print_config", "bool"),
    ("job", "save_config_file", "str"),
    ("job", "custom_config_module", "str"),
    ("model", "name", "str"),
    ("model", "flavor", "str"),
    ("model", "hf_assets_path", "str"),
    ("model", "tokenizer_path", "str"),
    ("model", "converters", "list[str]"),
    ("model", "print_after_conversion", "bool"),
    ("optimizer", "name", "str"),
    ("optimizer", "lr", "float"),
    ("optimizer", "beta1", "float"),
    ("optimizer", "beta2", "float"),
    ("optimizer", "eps", "float"),
    ("optimizer", "weight_decay", "float"),
    ("optimizer", "implementation", ("for-loop", "foreach", "fused")),
    ("optimizer", "early_step_in_backward", "bool"),
    ("training", "dataset", "str"),
    ("training", "dataset_path", "str"),
    ("training", "local_batch_size", "int"),
    ("training", "global_batch_size", "int"),
    ("training", "seq_len", "int"),
    ("training", "max_norm", "float"),
    ("training", "steps", "int"),
    ("training", "enable_cpu_offload", "bool"),
    ("training", "dtype", ("bfloat16", "float32")),
    ("training", "mixed_precision_param", ("bfloat16", "float32")),
    ("training", "mixed_precision_reduce", ("float32",)),
    ("training", "gc_freq", "int"),
    ("training", "gc_debug", "bool"),
    ("parallelism", "data_parallel_replicate_degree", "int"),
    ("parallelism", "data_parallel_shard_degree", "int"),
    ("parallelism", "fsdp_reshard_after_forward", ("default", "always", "never")),
    ("parallelism", "tensor_parallel_degree", "int"),
    ("parallelism", "disable_loss_parallel", "bool"),
    ("parallelism", "enable_async_tensor_parallel", "bool"),
    ("parallelism", "pipeline_parallel_degree", "int"),
    ("parallelism", "module_fqns_per_model_part", "list[list[str]]"),
    ("parallelism", "pipeline_parallel_first_stage_less_layers", "int"),
    ("parallelism", "pipeline_parallel_last_stage_less_layers", "int"),
    ("parallelism", "pipeline_parallel_layers_per_stage", "int"),
    ("parallelism", "pipeline_parallel_schedule", "str"),
    ("parallelism", "pipeline_parallel_schedule_csv", "str"),
    ("parallelism", "pipeline_parallel_microbatch_size", "int"),
    ("parallelism", "pipeline_parallel_expert_parallel_overlap", "bool"),
    ("parallelism", "context_parallel_degree", "int"),
    ("parallelism", "context_parallel_load_balancer", "str"),
    ("parallelism", "context_parallel_rotate_method", ("allgather", "alltoall")),
    ("parallelism", "expert_parallel_degree", "int"),
    ("parallelism", "expert_tensor_parallel_degree", "int"),
    ("parallelism", "expert_parallel_comm_backend", ("standard", "deepep")),
    ("activation_checkpoint", "mode", ("selective", "full", "memory_budget", "none")),
    ("activation_checkpoint", "selective_ac_option", "str"),
    ("activation_checkpoint", "per_op_sac_force_recompute_mm_shapes_by_fqns", "list[str]"),
    ("activation_checkpoint", "early_stop", "bool"),
    ("activation_checkpoint", "memory_budget", "float"),
    ("activation_checkpoint", "visualize_memory_budget_pareto", "bool"),
    ("activation_checkpoint", "preserve_rng_state", "bool"),
    ("activation_checkpoint", "determinism_check", "str"),
    ("activation_checkpoint", "debug", "bool"),
    ("compile", "enable", "bool"),
    ("compile", "components", "list[str]"),
    ("compile", "backend", "str"),
    ("quantize.linear.float8", "enable_fsdp_float8_all_gather", "bool"),
    ("quantize.linear.float8", "precompute_float8_dynamic_scale_for_fsdp", "bool"),
    ("quantize.linear.float8", "recipe_name", ("tensorwise", "rowwise", "rowwise_with_gw_hp")),
    ("quantize.linear.float8", "filter_fqns", "list[str]"),
    ("quantize.linear.float8", "emulate", "bool"),
]
FIELDS = {(section, name): kind for section, name, kind in TORCHTITAN_FIELDS}
SECTIONS = {section for section, _, _ in TORCHTITAN_FIELDS}
# The converter names torchtitan registers (torchtitan/components/quantization/float8.py register_model_converter).
CONVERTERS = {"quantize.linear.float8"}

# Pipeline schedules by torch's names (torch/distributed/pipelining/schedules.py get_schedule_class, which torchtitan's
# pipeline_llm calls on pipeline_parallel_schedule), the single-stage ones (PipelineScheduleSingle subclasses) apart.
SINGLE_STAGE_SCHEDULES = {"1F1B", "GPipe", "PipelineScheduleSingle"}
SCHEDULES = SINGLE_STAGE_SCHEDULES | {"Interleaved1F1B", "LoopedBFS", "InterleavedZeroBubble", "ZBVZeroBubble",
                                     "DualPipeV", "PipelineScheduleMulti"}
# n_layers of the flavors the export writes (torchtitan/models/llama3/__init__.py, torchtitan/models/qwen3/__init__.py).
FLAVOR_LAYERS = {("llama3", "8B"): 32, ("llama3", "70B"): 80, ("llama3", "405B"): 126, ("qwen3", "4B"): 36,
                 ("qwen3", "8B"): 36, ("qwen3", "32B"): 64}


def pipeline_problems(document):
    """What torchtitan's pipeline_llm and build_pipeline_schedule (torchtitan/distributed/pipeline_parallel.py) refuse:
    an unknown schedule, a local batch the micro-batch size does not divide, and a stage count (ceil((n_layers +
    first_stage_less_layers + last_stage_less_layers) / layers_per_stage), default 1 and 1) that the pipeline degree
    does not divide or that is not 1 per rank for a single-stage schedule and 2 or more for a looped one."""
    parallelism = document.get("parallelism", {})
    degree = parallelism.get("pipeline_parallel_degree", 1)
    if not isinstance(degree, int) or degree <= 1:
        return []
    problems = []
    schedule = parallelism.get("pipeline_parallel_schedule", "1F1B")
    if schedule not in SCHEDULES:
        problems.append(f"[parallelism] pipeline_parallel_schedule '{schedule}' is not a torch pipeline schedule")
    local = document.get("training", {}).get("local_batch_size", 8)
    micro = parallelism.get("pipeline_parallel_microbatch_size", 1)
    if isinstance(local, int) and isinstance(micro, int) and (micro < 1 or local % micro != 0):
        problems.append(f"local_batch_size {local} is not a multiple of pipeline_parallel_microbatch_size {micro}")
    per_stage = parallelism.get("pipeline_parallel_layers_per_stage")
    model = document.get("model", {})
    layers = FLAVOR_LAYERS.get((model.get("name"), model.get("flavor")))
    if isinstance(per_stage, int) and per_stage >= 1 and layers is not None:
        effective = layers + parallelism.get("pipeline_parallel_first_stage_less_layers", 1) + \
            parallelism.get("pipeline_parallel_last_stage_less_layers", 1)
        stages = -(-effective // per_stage)
        if stages % degree != 0:
            problems.append(f"{stages} pipeline stages ({layers} layers, layers_per_stage {per_stage}) do not divide "
                            f"over pipeline_parallel_degree {degree}")
        elif (schedule in SINGLE_STAGE_SCHEDULES) != (stages // degree == 1):
            problems.append(f"{stages // degree} pipeline stages per rank do not suit schedule '{schedule}' (single-"
                            f"stage schedules run 1 per rank, looped ones 2 or more)")
    elif per_stage is not None:
        problems.append(f"[parallelism] pipeline_parallel_layers_per_stage = {per_stage!r} for a model of unknown "
                        f"layers, or below 1")
    fqns = parallelism.get("module_fqns_per_model_part")
    if fqns is not None:
        problems += module_fqn_problems(fqns, layers, degree, schedule, per_stage)
    return problems


def module_fqn_problems(fqns, layers, degree, schedule, per_stage):
    """module_fqns_per_model_part as pipeline_llm and pipeline_module_split read it: one stage per list (num_stages =
    len), the pipeline degree dividing them (its assertion), 1 per rank for a single-stage schedule (build_pipeline_
    schedule hands it stages[0] alone) and 2 or more for a looped one, and, since pipeline_module_split drops every
    module a stage does not name, each of the model's modules on exactly one stage, in model order, by torchtitan's
    names (tok_embeddings, layers.<i>, norm, output); layers_per_stage set beside it would only validate a count."""
    problems = []
    if per_stage is not None:
        problems.append("both pipeline_parallel_layers_per_stage and module_fqns_per_model_part are set")
    if not fqns or any(not stage for stage in fqns):
        return problems + ["module_fqns_per_model_part has an empty stage"]
    if len(fqns) % degree != 0:
        problems.append(f"{len(fqns)} stages in module_fqns_per_model_part do not divide over pipeline_parallel_degree "
                        f"{degree}")
    elif (schedule in SINGLE_STAGE_SCHEDULES) != (len(fqns) // degree == 1):
        problems.append(f"{len(fqns) // degree} stages per rank in module_fqns_per_model_part do not suit schedule "
                        f"'{schedule}'")
    if layers is None:
        return problems + ["module_fqns_per_model_part for a model of unknown layers"]
    expected = ["tok_embeddings"] + [f"layers.{i}" for i in range(layers)] + ["norm", "output"]
    placed = [name for stage in fqns for name in stage]
    if placed != expected:
        problems.append("module_fqns_per_model_part does not place each module once in model order (tok_embeddings, "
                        f"layers.0..{layers - 1}, norm, output)")
    return problems


def type_ok(value, kind):
    if isinstance(kind, tuple):
        return isinstance(value, str) and value in kind
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":  # torchtitan parses an integer into a float field (max_norm: float | int)
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "list[str]":
        return isinstance(value, list) and all(isinstance(item, str) for item in value)
    if kind == "list[list[str]]":
        return isinstance(value, list) and all(type_ok(item, "list[str]") for item in value)
    raise AssertionError(f"unknown kind {kind}")


def leaves(table, prefix=""):
    """(section, key, value) for every key, nested tables flattened to dotted sections ([quantize.linear.float8])."""
    for key, value in table.items():
        if isinstance(value, dict):
            yield from leaves(value, f"{prefix}.{key}" if prefix else key)
        else:
            yield prefix, key, value


def check_document(document, world_size):
    """The problems of one parsed config, as strings (empty: it passes)."""
    problems = []
    for section, key, value in leaves(document):
        if section not in SECTIONS:
            problems.append(f"[{section}] is not a torchtitan section" if section else f"top-level key '{key}'")
            continue
        kind = FIELDS.get((section, key))
        if kind is None:
            problems.append(f"[{section}] {key} is not a torchtitan field")
        elif not type_ok(value, kind):
            problems.append(f"[{section}] {key} = {value!r} is not {kind}")
    for converter in document.get("model", {}).get("converters", []):
        if converter not in CONVERTERS:
            problems.append(f"[model] converters names '{converter}', which torchtitan does not register")
    parallelism = document.get("parallelism", {})
    degrees = [parallelism.get(name, 1) for name in ("data_parallel_replicate_degree", "data_parallel_shard_degree",
                                                     "context_parallel_degree", "tensor_parallel_degree",
                                                     "pipeline_parallel_degree")]
    if not all(isinstance(d, int) and d >= 1 for d in degrees):
        problems.append(f"degrees {degrees} are not all positive integers (the export writes -1 nowhere)")
    else:
        product = 1
        for degree in degrees:
            product *= degree
        if product != world_size:
            problems.append(f"dp_replicate x dp_shard x cp x tp x pp = {' x '.join(map(str, degrees))} = {product}, "
                            f"not the world size {world_size}")
        training = document.get("training", {})
        local, global_ = training.get("local_batch_size"), training.get("global_batch_size")
        data_parallel = degrees[0] * degrees[1]
        if isinstance(local, int) and isinstance(global_, int) and global_ % (local * data_parallel) != 0:
            problems.append(f"global_batch_size {global_} is not a multiple of local_batch_size {local} x "
                            f"data-parallel degree {data_parallel} (torchtitan's gradient accumulation)")
        # torch's load-balanced sharding under context parallelism cuts each sequence into 2 x cp equal chunks
        # (torch/distributed/tensor/experimental/_attention.py _generate_round_robin_indices).
        seq_len, cp = training.get("seq_len"), degrees[2]
        if cp > 1 and isinstance(seq_len, int) and seq_len % (2 * cp) != 0:
            problems.append(f"seq_len {seq_len} is not a multiple of 2 x context_parallel_degree {cp}")
    return problems + pipeline_problems(document)


def world_size(cluster):
    count = 1
    for part in cluster.split("x")[:-1]:
        count *= int(part)
    return count


PRECISION_OMITTED = "precision omitted"
# name, cluster, `plan` flags, what the config must say for the plan to be of that kind (section, key, value).
PLANS = [
    # Pipeline parallelism pinned off: on 8 GPUs a pp 2 plan ties with FSDP's (llama3-8b: 1.0361 s against 1.0362 s).
    ("1-D FSDP", "8xH100-80GB", ["--tensor-parallel", "1", "--strategy", "full_shard", "--pipeline-parallel", "1"],
     [("parallelism", "data_parallel_shard_degree", 8), ("parallelism", "data_parallel_replicate_degree", 1)]),
    ("HSDP", "2x8xH100-80GB", ["--tensor-parallel", "1", "--strategy", "hybrid_shard", "--pipeline-parallel", "1"],
     [("parallelism", "data_parallel_replicate_degree", 2), ("parallelism", "data_parallel_shard_degree", 8)]),
    ("TP 2", "8xH100-80GB", ["--tensor-parallel", "2"], [("parallelism", "tensor_parallel_degree", 2)]),
    ("float8 tensorwise", "8xH100-80GB", ["--tensor-parallel", "1", "--precision", "fp8-tensorwise"],
     [("model", "converters", ["quantize.linear.float8"]),
      ("quantize.linear.float8", "enable_fsdp_float8_all_gather", True)]),
    ("float8 rowwise", "8xH100-80GB", ["--tensor-parallel", "1", "--precision", "fp8-rowwise"],
     [("quantize.linear.float8", "recipe_name", "rowwise")]),
    ("AC full", "8xH100-80GB", ["--ac", "full"], [("activation_checkpoint", "mode", "full")]),
    ("AC every 2nd block", "8xH100-80GB", ["--ac", "full", "--ac-every", "2"],
     [("activation_checkpoint", "mode", "selective"), ("activation_checkpoint", "selective_ac_option", "2")]),
    ("AC selective-op", "8xH100-80GB", ["--ac", "selective-op"],
     [("activation_checkpoint", "mode", "selective"), ("activation_checkpoint", "selective_ac_option", "op")]),
    ("compile", "8xH100-80GB", ["--compile"], [("compile", "enable", True)]),
    # torchtitan shards over dp_shard x cp: FSDP's group of 8 is data_parallel_shard_degree 4 x context_parallel 2.
    ("CP 2", "8xH100-80GB", ["--context-parallel", "2", "--tensor-parallel", "1"],
     [("parallelism", "context_parallel_degree", 2), ("parallelism", "data_parallel_shard_degree", 4)]),
    # A pipeline plan as `plan` plans it (Note [Pipeline search]): its degree, schedule and stages as torchtitan reads them.
    ("PP 2 (plan --pipeline-parallel)", "2x8xH100-80GB", ["--pipeline-parallel", "2", "--tensor-parallel", "2"],
     [("parallelism", "pipeline_parallel_degree", 2), ("parallelism", "tensor_parallel_degree", 2)]),
    ("CPU offload", "8xH100-80GB", ["--cpu-offload", "--tensor-parallel", "1"],
     [("training", "enable_cpu_offload", True)]),
    # Without --precision the export's recipe is bf16-mixed with float32 reduction (cli/cmd_plan.cpp), not a refusal.
    (PRECISION_OMITTED, "8xH100-80GB", ["--tensor-parallel", "1"],
     [("training", "mixed_precision_reduce", "float32"), ("training", "mixed_precision_param", "bfloat16")]),
]
# Plans torchtitan cannot run: refused in one line naming --export torchtitan, exit 2, no file.
REFUSED = [
    ("bf16 reduce", ["--precision", "bf16-mixed"], "reduces gradients in 16-bit"),
    ("LoRA", ["--finetune", "lora"], "trains every parameter"),
    ("attention-core AC", ["--ac", "selective"], "has no torchtitan mode"),
    ("eager attention", ["--attention", "eager"], "not SDPA's flash kernel"),
    ("SGD", ["--optimizer", "sgd"], "torchtitan's are Adam and AdamW"),
    ("ZeRO-2", ["--strategy", "zero2", "--tensor-parallel", "1"], "FSDP2 and torchtitan cannot"),
]
BASE = ["-m", "llama3-8b", "--seq-len", "8192"]
FP32_REDUCE = ["--precision", "bf16-mixed-fp32-reduce"]

# (name, the plan whose file is mutated, text replaced, replacement): each must be caught.
MUTATIONS = [
    ("a key torchtitan lacks", "1-D FSDP", "enable_cpu_offload = false", "cpu_offload = false"),
    ("a wrong type", "TP 2", "tensor_parallel_degree = 2", 'tensor_parallel_degree = "2"'),
    ("degrees that miss the world", "HSDP", "data_parallel_replicate_degree = 2", "data_parallel_replicate_degree = 1"),
    ("a Literal value torchtitan lacks", "1-D FSDP", 'mixed_precision_reduce = "float32"',
     'mixed_precision_reduce = "bfloat16"'),
    ("a converter torchtitan lacks", "float8 tensorwise", '"quantize.linear.float8"]', '"float8"]'),
    ("a shard degree with the cp ranks", "CP 2", "data_parallel_shard_degree = 4", "data_parallel_shard_degree = 8"),
    ("a sequence cp cannot split", "CP 2", "seq_len = 8192", "seq_len = 8194"),
]

# The unit test's pipeline plans (tests/unit/test_torchtitan_pipeline_export.cpp: llama3-8b on 2 x 8 GPUs, pipeline
# degree 4 over FSDP 4): file, what it must say.
PIPELINE_TEST = "torchtitan pipeline export*"  # doctest's -tc splits at commas: the names' start
PIPELINE_WORLD = 16
PIPELINE_PLANS = [
    ("1F1B.toml", [("parallelism", "pipeline_parallel_degree", 4),
                   ("parallelism", "pipeline_parallel_schedule", "1F1B"),
                   ("parallelism", "pipeline_parallel_layers_per_stage", 9),
                   ("parallelism", "pipeline_parallel_microbatch_size", 2)]),
    ("Interleaved1F1B.toml", [("parallelism", "pipeline_parallel_schedule", "Interleaved1F1B"),
                              ("parallelism", "pipeline_parallel_layers_per_stage", None)]),
    ("InterleavedZeroBubble.toml", [("parallelism", "pipeline_parallel_schedule", "InterleavedZeroBubble"),
                                    ("parallelism", "pipeline_parallel_layers_per_stage", 3)]),
    # Other splits and counts by name (module_fqns_per_model_part): one block moved, and 4 stages per rank.
    ("1F1B-moved.toml", [("parallelism", "pipeline_parallel_schedule", "1F1B"),
                         ("parallelism", "pipeline_parallel_layers_per_stage", None)]),
    ("Interleaved1F1B-16.toml", [("parallelism", "pipeline_parallel_schedule", "Interleaved1F1B"),
                                 ("parallelism", "pipeline_parallel_layers_per_stage", None)]),
]
PIPELINE_MUTATIONS = [
    ("a looped schedule, 1 stage per rank", "1F1B.toml", 'pipeline_parallel_schedule = "1F1B"',
     'pipeline_parallel_schedule = "Interleaved1F1B"'),
    ("a micro-batch not dividing the batch", "1F1B.toml", "pipeline_parallel_microbatch_size = 2",
     "pipeline_parallel_microbatch_size = 3"),
    ("stages the degree does not divide", "InterleavedZeroBubble.toml", "pipeline_parallel_layers_per_stage = 3",
     "pipeline_parallel_layers_per_stage = 4"),
    ("a schedule torch lacks", "Interleaved1F1B.toml", '"Interleaved1F1B"', '"Interleaved2F2B"'),
    ("a block on two stages", "1F1B-moved.toml", '["layers.9", ', '["layers.8", "layers.9", '),
    ("a block on no stage", "1F1B-moved.toml", '["layers.9", ', '['),
    ("a looped schedule on named stages", "1F1B-moved.toml", 'pipeline_parallel_schedule = "1F1B"',
     'pipeline_parallel_schedule = "Interleaved1F1B"'),
]


def check_pipeline_plans(directory):
    """Runs the unit test that exports the pipeline plans into `directory`, then checks each file; the failures."""
    unit_tests = os.environ.get("UNIT_TESTS_BIN", "build/tests/unit_tests")
    out_dir = tempfile.mkdtemp(dir=directory)
    command = [unit_tests, f"-tc={PIPELINE_TEST}"]
    result = subprocess.run(command, capture_output=True, text=True, check=False,
                            env={**os.environ, "SHARDPLAN_TORCHTITAN_PIPELINE_DIR": out_dir})
    if result.returncode != 0:
        return [f"pipeline: {' '.join(command)}: exit {result.returncode}: {result.stdout.strip()[-300:]}"]
    failures = []
    print(f"\n{'pipeline plan':<26} | {'keys':>4} | checks | kind")
    texts = {}
    for name, expected in PIPELINE_PLANS:
        path = os.path.join(out_dir, name)
        if not os.path.exists(path):
            failures.append(f"pipeline {name}: the unit test wrote no file")
            continue
        with open(path, encoding="utf-8") as stream:
            texts[name] = stream.read()
        document = tomllib.loads(texts[name])
        problems = check_document(document, PIPELINE_WORLD)
        wrong = [f"{s}.{k}" for s, k, v in expected if _lookup(document, s, k) != v]
        print(f"{name:<26} | {sum(1 for _ in leaves(document)):>4} | {'ok' if not problems else 'FAIL':<6} | "
              f"{'ok' if not wrong else 'FAIL'}")
        failures += [f"pipeline {name}: {p}" for p in problems]
        failures += [f"pipeline {name}: expected {s}.{k} = {v!r}" for s, k, v in expected
                     if _lookup(document, s, k) != v]
    print(f"\n{'pipeline mutation':<38} | caught")
    for name, plan, old, new in PIPELINE_MUTATIONS:
        text = texts.get(plan)
        if text is None or old not in text:
            failures.append(f"pipeline mutation '{name}': {plan} has no '{old}'")
            continue
        problems = check_document(tomllib.loads(text.replace(old, new)), PIPELINE_WORLD)
        print(f"{name:<38} | {'yes: ' + problems[0][:80] if problems else 'no'}")
        if not problems:
            failures.append(f"pipeline mutation '{name}' was not caught")
    return failures


def run_plan(binary, directory, cluster, flags):
    out_dir = tempfile.mkdtemp(dir=directory)
    command = [binary, "plan", *BASE, "-c", cluster, *flags, "--export", "torchtitan", "--out-dir", out_dir]
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    return command, result, os.path.join(out_dir, "torchtitan_job.toml")


def main():
    binary = os.environ.get("SHARDPLAN_BIN", "build/shardplan")
    failures = []
    texts = {}
    with tempfile.TemporaryDirectory(prefix="shardplan-torchtitan-checker-") as directory:
        print(f"{'plan':<20} | {'keys':>4} | fields & types | degrees = world | kind")
        for name, cluster, flags, expected in PLANS:
            precision = [] if "--precision" in flags or name == PRECISION_OMITTED else FP32_REDUCE
            command, result, path = run_plan(binary, directory, cluster, precision + flags)
            if result.returncode != 0 or not os.path.exists(path):
                failures.append(f"{name}: {' '.join(command)}: exit {result.returncode}: {result.stderr.strip()}")
                print(f"{name:<20} | not generated")
                continue
            with open(path, encoding="utf-8") as stream:
                texts[name] = stream.read()
            document = tomllib.loads(texts[name])
            problems = check_document(document, world_size(cluster))
            wrong_kind = [f"{s}.{k}" for s, k, v in expected if _lookup(document, s, k) != v]
            types_ok = not [p for p in problems if "degree" not in p and "global_batch" not in p]
            degrees_ok = not [p for p in problems if "degree" in p or "global_batch" in p]
            keys = sum(1 for _ in leaves(document))
            print(f"{name:<20} | {keys:>4} | {'ok' if types_ok else 'FAIL':<14} | {'ok' if degrees_ok else 'FAIL':<15} | "
                  f"{'ok' if not wrong_kind else 'FAIL'}")
            failures += [f"{name}: {p}" for p in problems]
            failures += [f"{name}: expected {s}.{k} = {v!r}" for s, k, v in expected if _lookup(document, s, k) != v]

        print(f"\n{'refused plan':<20} | exit | one line | no file | reason")
        for name, flags, reason in REFUSED:
            precision = [] if "--precision" in flags else FP32_REDUCE
            command, result, path = run_plan(binary, directory, "8xH100-80GB", precision + flags)
            message = result.stderr.strip()
            one_line = message.count("\n") == 0 and "--export torchtitan:" in message and reason in message
            ok = result.returncode == 2 and one_line and not os.path.exists(path)
            print(f"{name:<20} | {result.returncode:>4} | {'ok' if one_line else 'FAIL':<8} | "
                  f"{'ok' if not os.path.exists(path) else 'FAIL':<7} | {message[:100]}")
            if not ok:
                failures.append(f"refused plan '{name}': {' '.join(command)}: exit {result.returncode}: {message}")

        print(f"\n{'mutation':<34} | caught")
        for name, plan, old, new in MUTATIONS:
            text = texts.get(plan)
            if text is None or old not in text:
                failures.append(f"mutation '{name}': the {plan} config has no '{old}'")
                continue
            cluster = next(c for n, c, _, _ in PLANS if n == plan)
            problems = check_document(tomllib.loads(text.replace(old, new)), world_size(cluster))
            print(f"{name:<34} | {'yes: ' + problems[0][:80] if problems else 'no'}")
            if not problems:
                failures.append(f"mutation '{name}' was not caught")
        failures += check_pipeline_plans(directory)
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


def _lookup(document, section, key):
    table = document
    for part in section.split("."):
        table = table.get(part, {})
    return table.get(key)


if __name__ == "__main__":
    sys.exit(main())
