"""The README's consumer quickstart runs as written against a real `pctl serve`: its shell block
(the pctl CLI on PATH, the broker's address and data directory in place of the defaults, a fresh
topic name in place of "payments") and its Python block."""

from __future__ import annotations

import json
import os
import re
import subprocess
import uuid

from conftest import ROOT, SDK


def blocks(section: str) -> tuple:
    text = (SDK / "README.md").read_text()
    body = text[text.index(f"## {section}\n"):]
    body = body[:body.index("\n## ", 4)]
    sh = re.search(r"```sh\n(.*?)```", body, re.S).group(1)
    py = re.search(r"```python\n(.*?)```", body, re.S).group(1)
    return sh, py


def localize(text: str, broker, topic: str) -> str:
    data = os.path.dirname(broker.admin)
    return (text.replace("nats://127.0.0.1:4222", broker.url).replace("./pctl-data", data)
            .replace('"payments"', f'"{topic}"').replace(" payments", f" {topic}"))


def test_the_consumer_quickstart_runs_as_written(broker, tmp_path):
    sh, py = blocks("Consumer quickstart")
    assert "pctl serve" not in sh, "the quickstart starts from a running broker"
    topic = "orders-" + uuid.uuid4().hex[:8]
    env = dict(os.environ, PATH=f"{broker.bin.parent}{os.pathsep}{os.environ['PATH']}")
    env.pop("PCTL_SERVER", None)
    env.pop("PCTL_CREDS", None)
    p = subprocess.run(["sh", "-e", "-c", localize(sh, broker, topic)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    recs = [x for x in lines if x.startswith("partition ") and " seq " in x]
    assert len(recs) == 20, p.stdout
    assert {x.split()[3] for x in recs} == {"1", "2"}, "records of both epochs"
    for c in ("customer-0", "customer-1", "customer-2"):
        # The quickstart producer ran once per epoch: a key's records come epoch by epoch, in order.
        seen = [(int(x.split()[3]), json.loads(x.split(" = ", 1)[1].split(" {")[0])["order"]) for x in recs if f": {c} = " in x]
        assert seen == sorted(seen) and len(seen) == 6, (c, seen)
    assert any(x.startswith("assigned partitions") for x in lines)
    assert lines[-1].startswith("20 records; member")

    script = tmp_path / "consume.py"
    script.write_text(localize(py, broker, topic))
    env.update(PCTL_SERVER=broker.url, PCTL_CREDS=broker.consumer)
    p = subprocess.run([str(SDK / ".venv" / "bin" / "python"), str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert len(p.stdout.splitlines()) == 20, p.stdout
