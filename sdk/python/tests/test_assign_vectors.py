"""Replays the sticky assignor's golden vectors (spec/vectors/assign/sticky.json, written by hand
from spec/protocol.md §6.2.1) against pctl._rules, which the consumer assigns through: the same
file Go's client and the other SDKs replay."""

from __future__ import annotations

import json
import pathlib
import types
from typing import Any

from pctl import _rules
from pctl.errors import PctlError
from pctl.partitioner import Partitioner

FILE = pathlib.Path(__file__).resolve().parents[3] / "spec" / "vectors" / "assign" / "sticky.json"
VECTORS = json.loads(FILE.read_text())


def _linear(h: int, n: int) -> int:
    b = 1
    while b * 2 <= n:
        b *= 2
    p = h % (2 * b)
    return p - b if p >= n else p


# The vectors' functions (their "functions" field): h is the integer a sample key spells.
FNS = {"int-mod": lambda h, n: h % n, "int-linear": _linear, "int-range": lambda h, n: h * n // 4096}
_BUILTINS: dict = {}


def _placer(epochs: dict):
    memo: dict = {}

    def place(e: int) -> list:
        if e not in memo:
            f, n = epochs[str(e)]["f"], epochs[str(e)]["n"]
            if f in FNS:
                memo[e] = [FNS[f](int(k), n) for k in _rules.STICKY_SAMPLE]
            else:
                if f not in _BUILTINS:
                    _BUILTINS[f] = Partitioner.builtin(f)
                memo[e] = _BUILTINS[f].partition_many(list(_rules.STICKY_SAMPLE), n)
        return memo[e]
    return place


def _parts(p: Any) -> list:
    if isinstance(p, str):
        a, b = p.split("..")
        return list(range(int(a), int(b) + 1))
    return p


def _frac(f: Any) -> Any:
    return None if f is None else f[0] / f[1]


def replay(r: Any) -> list:
    """The names (and diffs) of the cases r (pctl._rules or a mutant) fails."""
    bad = []
    for c in VECTORS["cases"]:
        got, err = None, None
        try:
            got = r.next_assignment(c["prev"], c["members"], _parts(c["partitions"]), c["epoch"], _placer(c["epochs"]),
                                    "2026-12-01T12:00:00Z")
            r.encode_assignment(got, "g")
        except PctlError as e:
            err = e
        if "want_error" in c:
            if getattr(err, "code", None) != c["want_error"]:
                bad.append(f"{c['name']}: want error {c['want_error']}, got {err!r}")
            continue
        if err is not None:
            bad.append(f"{c['name']}: {err}")
            continue
        w = c["want"]
        have = {"round": got["round"], "owners": got["owners"], "moved": got.get("moved"),
                "moved_modulo": got.get("moved_modulo"), "history_rounds": [h["round"] for h in got["history"]]}
        want = {"round": w["round"], "owners": w["owners"], "moved": _frac(w["moved"]),
                "moved_modulo": _frac(w["moved_modulo"]), "history_rounds": w["history_rounds"]}
        if have != want:
            bad.append(f"{c['name']}: got {have}, want {want}")
    for c in VECTORS["writes"]:
        got = r.sticky_writes(c["record"], c["members"], c["partitions"], c["epoch"], c["me"], c["complete"], c["previous_view"])
        if got != c["want"]:
            bad.append(f"writes {c['name']}: got {got}, want {c['want']}")
    for c in VECTORS["wants"]:
        got = r.sticky_wants(c["record"], c["me"], c["assignable"])
        if got != c["want"]:
            bad.append(f"wants {c['name']}: got {got}, want {c['want']}")
    return bad


def test_sticky_assignor_matches_every_vector() -> None:
    assert replay(_rules) == []
    assert len(VECTORS["cases"]) >= 10 and len(VECTORS["writes"]) >= 8


def test_record_has_go_field_names() -> None:
    place = _placer({"1": {"f": "int-mod", "n": 4}})
    first = _rules.next_assignment(None, ["a", "b"], [0, 1, 2, 3], 1, place, "2026-12-01T12:00:00Z")
    assert list(json.loads(_rules.encode_assignment(first))) == ["assignor", "round", "epoch", "members", "partitions", "owners", "at", "history"]
    second = _rules.next_assignment(first, ["a", "b", "c"], [0, 1, 2, 3], 1, place, "2026-12-01T12:00:01Z")
    assert second["history"][1] == {"round": 2, "epoch": 1, "members": 3, "partitions": 4, "moved": 0.25,
                                    "moved_modulo": 0.5, "at": "2026-12-01T12:00:01Z"}


def _mutant(**over: Any) -> Any:
    m = types.SimpleNamespace(**{k: getattr(_rules, k) for k in dir(_rules) if not k.startswith("_")})
    for k, v in over.items():
        setattr(m, k, v)
    return m


def _flipped_tie_break(prev, members, partitions, epoch, place, at=""):
    # Step 4's member tie-break flipped: the members renamed so that they sort in reverse; only
    # the owners are the mutant's.
    m = len(members)
    alias = {x: f"~{m - 1 - i:04d}" for i, x in enumerate(members)}
    p = None if prev is None else {**prev, "members": [alias.get(x, "~~" + x) for x in prev["members"]]}
    got = _rules.next_assignment(p, sorted(alias.values()), partitions, epoch, place, at)
    return {**_rules.next_assignment(prev, members, partitions, epoch, place, at), "owners": [m - 1 - o for o in got["owners"]]}


def test_replay_fails_on_a_wrong_assignor() -> None:
    mutants = {
        "tie-break on the highest member index": _mutant(next_assignment=_flipped_tie_break),
        "keeps nothing": _mutant(next_assignment=lambda prev, ms, ps, e, place, at="": {
            **_rules.next_assignment(prev, ms, ps, e, place, at), "owners": [j % len(ms) for j in range(len(ps))]}),
        "drops a missing member at once": _mutant(sticky_writes=lambda rec, ms, ps, e, me, complete, prev: _rules.sticky_writes(rec, ms, ps, e, me, complete, ms)),
        "no size limit": _mutant(encode_assignment=lambda rec, group="": json.dumps(rec).encode()),
    }
    for name, m in mutants.items():
        bad = replay(m)
        assert bad, f"the vectors did not catch: {name}"
        if name.startswith("tie-break"):
            assert any(b.startswith("swap-mod-to-range-ties:") for b in bad), bad
