"""The vector runner's command line (conformance/hosts/README.md): exit codes, stdout, stderr.
The host itself (pctl.runtime) is tested by the SDK's tests, which ./test runs too."""

import json
import subprocess
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parents[1]
ROOT = HERE.parents[2]
RUN = HERE / "run"
MURMUR = ROOT / "plugins" / "builtin" / "kafka-murmur2.wasm"
HOSTILE = ROOT / "runtime" / "testdata" / "hostile"


def run(*args, stdin=b""):
    p = subprocess.run([str(RUN), "run", *map(str, args)], input=stdin, capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_vectors_through_the_command_line():
    cases = [c for c in json.loads((ROOT / "spec" / "vectors" / "kafka-murmur2.json").read_text())["cases"] if c["n"] == 1000]
    assert cases
    code, out, err = run("--wasm", MURMUR, "--partitions=1000", stdin="".join(c["key_hex"] + "\n" for c in cases).encode())
    assert code == 0, err
    assert out.split() == [str(c["partition"]) for c in cases]


@pytest.mark.parametrize("args,stdin,exit,words", [
    (["--partitions", "8"], b"", 2, "--wasm FILE is required"),
    (["--wasm", MURMUR, "--partitions", "0"], b"", 2, "invalid partition count"),
    (["--wasm", MURMUR, "--partitions", "8"], b"zz\n", 2, "not a key in hex"),
    (["--wasm", MURMUR, "--partitions", "8", "--config", "a=1"], b"", 2, "takes no configuration"),
    (["--wasm", HOSTILE / "not-wasm.wasm", "--partitions", "8"], b"", 2, "not a WebAssembly module"),
    (["--wasm", HOSTILE / "loop-forever.wasm", "--partitions", "8"], b"00\n", 1, "time limit exceeded"),
    (["--wasm", HOSTILE / "out-of-range.wasm", "--partitions", "8"], b"00\n", 1, "out of range"),
])
def test_exit_status_and_class(args, stdin, exit, words):
    code, out, err = run(*args, stdin=stdin)
    assert code == exit, (code, err)
    assert words.lower() in err.lower(), err
    if exit == 1:
        assert "plugin " in err and "sha256:" in err, "a run-time failure names the plugin: " + err
