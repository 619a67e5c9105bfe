package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"testing"
)

// TestCodeFirstMatchIsDeterministic: an error that wraps several sentinels gets one code, the
// same on every call, chosen by the documented precedence (the more specific refusal first).
// Before the table, Code ranged over a map: the code of such an error changed from call to call.
func TestCodeFirstMatchIsDeterministic(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want string
	}{
		{"fenced and bad request", errors.Join(ErrBadRequest, ErrFenced), "fenced"},
		{"bad request wrapping unavailable", fmt.Errorf("%w: creds: %w", ErrBadRequest, ErrUnavailable), "bad_request"},
		{"unavailable wrapping not found", fmt.Errorf("%w: follow: %w", ErrUnavailable, ErrNotFound), "not_found"},
		{"change in progress and conflict", errors.Join(ErrConflict, ErrChangeInProgress), "change_in_progress"},
		{"permission and internal", errors.Join(ErrInternal, ErrPermission), "permission"},
		{"out of sequence and unavailable", errors.Join(ErrUnavailable, ErrOutOfSequence), "out_of_sequence"},
		{"no sentinel", errors.New("boom"), "internal"},
		{"nil", nil, "internal"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 200; i++ {
				if got := Code(tc.err); got != tc.want {
					t.Fatalf("call %d: Code(%v) = %q, want %q", i, tc.err, got, tc.want)
				}
			}
		})
	}
}

// TestCodesRoundTrip: every sentinel's code comes back, through a RemoteError, as the same
// sentinel (errors.Is on both sides of the wire), and the codes are the ones spec/protocol.md §3
// names (written out here, not read from the table).
func TestCodesRoundTrip(t *testing.T) {
	want := map[string]error{
		"bad_request": ErrBadRequest, "not_found": ErrNotFound, "exists": ErrExists, "conflict": ErrConflict,
		"in_use": ErrInUse, "plugin_rejected": ErrPluginRejected, "plugin_failed": ErrPluginFailed,
		"fenced": ErrFenced, "change_in_progress": ErrChangeInProgress, "permission": ErrPermission,
		"unavailable": ErrUnavailable, "out_of_sequence": ErrOutOfSequence, "unsupported": ErrUnsupported, "internal": ErrInternal,
	}
	if len(codeTable) != len(want) {
		t.Errorf("%d codes in the table, want %d", len(codeTable), len(want))
	}
	for code, s := range want {
		if got := Code(fmt.Errorf("context: %w", s)); got != code {
			t.Errorf("Code(%v) = %q, want %q", s, got, code)
		}
		re := &RemoteError{Code: code, Message: "m"}
		if !errors.Is(re, s) {
			t.Errorf("RemoteError{%s} is not %v", code, s)
		}
	}
	if !errors.Is(&RemoteError{Code: "no_such_code"}, ErrInternal) {
		t.Errorf("an unknown code should unwrap to ErrInternal")
	}
}

// TestRemoteErrorInProcess: an error reply's in_process detail (spec/protocol.md §3) makes a
// RemoteError match ErrMsgIDInProcess as well as ErrUnavailable; without the detail, with it false,
// or on another code it does not. The bodies are written by hand in the spec's words, and go
// through ErrorReply as a batched result's error does (§5.2).
func TestRemoteErrorInProcess(t *testing.T) {
	tests := []struct {
		name, body string
		inProcess  bool
		sentinel   error
	}{
		{"stuck", `{"code":"unavailable","message":"m","detail":{"in_process":true,"partition":2,"epoch":1,"msg_id":"p-1-t"}}`, true, ErrUnavailable},
		{"no detail", `{"code":"unavailable","message":"m"}`, false, ErrUnavailable},
		{"in_process false", `{"code":"unavailable","message":"m","detail":{"in_process":false}}`, false, ErrUnavailable},
		{"another code", `{"code":"internal","message":"m","detail":{"in_process":true}}`, false, ErrInternal},
		{"another detail", `{"code":"unavailable","message":"m","detail":[1,2]}`, false, ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var er ErrorReply
			if err := json.Unmarshal([]byte(tc.body), &er); err != nil {
				t.Fatal(err)
			}
			err := error(er.Remote())
			if got := errors.Is(err, ErrMsgIDInProcess); got != tc.inProcess {
				t.Fatalf("errors.Is(ErrMsgIDInProcess) = %v, want %v", got, tc.inProcess)
			}
			if !errors.Is(err, tc.sentinel) {
				t.Fatalf("errors.Is(%v) = false", tc.sentinel)
			}
			d, ok := er.Remote().InProcess()
			if ok != tc.inProcess || ok && (d.Partition != 2 || d.Epoch != 1 || d.MsgID != "p-1-t") {
				t.Fatalf("InProcess() = %+v, %v", d, ok)
			}
		})
	}
}
