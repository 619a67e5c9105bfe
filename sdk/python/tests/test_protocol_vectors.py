"""Replays the protocol trace vectors (spec/vectors/protocol/*.jsonl, spec/vectors/README.md)
against this SDK's decisions (pctl._rules, which the consumer decides through, and the producer's
sticky-ambiguity machine pctl._sticky): the same hand-written traces the Go core and the other
SDKs replay."""

from __future__ import annotations

import json
import pathlib
import types
from typing import Any

from pctl import _rules, _sticky, wire

DIR = pathlib.Path(__file__).resolve().parents[3] / "spec" / "vectors" / "protocol"
FORMAT = "pctl-protocol-trace/1"


def _topic(d: dict) -> wire.Topic:
    return wire.Topic.from_reply({"topic": d})


def replay(text: str, r: Any) -> tuple:
    lines = [l for l in text.split("\n") if l]
    hdr = json.loads(lines[0])
    assert hdr.get("format") == FORMAT, f"not a {FORMAT} file: {lines[0]}"
    bad, n = [], 0
    for line in lines[1:]:
        tr = json.loads(line)
        topic = _topic(tr["topic"])
        pos: dict = {}
        leases: dict = {}
        revoked: set = set()
        now = 0
        session = tr.get("session_ms", 0)
        at = lambda q: pos.get(q, 0)  # noqa: E731
        sticky: Any = None  # the producer's sticky machine, started at the first of its events
        for i, st in enumerate(tr["steps"]):
            ev = st["event"]
            assert len(ev) == 1, f"{tr['trace']} step {i}: {len(ev)} event kinds"
            (kind, a), = ev.items()
            done = None
            if isinstance(a, dict) and "partition" in a:
                q0 = a["partition"]
                done = lambda e, q0=q0: (q0, e) in revoked  # noqa: E731
            if kind == "positions":
                for q, p in a.items():
                    pos[int(q)] = p
                continue
            if kind == "lease":
                leases[a["partition"]] = a
                continue
            if kind == "now":
                now = a
                continue
            if kind == "descriptor":
                topic = _topic(a)
                continue
            if kind == "record":
                def f(ep: wire.Epoch, a: dict = a) -> int:
                    for v in tr["f"]:
                        if v["epoch"] == ep.epoch and v["key_hex"] == a["key_hex"]:
                            return v["partition"]
                    raise AssertionError(f"{tr['trace']}: no f for key {a['key_hex']} in epoch {ep.epoch}")
                got: Any = r.gate_record(topic, r.drained_through(topic, 0, at), a["epoch"], a["partition"], f, at)
            elif kind == "drained_through":
                got = {"drained_through": r.drained_through(topic, 0, at)}
            elif kind == "assignable":
                got = {"assignable": r.assignable(topic, at)}
            elif kind == "past_boundary":
                l = leases.get(a["partition"])
                live = l is not None and r.lease_live(l["owner"], l["lease_end"], now, r.max_clock_skew_ms(session))
                got = {"past": r.past_boundary(topic, a["partition"], a["boundary"], at, live)}
            elif kind == "max_skew":
                got = {"max_skew_ms": r.max_clock_skew_ms(session)}
            elif kind == "acquire":
                got = {"take": r.may_acquire(tr.get("member", ""), a["owner"], a["lease_end"], now, r.max_clock_skew_ms(session))}
            elif kind == "deliver":
                got = {"deliver": r.may_deliver(a["lease_until"], now, session)}
            elif kind == "marker":
                got = r.fence_marker(topic, a["partition"], a["seq"], a["fence"], done)
                revoked.update((a["partition"], e) for e in got["revoke"])
            elif kind == "at":
                rv = r.revokes(topic, a["partition"], a["position"], done)
                revoked.update((a["partition"], e) for e in rv)
                got = {"revoke": rv, "commit": len(rv) > 0}
            elif kind == "acquired":
                p = r.passed(topic, a["partition"], a["position"])
                revoked.update((a["partition"], e) for e in p)
                got = {"passed": p}
            elif kind == "fence_resend":
                recs = a["records"]
                cur = topic.current
                order = [recs[j] for j in r.resend_order([x["seq"] for x in recs])]
                per: dict = {}
                for x in order:
                    if x.get("keyless"):
                        continue
                    v = next((v for v in tr["f"] if v["epoch"] == cur.epoch and v["key_hex"] == x["key_hex"]), None)
                    assert v is not None, f"{tr['trace']}: no f for key {x['key_hex']} in epoch {cur.epoch}"
                    per.setdefault(v["partition"], []).append(x["seq"])
                got = {"order": [x["seq"] for x in order], "partitions": [{"partition": q, "seqs": per[q]} for q in sorted(per)]}
            elif kind == "search":
                top, read_last = r.search_top(a["fenced"], a["boundary"])
                got = {"low": r.search_floor(a["sink_floor"], a["first_sent"]), "top": top, "read_last": read_last}
            elif kind == "batches":
                got = {"batches": r.batches([(x["key_hex"], bool(x.get("keyless"))) for x in a["records"]], a["per_key"], a["size"])}
            elif kind in ("produce", "acked", "anomaly", "settled", "drop", "new_epoch", "close"):
                if sticky is None:
                    def kf(epoch: int, key: str, tr: dict = tr) -> int:
                        for v in tr["f"]:
                            if v["epoch"] == epoch and v["key_hex"] == key:
                                return v["partition"]
                        raise AssertionError(f"{tr['trace']}: no f for key {key} in epoch {epoch}")
                    sticky = r.Sticky(topic.current.epoch, kf)
                try:
                    if kind == "produce":
                        assert not a.get("keyless"), "the sticky traces have keyed records only"
                        got = sticky.produce(a["seq"], a["key_hex"])
                    elif kind == "acked":
                        got = sticky.acked(a["seqs"])
                    elif kind == "anomaly":
                        got = sticky.anomaly(a["epoch"], a["partition"])
                    elif kind == "settled":
                        got = sticky.settled(a["epoch"], a["partition"], a["stored"], a.get("failed", []))
                    elif kind == "drop":
                        got = sticky.drop(a["seqs"])
                    elif kind == "new_epoch":
                        got = sticky.new_epoch(a["epoch"])
                    else:
                        got = sticky.close()
                except ValueError as err:  # a core that refuses a valid event decides wrongly
                    got = {"error": str(err)}
            else:
                raise AssertionError(f"{tr['trace']} step {i}: unknown event kind {kind}")
            n += 1
            if got != st["expect"]:
                bad.append(f"{hdr['rule']} / {tr['trace']} step {i} {json.dumps(ev)}: got {json.dumps(got)}, want {json.dumps(st['expect'])}")
    return bad, n


# Every file of the vector directory, by rule (spec/vectors/README.md). A file this replay does
# not know fails (a new rule is replayed here, its events included, or the test says so), as does
# a known one missing.
KNOWN = [
    "ambiguous-search-floor", "epoch-gating", "fence-markers", "fence-resend-order", "keys-assigned-past-boundary",
    "lease-expiry", "per-key-batches", "shrink-retirement", "sticky-ambiguity", "sticky-permanent-failures",
]


def test_every_vector_file_is_a_rule_this_replay_knows() -> None:
    files = sorted(p.name for p in DIR.iterdir())
    assert files == sorted(f"{r}.jsonl" for r in KNOWN), f"the files of {DIR} (a file not in KNOWN: replay it here first)"
    for name in files:
        text = (DIR / name).read_text(encoding="utf-8")
        assert json.loads(text.split("\n")[0])["rule"] == name.removesuffix(".jsonl"), f"{name}: the header's rule"
        _, n = replay(text, _mutant())
        assert n > 0, f"{name}: no decision checked"


def replay_all(r: Any) -> tuple:
    files = sorted(DIR.glob("*.jsonl"))
    assert len(files) >= 9, f"vector files in {DIR}"
    bad, n = [], 0
    for f in files:
        b, k = replay(f.read_text(encoding="utf-8"), r)
        bad += b
        n += k
    return bad, n


def test_rules_match_every_protocol_vector() -> None:
    bad, n = replay_all(_mutant())
    assert bad == []
    assert n >= 50, f"only {n} decisions checked"


def _mutant(**over: Any) -> Any:
    m = types.SimpleNamespace(**{k: getattr(_rules, k) for k in dir(_rules) if not k.startswith("_")}, Sticky=_sticky.Sticky)
    for k, v in over.items():
        setattr(m, k, v)
    return m


def test_replay_fails_on_wrong_rules() -> None:
    mutants = {
        "gate checks only epoch x-1": _mutant(gate_record=lambda t, d, x, p, f, pos: _rules.gate_record(t, x - 2, x, p, f, pos)),
        "lease expiry without the skew bound": _mutant(may_acquire=lambda me, o, end, now, skew: _rules.may_acquire(me, o, end, now, 0)),
        "keys assigned at the boundary (or after a session timeout)": _mutant(past_boundary=lambda t, q, b, pos, leased: pos(q) >= b),
        "a marker passed without keys revoked": _mutant(fence_marker=lambda *a: {**_rules.fence_marker(*a), "revoke": []}),
        "retired partitions never leave": _mutant(assignable=lambda t, pos: list(range(_rules.max_partitions(t)))),
        "re-sent sink by sink": _mutant(resend_order=lambda seqs: list(range(len(seqs)))),
        "search down to the sink floor only": _mutant(search_floor=lambda floor, first: floor),
        "batches without the per-key rule": _mutant(batches=lambda recs, per_key, size: _rules.batches(recs, False, size)),
    }
    for name, m in mutants.items():
        bad, _ = replay_all(m)
        assert bad, f"the vectors did not catch: {name}"


class _IgnoresAnomalies(_sticky.Sticky):
    def _ambiguous(self, k: Any) -> bool:
        return False

    def settled(self, epoch: int, partition: int, stored: list, failed: list = ()) -> dict:
        return {"send": [], "acked": [], "failed": []}


class _MovesUnsettled(_sticky.Sticky):
    def _regather(self, a: dict) -> None:
        for k in self.sinks:
            for x in k.recs:
                x.ambiguous = False
        super()._regather(a)


class _ResendsStored(_sticky.Sticky):
    def settled(self, epoch: int, partition: int, stored: list, failed: list = ()) -> dict:
        return super().settled(epoch, partition, [], failed)


class _HoldsEveryPartition(_sticky.Sticky):
    def _place(self, x: Any, a: dict) -> None:
        n = len(a["send"])
        super()._place(x, a)
        if any(self._ambiguous(k) for k in self.sinks):
            del a["send"][n:]


class _CloseDrops(_sticky.Sticky):
    def close(self) -> dict:
        return {**super().close(), "failed": []}


def test_replay_fails_on_wrong_sticky_machines() -> None:
    mutants = {
        "an anomaly ignored: the ambiguous sink goes on sending": _IgnoresAnomalies,
        "records moved before their sink settled": _MovesUnsettled,
        "a record settled as stored is re-sent": _ResendsStored,
        "one ambiguous sink holds back every partition": _HoldsEveryPartition,
        "close drops unsettled records silently": _CloseDrops,
    }
    _assert_caught(mutants, "sticky-ambiguity")


def _assert_caught(mutants: dict, rule: str) -> None:
    """Every wrong machine fails the replay of rule's file."""
    for name, cls in mutants.items():
        bad, _ = replay_all(_mutant(Sticky=cls))
        assert any(b.startswith(rule + " / ") for b in bad), f"{rule} did not catch: {name}"


class _ResendsFailed(_sticky.Sticky):
    def settled(self, epoch: int, partition: int, stored: list, failed: list = ()) -> dict:
        return super().settled(epoch, partition, stored, [])


class _FailureHoldsBack(_sticky.Sticky):
    def settled(self, epoch: int, partition: int, stored: list, failed: list = ()) -> dict:
        a = super().settled(epoch, partition, stored, failed)
        if a["failed"]:
            a["send"] = []
        return a


class _FailureWinsOverStored(_sticky.Sticky):
    def settled(self, epoch: int, partition: int, stored: list, failed: list = ()) -> dict:
        return super().settled(epoch, partition, [s for s in stored if s not in failed], failed)


class _DropIgnored(_sticky.Sticky):
    def drop(self, seqs: list) -> dict:
        return {"send": [], "acked": [], "failed": []}


class _DropsAmbiguous(_sticky.Sticky):
    def drop(self, seqs: list) -> dict:
        for k in self.sinks:
            for x in k.recs:
                if x.seq in seqs:
                    x.ambiguous = False
        return super().drop(seqs)


class _DropReportsAll(_sticky.Sticky):
    def drop(self, seqs: list) -> dict:
        super().drop(seqs)
        return {"send": [], "acked": [], "failed": list(seqs)}


def test_replay_fails_on_sticky_machines_wrong_about_permanent_failures() -> None:
    mutants = {
        "a record failed in settling is re-sent": _ResendsFailed,
        "a failure in settling holds back the records after it": _FailureHoldsBack,
        "a permanent failure wins over stored": _FailureWinsOverStored,
        "a drop ignored": _DropIgnored,
        "an ambiguous record dropped": _DropsAmbiguous,
        "a drop reports records already acknowledged or failed": _DropReportsAll,
    }
    _assert_caught(mutants, "sticky-permanent-failures")
