"""The `mojo-compile` commands, run in this process (cli.main) on small scripts; one run as a real subprocess."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

import mojo_compile
from mojo_compile import cli

MODEL = """
import sys, torch
import torch.nn.functional as F
import mojo_compile

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.RMSNorm(32, eps=1e-5)
        self.up, self.down = torch.nn.Linear(32, 64), torch.nn.Linear(64, 32)

    def forward(self, x):
        return self.down(F.gelu(self.up(self.norm(x))))

{setup}
model = torch.compile(Block(), backend="mojo", options={{"inner_compiler": "eager", "target": "torch"}})
out = model(torch.randn(3, 5, 32))
print("script says", sys.argv[1:])
{tail}
"""
WRONG_PATTERN = """
mojo_compile.register_pattern("user.gelu_tanh", lambda x: F.gelu(x), lambda x: F.gelu(x, approximate="tanh"),
                              (torch.randn(4, 8),), family="user_gelu", priority=50)
"""


@pytest.fixture
def script(tmp_path):
    def write(setup="", tail=""):
        path = tmp_path / "model_script.py"
        path.write_text(textwrap.dedent(MODEL.format(setup=setup, tail=tail)))
        return str(path)
    yield write
    if any(p.name == "user.gelu_tanh" for p in mojo_compile.registered_patterns()):
        mojo_compile.unregister_pattern("user.gelu_tanh")


def test_explain_json_stdout_is_only_json(script, capfd):
    assert cli.main(["explain", script(), "--json", "-", "--", "--flag", "1"]) == 0
    out, err = capfd.readouterr()
    data = json.loads(out)  # the script's print went to stderr
    assert [s["pattern"] for g in data["graphs"] for s in g["sites"]] == ["rms_norm.F_rms_norm"]
    assert "script says ['--flag', '1']" in err


def test_explain_json_file_has_every_site(script, tmp_path, capfd):
    target = tmp_path / "report.json"
    assert cli.main(["explain", script(), "--json", str(target)]) == 0
    data = json.loads(target.read_text())
    assert [s["source"] for g in data["graphs"] for s in g["sites"]] == ["norm"]
    assert "script says []" in capfd.readouterr().out


def test_explain_reports_what_compiled_before_the_script_raised(script, capfd):
    code = cli.main(["explain", script(tail="raise RuntimeError('boom after compiling')")])
    out, err = capfd.readouterr()
    assert code == 1 and "boom after compiling" in err
    assert "rms_norm.F_rms_norm" in out and "mojo.rms_norm x1" in out


def test_explain_keeps_the_scripts_exit_code(script, capfd):
    assert cli.main(["explain", script(tail="sys.exit(3)")]) == 3
    assert "mojo.rms_norm x1" in capfd.readouterr().out


def test_explain_why_names_the_site(script, capfd):
    assert cli.main(["explain", script(), "--why", "norm"]) == 0
    assert "norm: fused by rms_norm.F_rms_norm into mojo.rms_norm" in capfd.readouterr().out


def test_verify_exit_codes_and_table(script, capfd):
    assert cli.main(["verify", script()]) == 0
    out = capfd.readouterr().out
    assert "rms_norm.F_rms_norm" in out and out.rstrip().endswith(" OK, 0 FAIL")
    assert not [line for line in out.splitlines() if line.rstrip().endswith("FAIL") and "OK," not in line]
    assert cli.main(["verify", script(setup=WRONG_PATTERN)]) == 1
    out = capfd.readouterr().out
    failing = [line for line in out.splitlines() if line.rstrip().endswith("FAIL")]
    assert any(" <root: Block> " in line and " user.gelu_tanh " in line for line in failing), out


def test_bisect_exit_codes_and_culprit(script, capfd):
    assert cli.main(["bisect", script()]) == 0
    assert "no compiled graph differs" in capfd.readouterr().out
    assert cli.main(["bisect", script(setup=WRONG_PATTERN)]) == 1
    out = capfd.readouterr().out
    assert "culprit pattern: user.gelu_tanh" in out and "site <root: Block>:" in out


def test_diff_prints_a_unified_diff(script, capfd):
    assert cli.main(["diff", script()]) == 0
    out = capfd.readouterr().out
    assert out.count("--- graph") == 1 and "+++ graph" in out and "torch.ops.mojo.rms_norm.default" in out


def test_patterns_json_and_family(capfd):
    assert cli.main(["patterns", "--json", "--family", "rms_norm"]) == 0
    rows = json.loads(capfd.readouterr().out)
    assert rows and {r["family"] for r in rows} == {"rms_norm"}
    assert rows[0]["name"].startswith("rms_norm.")


def test_patterns_lists_the_graph_passes_last(capfd):
    """`linear.group` (patterns/linear.py) runs after every pattern: listed after them, marked as a pass."""
    assert cli.main(["patterns", "--family", "linear"]) == 0
    lines = capfd.readouterr().out.splitlines()
    assert lines[-1].startswith("linear.group") and "graph pass" in lines[-1], lines
    assert cli.main(["patterns", "--json", "--family", "linear"]) == 0
    rows = json.loads(capfd.readouterr().out)
    assert rows[-1] == {"name": "linear.group", "family": "linear", "kind": "graph pass"}, rows[-1]
    assert all(r["kind"] == "pattern" for r in rows[:-1]) and len(rows) > 1


def test_version(capfd):
    assert cli.main(["--version"]) == 0
    assert capfd.readouterr().out.startswith(f"mojo-compile {mojo_compile.__version__} (torch ")


def test_no_such_script(capfd):
    assert cli.main(["verify", "no/such/script.py"]) == 2
    assert "no such script: no/such/script.py" in capfd.readouterr().err


def test_real_process_json_on_stdout(script):
    """As a user runs it: stdout must parse as JSON although the script prints, C code included."""
    path = script(tail="import os; os.write(1, b'raw fd write\\n')")
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    done = subprocess.run([sys.executable, "-m", "mojo_compile.cli", "explain", path, "--json", "-"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["graphs"]
    assert "raw fd write" in done.stderr and "script says" in done.stderr


def test_the_message_of_sys_exit_is_shown(tmp_path, capfd):
    """`sys.exit("message")`: Python prints the message and exits 1; so does mojo-compile (it printed nothing)."""
    script = tmp_path / "exits.py"
    script.write_text('import sys\nsys.exit("bad argument: need --steps")\n')
    assert cli.main(["explain", str(script)]) == 1
    assert "bad argument: need --steps" in capfd.readouterr().err


def test_a_report_file_that_cannot_be_written_is_refused_before_the_script_runs(tmp_path, capfd):
    """`explain --json missing/report.json`: a clear error before the script runs (it ran to its end, then
    mojo-compile raised FileNotFoundError and the report was lost)."""
    script, ran = tmp_path / "ran.py", tmp_path / "script_ran"
    script.write_text(f"open({str(ran)!r}, 'w').close()\n")
    assert cli.main(["explain", str(script), "--json", str(tmp_path / "missing" / "report.json")]) == 2
    assert "cannot write the report" in capfd.readouterr().err and not ran.exists()
    assert cli.main(["explain", str(script), "--json", str(tmp_path)]) == 2  # a folder
    assert cli.main(["explain", str(script), "--json", str(tmp_path / "report.json")]) == 0
    assert json.loads((tmp_path / "report.json").read_text())["graphs"] == [] and ran.exists()


def test_verify_exits_1_on_an_infinity_where_eager_is_finite(tmp_path, capfd):
    """`mojo-compile verify SCRIPT` exits 1 where a fused site returns +inf and eager 0 (it said "0 FAIL")."""
    script = tmp_path / "relu_to_inf.py"
    script.write_text(textwrap.dedent("""
        import torch, mojo_compile
        def search(x): return torch.relu(x) * 3.5
        def replace(x): return torch.where(x > 0, x * 3.5, torch.full_like(x, float("inf")))
        mojo_compile.register_pattern("user.relu_to_inf", search, replace, [(torch.randn(8),)])
        try:
            f = torch.compile(search, backend="mojo", options={"inner_compiler": "eager", "target": "torch"})
            f(torch.randn(16))
        finally:
            mojo_compile.unregister_pattern("user.relu_to_inf")
    """))
    assert cli.main(["verify", str(script)]) == 1, capfd.readouterr().out
