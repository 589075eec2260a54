"""Packaging (issue 36): `meson install` of the build into a staging folder (DESTDIR) puts the package in the
interpreter's own site-packages, and from outside the source tree `import shardplan` gives __version__ and a working
API, the installed `shardplan` plans, `shardplan-import-torch` finds the installed bridge, and the man page and the
bash and zsh completions list the flags `--help` lists. Argument: the build folder. (`pip install .` compiles the
whole project, too slow for a suite: README "Python" gives that command and its output.)"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

BUILD = os.path.abspath(sys.argv.pop(1))
BIN = os.environ["SHARDPLAN_BIN"]


def run(args, **kwargs):
    done = subprocess.run(args, capture_output=True, text=True, **kwargs)
    return done.returncode, done.stdout, done.stderr


def help_flags(command):
    _, out, _ = run([BIN, command, "--help"])
    return set(re.findall(r"^\s+(?:-\w,)?(--[a-z0-9][a-z0-9-]*)", out, re.MULTILINE)) - {"--help", "--json"}


class Installed(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stage = tempfile.mkdtemp(prefix="shardplan-stage-")
        cls.elsewhere = tempfile.mkdtemp(prefix="shardplan-cwd-")
        code, _, err = run(["meson", "install", "-C", BUILD, "--destdir", cls.stage, "--no-rebuild", "--quiet"])
        assert code == 0, err
        _, out, _ = run(["meson", "introspect", BUILD, "--installed"])
        cls.installed = {os.path.basename(destination): destination for destination in json.loads(out).values()}
        core = next(d for s, d in cls.installed.items() if s.startswith("_core."))
        cls.site = os.path.dirname(os.path.dirname(core))  # .../site-packages (shardplan/_core.so)
        cls.env = dict(os.environ, PYTHONPATH=cls.stage + cls.site, PYTHON=sys.executable)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.stage)
        shutil.rmtree(cls.elsewhere)

    def staged(self, name):
        return self.stage + self.installed[name]

    def test_the_package_goes_to_the_interpreter_s_own_site_packages(self):
        # Issue 36: it went to PREFIX/lib/python3/dist-packages, on neither Debian's python3 path nor a venv's.
        _, out, _ = run([sys.executable, "-c", "import sys; print('\\n'.join(sys.path))"], cwd=self.elsewhere)
        self.assertIn(self.site, out.splitlines(),
                      "not on the interpreter's path (a build folder from before issue 36 keeps "
                      "python.install_env=prefix: meson configure -Dpython.install_env=auto)")
        for name in ("__init__.py", "results.py", "compare.py", "meta_trace.py", "__main__.py"):
            self.assertTrue(self.installed[name].startswith(self.site), name)

    def test_import_outside_the_source_tree(self):
        code, out, err = run([sys.executable, "-c",
                              "import shardplan; p = shardplan.plan(model='llama3-8b', cluster='8xH100-80GB');"
                              "print(shardplan.__version__, shardplan.__file__, p.feasible, p.step_time_s > 0)"],
                             cwd=self.elsewhere, env=self.env)
        self.assertEqual(code, 0, err)
        version, path, feasible, positive = out.split()
        self.assertTrue(path.startswith(self.stage), path)
        self.assertEqual((feasible, positive), ("True", "True"))
        _, cli_version, _ = run([self.staged("shardplan"), "--version"], cwd=self.elsewhere)
        self.assertEqual(cli_version.strip(), "shardplan " + version)

    def test_the_installed_command_plans(self):
        code, out, err = run([self.staged("shardplan"), "plan", "-m", "llama3-8b", "-c", "8xH100-80GB"],
                             cwd=self.elsewhere)
        self.assertEqual(code, 0, err)
        self.assertIn("planned:", out)

    def test_the_installed_torch_bridge(self):
        code, out, err = run([self.staged("shardplan-import-torch"), "--help"], cwd=self.elsewhere, env=self.env)
        if code != 0 and "no Python here imports torch" in err:
            self.skipTest("no Python with torch")
        self.assertEqual(code, 0, err)
        self.assertIn("--fast", out)

    def test_man_page_and_completions_list_every_flag(self):
        with open(self.staged("shardplan.1")) as man:
            page = man.read()
        with open(self.staged("shardplan.bash")) as bash:
            bash_script = bash.read()
        with open(self.staged("_shardplan")) as zsh:
            zsh_script = zsh.read()
        self.assertTrue(page.startswith(".\\\"") and ".TH SHARDPLAN 1" in page)
        for command in ("estimate", "simulate", "plan", "capacity", "calibrate"):
            flags = help_flags(command)
            self.assertGreater(len(flags), 3, command)
            for flag in flags:
                self.assertIn(".TP\n\\fB" + flag.replace("-", "\\-") + "\\fR", page, (command, flag))
                self.assertIn(flag, bash_script, (command, flag))
                self.assertIn(f"'{flag}[", zsh_script, (command, flag))
        # bash completes a flag of the command being typed.
        script = (f"source {self.staged('shardplan.bash')}; COMP_WORDS=(shardplan plan --micro); COMP_CWORD=2; "
                  "_shardplan; echo ${COMPREPLY[@]}")
        _, out, err = run(["bash", "-c", script])
        self.assertEqual(out.split(), ["--micro-batch"], err)
        if shutil.which("zsh"):
            self.assertEqual(run(["zsh", "-n", self.staged("_shardplan")])[0], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
