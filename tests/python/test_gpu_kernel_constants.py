#!/usr/bin/env python3
# Tests of benchmarks/gpu_kernel_constants.py's profile: fitted from synthetic measurements the op-level model itself
# generates, the GEMM curve, attention plateaus and s½, bandwidth and launch cost come back, and the profile applies.
import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import gpu_kernel_constants as constants  # noqa: E402  (no torch needed: it is imported inside main)

RATE, HALF = 900e12, 5e9                       # GEMM plateau (FLOP/s) and fixed cost (FLOPs)
FORWARD, BACKWARD, LENGTH_HALF = 330e12, 300e12, 400


def synthetic_document(head_dim=128):
    gemm = []
    for m, n, k in [(4096, 4096, 4096), (4096, 1024, 1024), (2048, 2048, 2048), (1024, 1024, 1024),
                    (8192, 8192, 8192), (4096, 14336, 4096)]:
        flops = 2.0 * m * n * k
        gemm.append({"m": m, "n": n, "k": k, "seconds": (flops + HALF) / RATE})
    scale = 0.89 if head_dim <= 64 else 1.0
    attention = [{"seq_len": s, "backend": "flash", "head_dim": head_dim,
                  "forward_tflop_per_s": FORWARD * scale * s / (s + LENGTH_HALF) / 1e12,
                  "backward_tflop_per_s": BACKWARD * scale * s / (s + LENGTH_HALF) / 1e12}
                 for s in (512, 1024, 2048, 4096, 8192)]
    attention.append({"seq_len": 512, "backend": "default", "head_dim": head_dim, "forward_tflop_per_s": 1.0,
                      "backward_tflop_per_s": 1.0})
    return {"device": {"name": "synthetic"}, "gemm": gemm, "attention": attention,
            "memory_bandwidth": {"elementwise_add_bytes_per_s": 4.0e12},
            "launch": {"eager_launch_seconds": 6e-6}}


class ProfileFromMeasurements(unittest.TestCase):
    def test_the_model_parameters_come_back(self):
        compute = constants.profile_from_measurements(synthetic_document())["compute"]
        self.assertAlmostEqual(compute["peak_bf16_flops"] / RATE, 1.0, places=6)
        self.assertAlmostEqual(compute["half_efficiency_flops"] / HALF, 1.0, places=4)
        self.assertAlmostEqual(compute["attention_forward_efficiency"], FORWARD / RATE, places=3)
        self.assertAlmostEqual(compute["attention_backward_efficiency"], BACKWARD / RATE, places=3)
        self.assertEqual(compute["attention_half_seq_len"], LENGTH_HALF)
        self.assertEqual(compute["hbm_bytes_per_s"], 4.0e12)
        self.assertEqual(compute["kernel_dispatch_s"], 6e-6)

    def test_small_head_dims_are_scaled_to_the_plateau(self):
        compute = constants.profile_from_measurements(synthetic_document(head_dim=64))["compute"]
        self.assertAlmostEqual(compute["attention_forward_efficiency"], FORWARD / RATE, places=3)

    def test_too_few_gemms_is_an_error(self):
        with self.assertRaises(ValueError):
            constants.fit_gemm_curve([{"m": 1, "n": 1, "k": 1, "seconds": 1.0}])

    def test_the_sustained_rate_is_the_second_half_median(self):
        # Note [Sustained rate]: a clock that drops over the first windows and settles; the first half is left out.
        windows = [800e12, 780e12, 760e12, 745e12, 740e12, 741e12, 739e12, 740e12]
        summary = constants.sustained_summary(800e12, windows)
        self.assertEqual(summary["first_window_per_s"], 800e12)
        self.assertEqual(summary["sustained_per_s"], 740e12)
        self.assertAlmostEqual(summary["fraction"], 740 / 800)
        self.assertIsNone(constants.sustained_summary(800e12, []))
        self.assertIsNone(constants.sustained_summary(0.0, windows))

    def test_sustained_rates_set_the_clock_and_attention(self):
        # The GEMM keeps 0.9 of its short rate and attention 0.8: the profile's clock is the GEMM's, and attention's
        # plateaus come out at their own sustained rates (clock × efficiency × peak).
        document = synthetic_document()
        document["sustained"] = [
            {"name": "GEMM 8192^3 bf16", "summary": constants.sustained_summary(RATE, [RATE * 0.9] * 4)},
            {"name": "SDPA flash causal fwd+bwd, seq 8192", "summary": constants.sustained_summary(1.0, [0.8] * 4)},
            {"name": "SDPA flash causal fwd+bwd, seq 8192", "error": "not run"}]
        compute = constants.profile_from_measurements(document)["compute"]
        self.assertAlmostEqual(compute["clock_fraction"], 0.9)
        peak = compute["peak_bf16_flops"] * compute["clock_fraction"]
        self.assertAlmostEqual(peak * compute["attention_forward_efficiency"] / (FORWARD * 0.8), 1.0, places=3)
        self.assertAlmostEqual(peak * compute["attention_backward_efficiency"] / (BACKWARD * 0.8), 1.0, places=3)
        # Without attention's own measurement it throttles as the GEMM does.
        document["sustained"] = document["sustained"][:1]
        compute = constants.profile_from_measurements(document)["compute"]
        peak = compute["peak_bf16_flops"] * compute["clock_fraction"]
        self.assertAlmostEqual(peak * compute["attention_forward_efficiency"] / (FORWARD * 0.9), 1.0, places=3)
        # A sustained rate above the short one (noise) never raises the clock past 1.
        document["sustained"] = [{"name": "GEMM 8192^3 bf16", "summary": constants.sustained_summary(1.0, [1.02] * 4)}]
        self.assertEqual(constants.profile_from_measurements(document)["compute"]["clock_fraction"], 1.0)

    def test_the_profile_applies(self):
        binary = os.environ.get("SHARDPLAN_BIN")
        if not binary:
            self.skipTest("SHARDPLAN_BIN not set (meson test sets it)")
        with tempfile.TemporaryDirectory() as work:
            path = os.path.join(work, "profile.json")
            with open(path, "w") as stream:
                json.dump(constants.profile_from_measurements(synthetic_document()), stream)

            def step(extra):
                out = subprocess.run([binary, "simulate", "-m", "llama3-8b", "-c", "1xH200-141GB", "--seq-len", "2048",
                                      "--json", *extra], capture_output=True, text=True)
                self.assertEqual(out.returncode, 0, out.stderr)
                return json.loads(out.stdout)["step_time_s"]

            # A 900 TFLOP/s plateau with efficiency 1 is faster than the H200 catalog's 0.8 × 989 (its clock_fraction 1).
            self.assertLess(step(["--profile", path]), step([]))


if __name__ == "__main__":
    unittest.main()
