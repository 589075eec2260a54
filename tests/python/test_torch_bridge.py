#!/usr/bin/env python3
# Tests of the torch bridge (scripts/import-torch, python/shardplan_torch) on models no one here wrote: torchvision's
# ViT-B/16, ViT-H/14 and Swin-T, and a Llama written in plain torch (llama_reference.py) against shardplan's own llama
# model. Each model file is read back by the shardplan binary: parameters equal torch's, plans export the real module
# paths, and the bytes a block keeps for backward, fitted from two token counts, match what autograd saves at a third.
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402  (tests/python/with-torch skips the test where torch is missing)
import torchvision  # noqa: E402

import llama_reference  # noqa: E402
from shardplan_torch import measure, meta_trace, module_tree  # noqa: E402

BIN = os.environ.get("SHARDPLAN_BIN", os.path.join(ROOT, "build", "shardplan"))
IMPORT = os.path.join(ROOT, "scripts", "import-torch")
WORK = tempfile.mkdtemp(prefix="torch-bridge-")


def import_torch(callable_name, out_name, *extra):
    out = os.path.join(WORK, out_name)
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=HERE)
    done = subprocess.run([IMPORT, callable_name, "--out", out, *extra], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise AssertionError(f"import-torch {callable_name} failed ({done.returncode}): {done.stderr}")
    with open(out) as handle:
        return out, json.load(handle)


def shardplan(*args):
    done = subprocess.run([BIN, *args], capture_output=True, text=True, cwd=WORK)
    if done.returncode != 0:
        raise AssertionError(f"shardplan {' '.join(args)} failed ({done.returncode}): {done.stderr}")
    return done.stdout


def estimate(model_file, *args):
    return json.loads(shardplan("estimate", "--model", model_file, "--cluster", "8xRTX4090", "--json", *args))


def autograd_saved_per_block(model, example_input, block_class):
    """What autograd keeps for each block when the whole model runs forward at this input (attributed to the block
    running when each tensor was saved): bytes per block path."""
    blocks = module_tree.wrap_instances(model, {block_class})
    groups = module_tree.parameter_groups(model, blocks, [])
    whole = measure.whole_model_pass(model, example_input, [g["path"] for g in groups], blocks)
    return {path: whole["saved"][path].floating_bytes + whole["saved"][path].other_bytes for path in blocks}


def assert_saved_bytes_match(test, model_file, built_at_third_size, image, block_class, tokens):
    """The model file's fit (two token counts) against autograd at a third (an image of another size), in fp32
    without flash attention, the regime the bridge measured in: within 2% per block."""
    measured = autograd_saved_per_block(built_at_third_size, image, block_class)
    predicted = {layer["name"]: layer["kept_activation_bytes"]
                 for layer in estimate(model_file, "--seq-len", str(tokens), "--micro-batch", "1", "--precision",
                                       "fp32", "--attention", "eager", "--ac", "none")["layers"]}
    test.assertTrue(measured)
    for path, saved in measured.items():
        test.assertAlmostEqual(predicted[path] / saved, 1.0, delta=0.02, msg=f"{path}: {predicted[path]} vs {saved}")
    print(f"  {os.path.basename(model_file)} at {tokens} tokens: {len(measured)} blocks, autograd "
          f"{min(measured.values())}..{max(measured.values())} bytes, shardplan "
          f"{min(predicted[p] for p in measured)}..{max(predicted[p] for p in measured)}", file=sys.stderr)


class VitB16(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path, cls.doc = import_torch("torchvision.models.vit_b_16", "vit_b_16.json")
        cls.torch_params = sum(p.numel() for p in torchvision.models.vit_b_16().parameters())

    def test_parameters_equal_torch(self):
        self.assertEqual(self.doc["params"], self.torch_params)
        self.assertEqual(estimate(self.path)["params"], self.torch_params)  # 86,567,656

    def test_wrap_candidates_are_the_encoder_blocks(self):
        self.assertEqual(self.doc["wrap_candidates"], ["torchvision.models.vision_transformer.EncoderBlock"])
        blocks = [layer["name"] for layer in self.doc["layers"] if layer["kind"] == "transformer_block"]
        self.assertEqual(blocks, [f"encoder.layers.encoder_layer_{i}" for i in range(12)])
        block = next(layer for layer in self.doc["layers"] if layer["kind"] == "transformer_block")
        # 4 h² + 2 h·4h multiply-adds per token (q, k, v, out_proj, MLP), h = 768; QKᵀ and P·V 4·h per position.
        self.assertEqual(block["matmul_flops_per_token"], 2 * (4 * 768 ** 2 + 2 * 768 * 3072))
        self.assertEqual(block["attention_flops_per_token_per_position"], 4 * 768)
        self.assertFalse(block["causal"])

    def test_saved_bytes_at_a_third_image_size(self):
        # 288 px / 16 = 18 patches a side: 325 tokens (the fit came from 197 and 394).
        model = torchvision.models.vit_b_16(image_size=288)
        image = torch.randn(1, 3, 288, 288, generator=torch.Generator().manual_seed(1))
        assert_saved_bytes_match(self, self.path, model, image,
                                 "torchvision.models.vision_transformer.EncoderBlock", 325)


class VitH14(unittest.TestCase):
    """Must-show 2 of issue 17."""

    @classmethod
    def setUpClass(cls):
        cls.path, cls.doc = import_torch("torchvision.models.vit_h_14", "vit_h_14.json")

    def test_parameters_equal_torch_and_a_plan_wraps_the_encoder_layers(self):
        torch_params = sum(p.numel() for p in torchvision.models.vit_h_14().parameters())
        self.assertEqual(estimate(self.path)["params"], torch_params)  # 632,045,800 at 224 px
        shardplan("plan", "--model", self.path, "--cluster", "8xRTX4090", "--out", "vit_h_14-plan.json",
                  "--export", "fsdp2")
        with open(os.path.join(WORK, "fsdp2_plan.py")) as handle:
            exported = handle.read()
        tables = {}
        exec(compile(exported, "fsdp2_plan.py", "exec"), tables)  # torch is imported only inside apply_plan
        wrapped = [path for group in tables["PLANNED_GROUPS"][1:] for path in group]  # every unit but the root
        self.assertEqual(sorted(wrapped), sorted(f"encoder.layers.encoder_layer_{i}" for i in range(32)))
        for i in range(32):
            self.assertRegex(exported, rf"fully_shard\(\[?[^)]*model\.encoder\.layers\.encoder_layer_{i}\b")

    def test_saved_bytes_at_a_third_image_size(self):
        # 280 px / 14 = 20 patches a side: 401 tokens (the fit came from 257 and 514). ViT-H/14's blocks exactly
        # (hidden 1280, MLP 5120, 16 heads) in a 2-block VisionTransformer, so the CPU runs 2 blocks, not 32.
        model = torchvision.models.VisionTransformer(image_size=280, patch_size=14, num_layers=2, num_heads=16,
                                                     hidden_dim=1280, mlp_dim=5120)
        image = torch.randn(1, 3, 280, 280, generator=torch.Generator().manual_seed(1))
        assert_saved_bytes_match(self, self.path, model, image,
                                 "torchvision.models.vision_transformer.EncoderBlock", 401)


class SwinT(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.path, cls.doc = import_torch("torchvision.models.swin_t", "swin_t.json")

    def test_parameters_and_blocks_of_four_sizes(self):
        torch_params = sum(p.numel() for p in torchvision.models.swin_t().parameters())
        self.assertEqual(estimate(self.path)["params"], torch_params)  # 28,288,354
        self.assertEqual(self.doc["wrap_candidates"], ["torchvision.models.swin_transformer.PatchMerging",
                                                        "torchvision.models.swin_transformer.SwinTransformerBlock"])
        blocks = [layer for layer in self.doc["layers"] if layer["kind"] == "transformer_block"]
        self.assertEqual(len(blocks), 12 + 3)
        self.assertEqual(blocks[0]["name"], "features.1.0")
        # Stages of 96, 192, 384, 768 channels on 56², 28², 14², 7² tokens: per input token the blocks of every stage
        # do about the same matmul work (channels² × 4, tokens ÷ 4), the last stage's holds 64× the parameters and
        # keeps far less; windowed attention has no term that grows with the image.
        stage = {b["name"].split(".")[1]: b for b in blocks}
        params = lambda block: sum(math.prod(t["shape"]) for t in block["tensors"])  # noqa: E731
        self.assertGreater(params(stage["7"]), 60 * params(stage["1"]))
        self.assertAlmostEqual(stage["7"]["matmul_flops_per_token"] / stage["1"]["matmul_flops_per_token"], 1.0,
                               delta=0.1)
        self.assertLess(stage["7"]["activation_elements_per_token"], stage["1"]["activation_elements_per_token"] / 4)
        self.assertEqual(stage["1"]["attention_flops_per_token_per_position"], 0.0)

    def test_plan_exports_the_real_module_paths(self):
        shardplan("plan", "--model", self.path, "--cluster", "8xRTX4090", "--out", "swin-plan.json",
                  "--export", "fsdp2")
        with open(os.path.join(WORK, "fsdp2_plan.py")) as handle:
            exported = handle.read()
        for path in ("features.1.0", "features.2", "features.5.5", "features.7.1"):
            self.assertIn(f'"{path}"', exported)


class LlamaReference(unittest.TestCase):
    """A Llama in plain torch (llama_reference.py, as HF's modeling_llama runs it) against shardplan's tiny-llama."""

    @classmethod
    def setUpClass(cls):
        cls.path, cls.doc = import_torch("llama_reference.tiny_llama", "tiny_llama_reference.json",
                                         "--input", "tokens:128", "--causal")
        flags = ("--seq-len", "128", "--micro-batch", "1", "--precision", "fp32", "--attention", "eager")
        cls.reference = estimate(cls.path, *flags)["layers"]
        cls.preset = estimate("tiny-llama", *flags)["layers"]

    def blocks(self, layers):
        return [layer for layer in layers if layer["kind"] == "transformer_block"]

    def test_parameters_agree(self):
        self.assertEqual([l["params"] for l in self.reference], [l["params"] for l in self.preset])
        self.assertEqual(self.doc["params"], sum(p.numel() for p in llama_reference.tiny_llama().parameters()))

    def test_block_flops_agree(self):
        for measured, modelled in zip(self.blocks(self.reference), self.blocks(self.preset)):
            self.assertEqual(measured["forward_flops_per_token"], modelled["forward_flops_per_token"])

    def test_attention_scores_kept_agree(self):
        # The s² term alone: the softmax output, one fp32 element per head per position (4 heads).
        block = self.blocks(self.doc["layers"])[0]
        self.assertAlmostEqual(block["activation_score_elements_per_token_per_position"], 4.0, places=3)

    def test_block_saved_bytes_agree(self):
        # shardplan's eager llama block (Note [Eager composite activations], decoder_builder.cpp) against the bridge's
        # fit of what autograd saved, in fp32: 6h + 4q + 4f + 2 = 2690 elements per token (h = q = 128, kv = 64,
        # f = 352) and the softmax output, 4 per position. The rotary tables are the model's, handed to every block
        # alike, so neither side counts them per block. Torch before 2.2 also keeps each RMSNorm's x² (mean's input,
        # pytorch/pytorch#109876, fixed by #109935): 2h more, which the model of current torch does not count.
        h, tokens = 128, 128
        older_mean = 2 * h * 4 * tokens if mean_keeps_its_input() else 0
        for measured, modelled in zip(self.blocks(self.reference), self.blocks(self.preset)):
            self.assertAlmostEqual(measured["kept_activation_bytes"] / (modelled["kept_activation_bytes"] + older_mean),
                                   1.0, delta=0.02)
        block = self.blocks(self.doc["layers"])[0]
        self.assertAlmostEqual(block["activation_elements_per_token"], 2690 + (2 * h if older_mean else 0), delta=0.1)

    def test_block_saved_bytes_agree_in_bf16(self):
        # The reference block in bf16, measured directly (the bridge measures in fp32): each RMSNorm keeps its input
        # upcast to fp32 and an fp32 rsqrt, softmax(dtype=float32) its fp32 output beside P·V's bf16 cast of it.
        tokens, h = 128, 128
        model = llama_reference.tiny_llama().to(torch.bfloat16)
        x = torch.randn(1, tokens, h, dtype=torch.bfloat16, generator=torch.Generator().manual_seed(2))
        cos, sin = llama_reference.rotary_tables(tokens, model.layers[0].head_dim, torch.bfloat16)
        saved = measure.measure_block(model.layers[0], (x, cos, sin), 1, shared=(1, 2))["saved_floating_bytes"]
        modelled = self.blocks(estimate("tiny-llama", "--seq-len", str(tokens), "--micro-batch", "1", "--precision",
                                        "bf16-mixed", "--attention", "eager")["layers"])[0]["kept_activation_bytes"]
        older_mean = 2 * h * 4 * tokens if mean_keeps_its_input() else 0  # fp32 x², as in fp32
        self.assertAlmostEqual(saved / (modelled + older_mean), 1.0, delta=0.02)
        # The fused path counts no fp32 norm inputs: eager keeps more, by the terms above.
        fused = self.blocks(estimate("tiny-llama", "--seq-len", str(tokens), "--micro-batch", "1", "--precision",
                                     "bf16-mixed")["layers"])[0]["kept_activation_bytes"]
        self.assertLess(fused, modelled)


def mean_keeps_its_input():
    """Whether this torch's mean.dim saves its input for backward (before 2.2: pytorch/pytorch#109876)."""
    x = torch.ones(2, 2, requires_grad=True)
    return hasattr(x.mean(-1, keepdim=True).grad_fn, "_saved_self")


class Fast(unittest.TestCase):
    """--fast (issue 36): ViT-H/14 took ~10 minutes with no output. Built without initialisers and traced on the meta
    device it takes seconds, says what it does on stderr, and gives the full path's layers."""

    def test_vit_h_14_in_seconds_with_progress(self):
        out = os.path.join(WORK, "vit_h_14-fast.json")
        env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=HERE)
        start = time.monotonic()
        done = subprocess.run([IMPORT, "torchvision.models.vit_h_14", "--fast", "--out", out], capture_output=True,
                              text=True, env=env)
        seconds = time.monotonic() - start
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertLess(seconds, 90)  # ~15 s on 2 busy cores; the full path runs minutes
        progress = [line for line in done.stderr.splitlines() if line.startswith("import-torch: [")]
        self.assertGreaterEqual(len(progress), 4, done.stderr)
        self.assertIn("built VisionTransformer: 632,045,800 parameters", done.stderr)
        with open(out) as handle:
            doc = json.load(handle)
        with meta_trace.initialisers_skipped():  # the count does not depend on the values
            torch_params = sum(p.numel() for p in torchvision.models.vit_h_14().parameters())
        self.assertEqual(doc["params"], torch_params)
        self.assertEqual(estimate(out)["params"], torch_params)
        self.assertEqual(doc["name"], "VisionTransformer")  # the class, not the factory function
        self.assertTrue(doc["source"]["fast"])

    def test_same_layers_as_the_full_path(self):
        _, full = import_torch("torchvision.models.vit_b_16", "vit_b_16-full.json", "--quiet")
        _, fast = import_torch("torchvision.models.vit_b_16", "vit_b_16-fast.json", "--fast", "--quiet")
        self.assertEqual(len(full["layers"]), len(fast["layers"]))
        for a, b in zip(full["layers"], fast["layers"]):
            for key in a:
                if key != "measured":
                    self.assertEqual(a[key], b[key], (a["name"], key))


class BadInput(unittest.TestCase):
    def test_an_unknown_callable_is_one_line_and_exit_2(self):
        done = subprocess.run([IMPORT, "torchvision.models.no_such_model", "--out", os.path.join(WORK, "x.json")],
                              capture_output=True, text=True, env=dict(os.environ, PYTHON=sys.executable))
        self.assertEqual(done.returncode, 2)
        self.assertEqual(len(done.stderr.strip().splitlines()), 1, done.stderr)
        self.assertIn("no_such_model", done.stderr)
        self.assertFalse(os.path.exists(os.path.join(WORK, "x.json")))


if __name__ == "__main__":
    unittest.main(verbosity=2)
