"""The rule for JetStream 10158, "duplicate message id is in process" (spec/protocol.md §5.1.5): a
sender counts, per message id, its 10158 answers; at 4 the id is stuck; other answers in between
(a wrong last sequence, no answer) do not start the count again. The expected decisions are
written out by hand from the spec's text, not computed with the rule. A stuck record fails with
pctl.MsgIdInProcess, an Unavailable (code ``unavailable``) whose message says what to do."""

import pytest

import pctl
from pctl._inprocess import IN_PROCESS_LIMIT, InProcess, in_process_error

IN_PROC, WRONG_LAST, NONE = 10158, 10071, 0
F, T = False, True

CASES = [
    ("four in a row", [IN_PROC, IN_PROC, IN_PROC, IN_PROC], [F, F, F, T]),
    ("by turns with a wrong last sequence", [IN_PROC, WRONG_LAST, IN_PROC, WRONG_LAST, IN_PROC, WRONG_LAST, IN_PROC],
     [F, F, F, F, F, F, T]),
    ("with no answer between", [IN_PROC, NONE, IN_PROC, NONE, IN_PROC, IN_PROC], [F, F, F, F, F, T]),
    ("three, then other answers", [IN_PROC, IN_PROC, IN_PROC, WRONG_LAST, NONE], [F, F, F, F, F]),
    ("stays stuck", [IN_PROC, IN_PROC, IN_PROC, IN_PROC, IN_PROC, WRONG_LAST], [F, F, F, T, T, T]),
    ("other answers never count", [WRONG_LAST, NONE, 10211, 10054, WRONG_LAST], [F, F, F, F, F]),
]


@pytest.mark.parametrize("name,answers,stuck", CASES, ids=[c[0] for c in CASES])
def test_in_process_rule(name, answers, stuck):
    assert IN_PROCESS_LIMIT == 4
    c = InProcess()
    assert [c.note(code) for code in answers] == stuck, name
    assert c.stuck == stuck[-1]


def test_renewed_id_counts_afresh():
    c = InProcess()
    for _ in range(3):
        c.note(IN_PROC)
    c.renewed()
    assert c.count == 0
    assert [c.note(IN_PROC) for _ in range(4)] == [F, F, F, T]


def test_in_process_error_is_typed_and_says_what_to_do():
    e = in_process_error(7, "p-7-abc", 2, 4)
    assert isinstance(e, pctl.MsgIdInProcess) and isinstance(e, pctl.Unavailable) and isinstance(e, pctl.PctlError)
    assert e.code == "unavailable"
    assert (e.msg_id, e.partition, e.answers) == ("p-7-abc", 2, 4)
    for want in ("10158", "record 7", "p-7-abc", "refused 4 times by partition 2", "fate is unknown", "read partition 2"):
        assert want in str(e), f"{e} does not say {want!r}"
    # Across the wire (the produce service) the code is unavailable: it maps back to an Unavailable.
    assert isinstance(pctl.error_from_code(e.code, e.message), pctl.Unavailable)
