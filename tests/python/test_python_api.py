"""The Python package (`import shardplan`) against the binary: the same inputs give the same documents, bad input
raises with the CLI's own one-line message (as .cli_message; str() names the Python keywords), the signatures are
the CLI's flags, and importing it loads no CUDA library (README: "Python API")."""
import inspect
import json
import os
import pydoc
import re
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
    if isinstance(document, shardplan.Result):
        document = document.to_dict()
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
    """Each error raises shardplan.InputError whose .cli_message is exactly the line the CLI prints (exit status 2)."""

    def assert_same_error(self, call, args):
        with self.assertRaises(shardplan.InputError) as raised:
            call()
        code, out, err = cli(*args)
        self.assertEqual(code, 2)
        self.assertEqual(out, "")
        self.assertEqual(raised.exception.cli_message, err.rstrip("\n"))
        self.assertEqual(raised.exception.status, 2)
        self.assertIsInstance(raised.exception, ValueError)
        self.assertIsInstance(raised.exception, shardplan.Error)
        return str(raised.exception)

    def test_messages_name_the_keywords_not_the_flags(self):
        with self.assertRaises(shardplan.InputError) as raised:
            shardplan.estimate(model="llama3-8b", cluster="8xH100-80GB", seq_len=0)
        self.assertEqual(str(raised.exception), "seq_len: expected an integer in 1..16777216, got '0'")

    def test_unknown_preset_suggests_the_closest(self):
        message = self.assert_same_error(lambda: shardplan.plan(model="llama3-9b", cluster="8xH100-80GB"),
                                         ["plan", "--model", "llama3-9b", "--cluster", "8xH100-80GB", "--json"])
        self.assertIn("did you mean 'llama3-8b'", message)

    def test_flag_out_of_range(self):
        message = self.assert_same_error(
            lambda: shardplan.estimate(model="llama3-8b", cluster="8xH100-80GB", seq_len=0),
            ["estimate", "--json", "--model", "llama3-8b", "--cluster", "8xH100-80GB", "--seq-len", "0"])
        self.assertIn("seq_len", message)
        self.assertNotIn("--", message)

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
        self.assertEqual(str(raised.exception), "plan(): unknown keyword 'memory_capp'; did you mean 'memory_cap'?")

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
        self.assertEqual("no_sync: expected True or False, got str 'yes'", str(raised.exception))

    def test_a_number_as_text_is_refused(self):
        # Issue 36: micro_batch="2" was passed on as "--micro-batch 2" and accepted.
        for call, message in [
                (lambda: shardplan.plan(model="llama3-8b", cluster="8xH100-80GB", micro_batch="2"),
                 "micro_batch: expected an int, got str '2'"),
                (lambda: shardplan.plan(model="llama3-8b", cluster="8xH100-80GB", memory_cap="40"),
                 "memory_cap: expected a float, got str '40'"),
                (lambda: shardplan.estimate(model=3, cluster="8xH100-80GB"),
                 "model: expected a str, a path or a dict, got int 3"),
                (lambda: shardplan.capacity(model="gpt2", gpus=["H100-80GB", None]),
                 "gpus: expected a str or a list of them, got NoneType None"),
                (lambda: shardplan.plan(cluster="8xH100-80GB"), "plan(): missing required keyword 'model'")]:
            with self.assertRaises(shardplan.InputError) as raised:
                call()
            self.assertEqual(str(raised.exception), message)
            self.assertEqual(raised.exception.status, 2)


def help_flags(command):
    """The long flags `shardplan COMMAND --help` lists (its own words, not the flag table), less --help and --json."""
    code, out, _ = cli(command, "--help")
    assert code == 0, command
    flags = re.findall(r"^\s+(?:-\w,)?--([a-z0-9][a-z0-9-]*)", out, re.MULTILINE)
    return {flag.replace("-", "_") for flag in flags} - {"help", "json"}


class Signatures(unittest.TestCase):
    """Issue 36: help(shardplan.plan) showed plan(**kwargs); the keywords are now the CLI's flags, typed."""

    COMMANDS = ["estimate", "simulate", "plan", "capacity", "models", "gpus"]

    def test_keywords_are_the_cli_flags(self):
        for command in self.COMMANDS:
            keywords = set(inspect.signature(getattr(shardplan, command)).parameters)
            self.assertEqual(keywords, help_flags(command), command)
            self.assertTrue(len(keywords) > 5 or command in ("models", "gpus"), command)

    def test_help_shows_types_defaults_and_flags(self):
        text = pydoc.render_doc(shardplan.plan, renderer=pydoc.plaintext)
        self.assertIn("plan(*, model: Union[str, os.PathLike, dict], cluster:", text)
        self.assertIn("micro_batch: int = None", text)
        self.assertIn("no_sync: bool = False", text)
        self.assertIn("-> shardplan.results.PlanResult", text)
        self.assertIn("precision: str (default bf16-mixed)  [--precision]", text)
        required = [name for name, p in inspect.signature(shardplan.plan).parameters.items()
                    if p.default is inspect.Parameter.empty]
        self.assertEqual(required, ["model", "cluster"])
        self.assertEqual(inspect.signature(shardplan.capacity).parameters["max_gpus"].annotation, int)
        self.assertEqual(inspect.signature(shardplan.plan).parameters["memory_cap"].annotation, float)

    def test_version_is_the_binary_s(self):
        code, out, _ = cli("--version")
        self.assertEqual(out.strip(), "shardplan " + shardplan.__version__)
        self.assertRegex(shardplan.__version__, r"^\d+\.\d+\.\d+")


class Results(unittest.TestCase):
    """Result objects: typed fields with units in their names, the document kept, HTML for notebooks, compare()."""

    @classmethod
    def setUpClass(cls):
        cls.first = shardplan.plan(model="llama3-8b", cluster="8xH100-80GB", seq_len=4096)
        cls.second = shardplan.plan(model="llama3-8b", cluster="8xH100-80GB", seq_len=4096, micro_batch=2,
                                    ac="full")

    def test_fields_have_units_and_match_the_document(self):
        planned = self.first
        predicted = planned["predicted"]
        self.assertIsInstance(planned, shardplan.PlanResult)
        self.assertEqual(planned.step_time_s, predicted["step_time_s"])
        self.assertAlmostEqual(planned.peak_memory_gib, predicted["peak_memory_bytes"] / 2 ** 30)
        self.assertEqual(planned.micro_batch, 1)
        self.assertEqual(self.second.micro_batch, 2)
        self.assertEqual(planned.strategy, planned.plan["units"][1]["strategy"])
        self.assertEqual(planned.units, len(planned.plan["units"]) - 1)
        self.assertEqual(json.loads(planned.to_json()), planned.to_dict())
        self.assertEqual(planned.label, "llama3-8b on 8xH100-80GB")
        self.assertGreater(sum(planned.memory_at_peak_gib.values()), 1)
        self.assertTrue(all(isinstance(b.peak_memory_gib, float) for b in planned.baselines))

    def test_html(self):
        text = self.first._repr_html_()
        self.assertIn("<table", text)
        self.assertIn(f">{self.first.strategy}<", text)
        self.assertIn("<svg", text)
        self.assertIn("FSDP baselines", text)
        nothing = shardplan.plan(model="llama3-70b", cluster="8xH100-80GB", memory_cap=2)
        self.assertFalse(nothing.feasible)
        self.assertIn("Nothing fits", nothing._repr_html_())

    def test_compare(self):
        table = shardplan.compare({"mb1": self.first, "mb2 full AC": self.second})
        self.assertEqual([row["label"] for row in table.rows], ["mb1", "mb2 full AC"])
        self.assertEqual(table.rows[0]["speedup"], 1.0)
        self.assertAlmostEqual(table.rows[1]["speedup"], self.second.tokens_per_s / self.first.tokens_per_s)
        self.assertEqual(table.rows[1]["micro_batch"], 2)
        lines = str(table).splitlines()
        self.assertEqual(len(lines), 3)
        self.assertTrue(lines[0].startswith("label"))
        self.assertIn("<table", table._repr_html_())
        simulated = shardplan.simulate(model="llama3-8b", cluster="8xH100-80GB", plan=self.first.plan)
        self.assertEqual(shardplan.compare([simulated]).rows[0]["step_time_s"], simulated.step_time_s)
        with self.assertRaises(TypeError):
            shardplan.compare([{"step_time_s": 1}])


class Light(unittest.TestCase):
    def test_no_cuda_nccl_or_mpi_in_the_process(self):
        shardplan.estimate(model="llama3-8b", cluster="8xH100-80GB")
        with open("/proc/self/maps") as maps:
            mapped = maps.read()
        for library in ("libcudart", "libcublas", "libnccl", "libmpi"):
            self.assertNotIn(library, mapped)


if __name__ == "__main__":
    unittest.main(verbosity=2)
