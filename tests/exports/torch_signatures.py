# The real signatures of the torch / torchao / PEFT / transformers calls the FSDP2 export writes, as of PyTorch 2.6
# (the export's minimum: fully_shard on a list of modules), each with the source file it was read from.
#
# A Signature lists the parameters a call may name: `positional` (in order, may also be passed by keyword),
# `keyword_only`, `required` (must be given) and whether **kwargs are accepted. Keywords added after 2.6 are left out
# on purpose (fully_shard's ignored_params is 2.7, parallelize_module's src_data_rank 2.7, init_device_mesh's
# backend_override 2.8): a script that uses them does not run on every torch the export claims.


class Signature:
    def __init__(self, source, positional=(), keyword_only=(), required=(), var_keyword=False, var_positional=False):
        self.source = source
        self.positional = list(positional)
        self.keyword_only = list(keyword_only)
        self.required = list(required)
        self.var_keyword = var_keyword
        self.var_positional = var_positional

    def names(self):
        return self.positional + self.keyword_only


FSDP_API = "torch/distributed/fsdp/_fully_shard/_fsdp_api.py"
FULLY_SHARD = "torch/distributed/fsdp/_fully_shard/_fully_shard.py"
DEVICE_MESH = "torch/distributed/device_mesh.py"
TP_STYLE = "torch/distributed/tensor/parallel/style.py"
FLOAT8_TP = "torchao/float8/float8_tensor_parallel.py"
# PrepareModuleInput's keywords; torchao's PrepareFloat8ModuleInput adds its float8 ones.
PREPARE_INPUT = ["input_layouts", "desired_input_layouts", "input_kwarg_layouts", "desired_input_kwarg_layouts",
                 "use_local_output"]

# Functions and classes, by the qualified name they are imported under.
CALLABLES = {
    # def fully_shard(module, *, mesh=None, reshard_after_forward=True, shard_placement_fn=None,
    #                 mp_policy=MixedPrecisionPolicy(), offload_policy=OffloadPolicy())  (torch 2.6)
    "torch.distributed.fsdp.fully_shard": Signature(
        FULLY_SHARD, ["module"], ["mesh", "reshard_after_forward", "shard_placement_fn", "mp_policy", "offload_policy"],
        ["module"]),
    # @dataclass(frozen=True) class MixedPrecisionPolicy: param_dtype, reduce_dtype, output_dtype, cast_forward_inputs
    "torch.distributed.fsdp.MixedPrecisionPolicy": Signature(
        FSDP_API, ["param_dtype", "reduce_dtype", "output_dtype", "cast_forward_inputs"]),
    # @dataclass class CPUOffloadPolicy(OffloadPolicy): pin_memory: bool = True
    "torch.distributed.fsdp.CPUOffloadPolicy": Signature(FSDP_API, ["pin_memory"]),
    # def init_device_mesh(device_type: str, mesh_shape: tuple[int, ...], *, mesh_dim_names=None)
    "torch.distributed.device_mesh.init_device_mesh": Signature(
        DEVICE_MESH, ["device_type", "mesh_shape"], ["mesh_dim_names"], ["device_type", "mesh_shape"]),
    # def parallelize_module(module, device_mesh=None, parallelize_plan=None)  (torch 2.6)
    "torch.distributed.tensor.parallel.parallelize_module": Signature(
        "torch/distributed/tensor/parallel/api.py", ["module", "device_mesh", "parallelize_plan"], [], ["module"]),
    # class ColwiseParallel(ParallelStyle): __init__(self, *, input_layouts=None, output_layouts=None,
    #                                                use_local_output=True); RowwiseParallel the same
    "torch.distributed.tensor.parallel.ColwiseParallel": Signature(
        TP_STYLE, [], ["input_layouts", "output_layouts", "use_local_output"]),
    "torch.distributed.tensor.parallel.RowwiseParallel": Signature(
        TP_STYLE, [], ["input_layouts", "output_layouts", "use_local_output"]),
    # class SequenceParallel(ParallelStyle): __init__(self, *, sequence_dim: int = 1, use_local_output: bool = False)
    "torch.distributed.tensor.parallel.SequenceParallel": Signature(TP_STYLE, [], ["sequence_dim", "use_local_output"]),
    # class PrepareModuleInput(ParallelStyle): __init__(self, *, input_layouts=None, desired_input_layouts=None,
    #     input_kwarg_layouts=None, desired_input_kwarg_layouts=None, use_local_output=False)
    "torch.distributed.tensor.parallel.PrepareModuleInput": Signature(TP_STYLE, [], PREPARE_INPUT),
    # def loss_parallel()  (torch/distributed/tensor/parallel/loss.py), a context manager
    "torch.distributed.tensor.parallel.loss_parallel": Signature("torch/distributed/tensor/parallel/loss.py"),
    # class Shard(Placement): dim: int;  class Replicate(Placement)  (torch/distributed/tensor/placement_types.py)
    "torch.distributed.tensor.Shard": Signature("torch/distributed/tensor/placement_types.py", ["dim"], [], ["dim"]),
    "torch.distributed.tensor.Replicate": Signature("torch/distributed/tensor/placement_types.py"),
    # def checkpoint_wrapper(module, checkpoint_impl=CheckpointImpl.NO_REENTRANT, checkpoint_fn=None,
    #                        **checkpoint_fn_kwargs)  — context_fn goes on to torch.utils.checkpoint.checkpoint
    "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.checkpoint_wrapper": Signature(
        "torch/distributed/algorithms/_checkpoint/checkpoint_wrapper.py", ["module", "checkpoint_impl", "checkpoint_fn"],
        [], ["module"], var_keyword=True),
    # def create_selective_checkpoint_contexts(policy_fn_or_list, allow_cache_entry_mutation=False)
    "torch.utils.checkpoint.create_selective_checkpoint_contexts": Signature(
        "torch/utils/checkpoint.py", ["policy_fn_or_list", "allow_cache_entry_mutation"], [], ["policy_fn_or_list"]),
    # def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None, options=None,
    #             disable=False)  (torch/__init__.py)
    "torch.compile": Signature("torch/__init__.py", ["model"], ["fullgraph", "dynamic", "backend", "mode", "options",
                                                                "disable"]),
    # def get_world_size(group=None)  (torch/distributed/distributed_c10d.py)
    "torch.distributed.get_world_size": Signature("torch/distributed/distributed_c10d.py", ["group"]),
    # torch.arange(start, end, step, *, out, dtype, layout, device, requires_grad)  (torch/_torch_docs.py)
    "torch.arange": Signature("torch/_torch_docs.py", ["start", "end", "step"],
                              ["out", "dtype", "layout", "device", "requires_grad"], ["start"]),
    # def convert_to_float8_training(module, *, module_filter_fn=None, config=None)
    "torchao.float8.convert_to_float8_training": Signature(
        "torchao/float8/float8_linear_utils.py", ["module"], ["module_filter_fn", "config"], ["module"]),
    # @dataclass(frozen=True) class Float8LinearConfig (torchao/float8/config.py)
    "torchao.float8.Float8LinearConfig": Signature("torchao/float8/config.py", [
        "cast_config_input", "cast_config_input_for_grad_weight", "cast_config_weight",
        "cast_config_weight_for_grad_input", "cast_config_grad_output", "cast_config_grad_output_for_grad_weight",
        "gemm_config_output", "gemm_config_grad_input", "gemm_config_grad_weight", "enable_fsdp_float8_all_gather",
        "pad_inner_dim", "emulate", "force_recompute_fp8_weight_in_bwd", "round_scales_to_power_of_2"]),
    # Float8LinearConfig.from_recipe_name(recipe_name): "tensorwise", "rowwise", "rowwise_with_gw_hp"
    "torchao.float8.Float8LinearConfig.from_recipe_name": Signature(
        "torchao/float8/config.py", ["recipe_name"], [], ["recipe_name"]),
    # def precompute_float8_dynamic_scale_for_fsdp(module)  (torchao/float8/fsdp_utils.py)
    "torchao.float8.precompute_float8_dynamic_scale_for_fsdp": Signature(
        "torchao/float8/fsdp_utils.py", ["module"], [], ["module"]),
    # Float8ColwiseParallel(ColwiseParallel), Float8RowwiseParallel(RowwiseParallel): the parent's __init__;
    # PrepareFloat8ModuleInput(PrepareModuleInput): __init__(self, *, ..., float8_dtype=torch.float8_e4m3fn,
    #                                                         fwd_config_submodule_fqn=None)
    "torchao.float8.float8_tensor_parallel.Float8ColwiseParallel": Signature(
        FLOAT8_TP, [], ["input_layouts", "output_layouts", "use_local_output"]),
    "torchao.float8.float8_tensor_parallel.Float8RowwiseParallel": Signature(
        FLOAT8_TP, [], ["input_layouts", "output_layouts", "use_local_output"]),
    "torchao.float8.float8_tensor_parallel.PrepareFloat8ModuleInput": Signature(
        FLOAT8_TP, [], PREPARE_INPUT + ["float8_dtype", "fwd_config_submodule_fqn"]),
    # @dataclass class LoraConfig(PeftConfig)  (peft/tuners/lora/config.py; peft_type, task_type from
    # peft/config.py PeftConfigMixin/PeftConfig)
    "peft.LoraConfig": Signature("peft/tuners/lora/config.py", [
        "task_type", "peft_type", "auto_mapping", "base_model_name_or_path", "revision", "inference_mode", "r",
        "target_modules", "exclude_modules", "lora_alpha", "lora_dropout", "fan_in_fan_out", "bias", "use_rslora",
        "modules_to_save", "init_lora_weights", "layers_to_transform", "layers_pattern", "rank_pattern",
        "alpha_pattern", "megatron_config", "megatron_core", "loftq_config", "use_dora", "layer_replication",
        "runtime_config", "lora_bias"]),
    # def get_peft_model(model, peft_config, adapter_name="default", mixed=False, autocast_adapter_dtype=True,
    #                    revision=None, low_cpu_mem_usage=False)  (peft/mapping_func.py; peft/mapping.py before 0.14)
    "peft.get_peft_model": Signature("peft/mapping_func.py", [
        "model", "peft_config", "adapter_name", "mixed", "autocast_adapter_dtype", "revision", "low_cpu_mem_usage"],
        [], ["model", "peft_config"]),
    # class BitsAndBytesConfig(QuantizationConfigMixin): __init__(self, load_in_8bit=False, load_in_4bit=False,
    #     llm_int8_threshold=6.0, llm_int8_skip_modules=None, llm_int8_enable_fp32_cpu_offload=False,
    #     llm_int8_has_fp16_weight=False, bnb_4bit_compute_dtype=None, bnb_4bit_quant_type="fp4",
    #     bnb_4bit_use_double_quant=False, bnb_4bit_quant_storage=None, **kwargs)
    "transformers.BitsAndBytesConfig": Signature("transformers/utils/quantization_config.py", [
        "load_in_8bit", "load_in_4bit", "llm_int8_threshold", "llm_int8_skip_modules",
        "llm_int8_enable_fp32_cpu_offload", "llm_int8_has_fp16_weight", "bnb_4bit_compute_dtype",
        "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_quant_storage"]),
}

# What each import path really exports (a name imported from elsewhere fails the check).
MODULE_EXPORTS = {
    "torch.distributed.fsdp": {"fully_shard", "MixedPrecisionPolicy", "CPUOffloadPolicy", "FSDPModule"},
    "torch.distributed.device_mesh": {"init_device_mesh", "DeviceMesh"},
    "torch.distributed.tensor": {"Shard", "Replicate", "DTensor"},
    "torch.distributed.tensor.parallel": {"parallelize_module", "ColwiseParallel", "RowwiseParallel",
                                          "SequenceParallel", "PrepareModuleInput", "loss_parallel"},
    "torch.distributed.algorithms._checkpoint.checkpoint_wrapper": {"checkpoint_wrapper"},
    "torch.utils.checkpoint": {"CheckpointPolicy", "create_selective_checkpoint_contexts"},
    "torchao.float8": {"Float8LinearConfig", "convert_to_float8_training", "precompute_float8_dynamic_scale_for_fsdp"},
    "torchao.float8.float8_tensor_parallel": {"Float8ColwiseParallel", "Float8RowwiseParallel",
                                              "PrepareFloat8ModuleInput"},
    "peft": {"LoraConfig", "get_peft_model"},
    "transformers": {"BitsAndBytesConfig"},
}

# Methods, by attribute name, on the objects the script calls them on.
METHODS = {
    # FSDPModule.set_modules_to_forward_prefetch(self, modules: list[FSDPModule]) and the backward one
    "set_modules_to_forward_prefetch": Signature(FULLY_SHARD, ["modules"], [], ["modules"]),
    "set_modules_to_backward_prefetch": Signature(FULLY_SHARD, ["modules"], [], ["modules"]),
    # DeviceMesh._flatten(self, mesh_dim_name: Optional[str] = None)
    "_flatten": Signature(DEVICE_MESH, ["mesh_dim_name"]),
    # nn.Module.register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False)
    "register_forward_pre_hook": Signature("torch/nn/modules/module.py", ["hook"], ["prepend", "with_kwargs"],
                                           ["hook"]),
}

# Literal values the libraries accept, where a wrong one fails only at run time.
FLOAT8_RECIPES = {"tensorwise", "rowwise", "rowwise_with_gw_hp"}  # torchao/float8/config.py Float8LinearRecipeName
LORA_BIAS = {"none", "all", "lora_only"}  # peft/tuners/lora/config.py LoraConfig.bias
BNB_QUANT_TYPES = {"nf4", "fp4"}  # bitsandbytes/functional.py quantize_4bit quant_type
