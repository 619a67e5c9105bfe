"""Test harness: the repository's paths, and for the integration tests a real broker: the Go binary
built from this repository (`go build ./cmd/pctl`, or $PCTL_BIN) running `pctl serve` on a temp
dir and a free port. No mocks of NATS or of the WebAssembly engine."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SDK = ROOT / "sdk" / "python"
BUILTIN = ROOT / "plugins" / "builtin"
VECTORS = ROOT / "spec" / "vectors"

READY = re.compile(r"broker ready at (\S+) \(data (.+); admin credentials (.+)\)")


def _require_toolchains() -> bool:
    return os.environ.get("PCTL_REQUIRE_TOOLCHAINS") == "1"


@pytest.fixture(scope="session")
def pctl_bin(tmp_path_factory) -> Path:
    """The pctl binary: $PCTL_BIN, else built from this checkout."""
    if os.environ.get("PCTL_BIN"):
        return Path(os.environ["PCTL_BIN"])
    go = shutil.which("go")
    if go is None:
        msg = "the integration tests need Go to build ./cmd/pctl (or set PCTL_BIN)"
        if _require_toolchains():
            pytest.fail(msg)
        pytest.skip(msg)
    out = tmp_path_factory.mktemp("bin") / "pctl"
    p = subprocess.run([go, "build", "-o", str(out), "./cmd/pctl"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        pytest.fail(f"go build ./cmd/pctl failed:\n{p.stderr}")
    return out


class Broker:
    """A running `pctl serve`, and the CLI pointed at it."""

    def __init__(self, binary: Path, data: Path):
        self.bin, self.data = binary, data
        self.proc = subprocess.Popen([str(binary), "serve", "--data", str(data), "--listen", "127.0.0.1:0"],
                                     stdout=subprocess.PIPE, stderr=open(data.parent / "serve.log", "wb"), text=True)
        line = self.proc.stdout.readline()
        m = READY.search(line)
        if not m:
            self.proc.kill()
            raise RuntimeError(f"pctl serve did not print its ready line (got {line!r}); see {data.parent / 'serve.log'}")
        self.url = m.group(1)
        self.admin, self.producer, self.consumer = (str(data / f"{r}.nk") for r in ("admin", "producer", "consumer"))

    def pctl(self, *args: str, creds: str = "", stdin: str = "", timeout: float = 120, check: bool = True,
             remote: bool = True) -> subprocess.CompletedProcess:
        cmd = [str(self.bin), *args]
        if remote:
            cmd += ["--server", self.url, "--creds", creds or self.admin]
        p = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr}")
        return p

    def create_topic(self, partitions: int, partitioner: str = "kafka-murmur2") -> str:
        name = "t-" + uuid.uuid4().hex[:10]
        self.pctl("topic", "create", name, "--partitions", str(partitions), "--partitioner", partitioner)
        return name

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def broker(pctl_bin, tmp_path_factory) -> Broker:
    b = Broker(pctl_bin, tmp_path_factory.mktemp("broker") / "data")
    yield b
    b.stop()


def wait_until(cond, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(interval)
    return cond()
