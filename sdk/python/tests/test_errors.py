"""Error mapping (spec/protocol.md §3): every code that crosses the wire has its PctlError class,
a broker reply with that code decodes to that class, and the class carries that code back. The
codes are read from the spec's own text, so a code added there fails this test until the SDK
has it."""

import pathlib
import re

import pytest

import pctl

SPEC = pathlib.Path(__file__).resolve().parents[3] / "spec" / "protocol.md"


def spec_codes():
    m = re.search(r"\nCodes: (.*?)Clients map codes", SPEC.read_text(), re.S)
    assert m, "spec/protocol.md §3 has no 'Codes: ... Clients map codes' sentence any more: update this test"
    return re.findall(r"`([a-z_]+)`", re.sub(r"\([^)]*\)", "", m.group(1)))


# Each §3 code and the class it decodes to.
CLASS_OF = {
    "bad_request": pctl.BadRequest, "not_found": pctl.NotFound, "exists": pctl.Exists, "conflict": pctl.Conflict,
    "in_use": pctl.InUse, "plugin_rejected": pctl.PluginRejected, "plugin_failed": pctl.PluginFailed,
    "fenced": pctl.Fenced, "change_in_progress": pctl.ChangeInProgress, "permission": pctl.PermissionDenied,
    "unavailable": pctl.Unavailable, "out_of_sequence": pctl.OutOfSequence, "unsupported": pctl.Unsupported,
    "internal": pctl.InternalError,
}


def test_error_table_is_the_spec_list():
    codes = spec_codes()
    assert len(codes) == 14, f"spec/protocol.md §3 lists {len(codes)} codes: {codes}"
    assert sorted(CLASS_OF) == sorted(codes)


@pytest.mark.parametrize("code", spec_codes())
def test_error_code_maps_both_ways(code):
    want = CLASS_OF[code]
    e = pctl.error_from_code(code, "m", detail={"x": 1})
    assert type(e) is want, f"code {code} decodes to {type(e).__name__}, want {want.__name__}"
    assert e.code == code and e.message == "m" and e.detail == {"x": 1}
    assert want("m").code == code, f"{want.__name__} has code {want('m').code}, want {code}"
    assert want.__name__ in pctl.__all__


def test_error_unknown_code_is_internal_and_keeps_it():
    e = pctl.error_from_code("no_such_code", "m")
    assert isinstance(e, pctl.InternalError) and e.code == "no_such_code"
