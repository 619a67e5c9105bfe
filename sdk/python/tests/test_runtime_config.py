"""Canonical config bytes (spec/abi-v1.md §2.5), with the rules of Go's partitioner.EncodeConfig."""

import pytest

from pctl.runtime.config import ConfigError, encode_config


def test_no_pairs_is_the_empty_config():
    assert encode_config([]) == b""


def test_pairs_become_sorted_lines():
    assert encode_config(["a=1"]) == b"a=1\n"
    assert encode_config(["b=2", "a=1", "B=0", "_=x", "-=y", ".=z", "0=9"]) == b"-=y\n.=z\n0=9\nB=0\n_=x\na=1\nb=2\n"
    assert encode_config(["k="]) == b"k=\n"
    assert encode_config(["k=a=b"]) == b"k=a=b\n"
    assert encode_config(["x=é€😀"]) == "x=é€😀\n".encode()


def test_bytewise_order():
    assert encode_config(["a=1", "Z=2", "aa=3", "a.b=4"]) == b"Z=2\na=1\na.b=4\naa=3\n"


@pytest.mark.parametrize("pairs,msg", [
    (["novalue"], "has no '='"),
    (["=v"], "must match"),
    (["a b=1"], "must match"),
    (["ü=1"], "must match"),
    (["a=1\n2"], "without newlines"),
    (["a=\udcff"], "UTF-8"),  # argv bytes that were not UTF-8 arrive as surrogates
    (["a=1", "a=2"], "given twice"),
])
def test_malformed_pairs_are_refused(pairs, msg):
    with pytest.raises(ConfigError, match=msg) as e:
        encode_config(pairs)
    assert str(e.value).startswith("bad partitioner config")
