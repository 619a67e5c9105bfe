"""The built-in partitioners the package carries (pctl/builtin, copies of plugins/builtin that
plugins/sdk_copies_test.go keeps identical): Partitioner.builtin(name) works with no file, and gives
what the real clients give (spec/vectors: Kafka's Java client for kafka-murmur2)."""

from __future__ import annotations

import json

import pytest

import pctl
from conftest import BUILTIN, VECTORS


def test_builtin_names_are_the_repository_built_ins():
    assert pctl.builtin_names() == sorted(p.stem for p in BUILTIN.glob("*.wasm"))


@pytest.mark.parametrize("name", sorted(p.stem for p in BUILTIN.glob("*.wasm")))
def test_each_built_in_against_its_vectors(name):
    p = pctl.Partitioner.builtin(name)
    assert p.name == name
    f = VECTORS / f"{name}.json"
    if not f.exists():
        return
    v = json.loads(f.read_text())
    for c in v["cases"]:
        got = p.partition(bytes.fromhex(c["key_hex"]), c["n"])
        assert got == c["partition"], f"{name}: key {c['key_hex']} n={c['n']}: keys remap for existing users (source: {v['source']})"


def test_an_unknown_built_in_is_a_bad_request_naming_them():
    with pytest.raises(pctl.BadRequest, match="kafka-murmur2"):
        pctl.Partitioner.builtin("kafka")
    with pytest.raises(pctl.BadRequest):
        pctl.Partitioner.builtin("../__init__")
