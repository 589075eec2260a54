"""The Python module (`import shardplan`) against the binary: the same inputs give the same documents, bad input
raises with the CLI's own one-line message, and importing it loads no CUDA library (README: "Python API")."""
import json
import os
import subprocess
import tempfile
import unittest

import shardplan

BIN = os.environ["SHARDPLAN_BIN"]  # meson test sets it to build/shardplan

# Keys that measure how long the command ran, not what it answered.
TIMING_KEYS = {"seconds"}


def cli(*args):
    """Runs the binary; returns (exit status, stdout, stderr)."""
    done = subprocess.run([BIN, *args], capture_output=True, text=True)
    return done.returncode, done.stdout, done.stderr


def cli_json(*args, status=0):
    code, out, err = cli(*args, "--json")
    assert code == status, (args, code, err)
    return json.loads(out)


def untimed(document):
    """The document without its timing fields (at any depth)."""
    if isinstance(document, dict):
        return {key: untimed(value) for key, value in document.items() if key not in TIMING_KEYS}
    if isinstance(document, list):
        return [untimed(value) for value in document]
    return document


class SameDocuments(unittest.TestCase):
    def test_estimate(self):
        self.assertEqual(
            shardplan.estimate(model="llama3-8b", cluster="8xH100-80GB", seq_len=4096, ac="full", no_sync=True),
            cli_json("estimate", "--model", "llama3-8b", "--cluster", "8xH100-80GB", "--seq-len", "4096",
                     "--ac", "full", "--no-sync"))

    def test_plan_has_the_prediction(self):
        document = shardplan.plan(model="llama3-8b", cluster="8xH100-80GB")
        self.assertTrue(document["feasible"])
        self.assertGreater(document["predicted"]["step_time_s"], 0)
        for key in ("plan", "predicted", "baselines", "search", "host_memory"):
            self.assertIn(key, document)
        self.assertEqual(untimed(document),
                         untimed(cli_json("plan", "--model", "llama3-8b", "--cluster", "8xH100-80GB")))

    def test_model_cluster_and_plan_as_dicts(self):
        with open("examples/models/llama-1b.json") as model_file:
            model = json.load(model_file)
        cluster = {"gpu": "H100-80GB", "nodes": 1, "gpus_per_node": 4}
        planned = shardplan.plan(model=model, cluster=cluster, seq_len=2048)
        with tempfile.TemporaryDirectory() as tmp:
            cluster_path = os.path.join(tmp, "cluster.json")
            with open(cluster_path, "w") as cluster_file:
                json.dump(cluster, cluster_file)
            from_files = cli_json("plan", "-m", "examples/models/llama-1b.json", "-c", cluster_path,
                                  "--seq-len", "2048")
            self.assertEqual(untimed(planned), untimed(from_files))
            plan_path = os.path.join(tmp, "plan.json")
            with open(plan_path, "w") as plan_file:
                json.dump(planned["plan"], plan_file)
            # simulate takes the planned plan as a dict as the CLI takes its file, and predicts the same step.
            simulated = shardplan.simulate(model=model, cluster=cluster, plan=planned["plan"])
            self.assertEqual(simulated, cli_json("simulate", "-m", "examples/models/llama-1b.json", "-c",
                                                 cluster_path, "--plan", plan_path))
            self.assertEqual(simulated["step_time_s"], planned["predicted"]["step_time_s"])

    def test_capacity_takes_a_list_of_gpus(self):
        document = shardplan.capacity(model="llama2-7b", gpus=["A100-80GB", "H100-80GB"], max_gpus=16, seq_len=2048)
        self.assertEqual(untimed(document),
                         untimed(cli_json("capacity", "-m", "llama2-7b", "--gpus", "A100-80GB,H100-80GB",
                                          "--max-gpus", "16", "--seq-len", "2048")))
        self.assertEqual({point["gpu"] for point in document["points"]}, {"A100-80GB", "H100-80GB"})

    def test_nothing_fits_is_a_document_not_an_error(self):
        document = shardplan.plan(model="llama3-70b", cluster="8xH100-80GB", memory_cap=2)
        self.assertFalse(document["feasible"])
        self.assertIn("diagnosis", document)
        code, _, _ = cli("plan", "--model", "llama3-70b", "--cluster", "8xH100-80GB", "--memory-cap", "2")
        self.assertEqual(code, 3)


class CliErrors(unittest.TestCase):
    """Each error raises shardplan.InputError whose message is exactly the line the CLI prints (exit status 2)."""

    def assert_same_error(self, call, args):
        with self.assertRaises(shardplan.InputError) as raised:
            call()
        code, out, err = cli(*args)
        self.assertEqual(code, 2)
        self.assertEqual(out, "")
        self.assertEqual(str(raised.exception), err.rstrip("\n"))
        self.assertEqual(raised.exception.status, 2)
        self.assertIsInstance(raised.exception, ValueError)
        self.assertIsInstance(raised.exception, shardplan.Error)
        return str(raised.exception)

    def test_unknown_preset_suggests_the_closest(self):
        message = self.assert_same_error(lambda: shardplan.plan(model="llama3-9b", cluster="8xH100-80GB"),
                                         ["plan", "--model", "llama3-9b", "--cluster", "8xH100-80GB", "--json"])
        self.assertIn("did you mean 'llama3-8b'", message)

    def test_flag_out_of_range(self):
        message = self.assert_same_error(
            lambda: shardplan.estimate(model="llama3-8b", cluster="8xH100-80GB", seq_len=0),
            ["estimate", "--json", "--model", "llama3-8b", "--cluster", "8xH100-80GB", "--seq-len", "0"])
        self.assertIn("--seq-len", message)

    def test_bad_field_of_a_dict_names_it(self):
        cluster = {"gpu": "H100-80GB", "nodes": 0}
        message = self.assert_same_error(
            lambda: shardplan.estimate(model="llama3-8b", cluster=cluster),
            ["estimate", "--json", "--model", "llama3-8b", "--cluster", json.dumps(cluster)])
        self.assertIn("cluster (inline JSON): field 'nodes'", message)

    def test_unknown_gpu_in_capacity(self):
        self.assert_same_error(lambda: shardplan.capacity(model="gpt2", gpus=["H100-8GB"]),
                               ["capacity", "--json", "-m", "gpt2", "--gpus", "H100-8GB"])

    def test_unknown_keyword_suggests_the_closest(self):
        with self.assertRaises(shardplan.InputError) as raised:
            shardplan.plan(model="llama3-8b", cluster="8xH100-80GB", memory_capp=40)
        self.assertEqual(str(raised.exception),
                         "shardplan: error: plan: unknown argument 'memory_capp' (did you mean 'memory_cap'?)")

    def test_a_model_name_past_name_max_is_input(self):
        # Issue 37. Reverted (the throwing std::filesystem::is_regular_file): InternalError "File name too long".
        llamas = "\U0001F999" * 1000
        message = self.assert_same_error(lambda: shardplan.estimate(model=llamas, cluster="8xH100-80GB"),
                                         ["estimate", "--json", "--model", llamas, "--cluster", "8xH100-80GB"])
        self.assertIn("unknown model", message)
        self.assertIn("\u2026 (4000 bytes)", message)
        self.assert_same_error(lambda: shardplan.estimate(model="/dev/zero", cluster="8xH100-80GB"),
                               ["estimate", "--json", "--model", "/dev/zero", "--cluster", "8xH100-80GB"])

    def test_values_python_cannot_convert_are_input_errors(self):
        # Issue 37. Reverted (no Note [Python values]): RuntimeError "Unable to cast Python instance", ValueError,
        # RecursionError.
        circular = {}
        circular["a"] = circular
        deep = {}
        node = deep
        for _ in range(100000):
            node["x"] = {}
            node = node["x"]
        for call in [lambda: shardplan.estimate(model="\udc80", cluster="8xH100-80GB"),
                     lambda: shardplan.estimate(model="gpt2", cluster="8xH100-80GB", seq_len=10 ** 5000),
                     lambda: shardplan.estimate(model=circular, cluster="8xH100-80GB"),
                     lambda: shardplan.estimate(model=deep, cluster="8xH100-80GB"),
                     lambda: shardplan.capacity(model="gpt2", gpus=["\udc80"]),
                     lambda: shardplan.estimate(**{"\ud800": 1, "model": "gpt2", "cluster": "8xH100-80GB"})]:
            with self.assertRaises(shardplan.InputError) as raised:
                call()
            self.assertEqual(raised.exception.status, 2)
            self.assertNotIn("\n", str(raised.exception))

    def test_a_flag_takes_a_bool(self):
        with self.assertRaises(shardplan.InputError) as raised:
            shardplan.estimate(model="llama3-8b", cluster="8xH100-80GB", no_sync="yes")
        self.assertIn("argument 'no_sync': expected True or False", str(raised.exception))


class Light(unittest.TestCase):
    def test_no_cuda_nccl_or_mpi_in_the_process(self):
        shardplan.estimate(model="llama3-8b", cluster="8xH100-80GB")
        with open("/proc/self/maps") as maps:
            mapped = maps.read()
        for library in ("libcudart", "libcublas", "libnccl", "libmpi"):
            self.assertNotIn(library, mapped)


if __name__ == "__main__":
    unittest.main(verbosity=2)
