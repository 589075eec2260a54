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
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402  (tests/python/with-torch skips the test where torch is missing)
import torchvision  # noqa: E402

import llama_reference  # noqa: E402
from shardplan_torch import measure, module_tree  # noqa: E402

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

    @unittest.expectedFailure
    def test_block_saved_bytes_agree(self):
        # Known disagreement (issue 17 report): autograd keeps 3010 fp32 elements per token in this block (and 4 per
        # position, the softmax output, as shardplan says), shardplan's llama block counts 6h + 2kv + 4f = 2304
        # (decoder_builder.cpp, h = 128, kv = 64, f = 352). The 706 more: each RMSNorm keeps its input, rsqrt and
        # x·rsqrt beside the weighted output, RoPE its cos and sin, and the batched matmuls their folded copies of q,
        # kᵀ and v repeated to every query head. Left to the model's owner: changing it moves every llama estimate.
        # This test fails (expectedly) until the two agree, and then reports an unexpected success.
        for measured, modelled in zip(self.blocks(self.reference), self.blocks(self.preset)):
            self.assertAlmostEqual(measured["kept_activation_bytes"] / modelled["kept_activation_bytes"], 1.0,
                                   delta=0.02)


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
