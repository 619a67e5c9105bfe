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

// TestRemoteErrorDetails: a RemoteError matches ErrTopicCreating and ErrRecordTooLarge by its
// detail alone (spec/protocol.md §3), with the right code, never by the message's words; the
// local errors match the same sentinels and encode the same details.
func TestRemoteErrorDetails(t *testing.T) {
	for _, tc := range []struct {
		name            string
		re              *RemoteError
		creating, large bool
		limit           string
	}{
		{"creating", &RemoteError{Code: "unavailable", Message: "x", Detail: []byte(`{"creating":true,"topic":"t"}`)}, true, false, ""},
		{"creating words only", &RemoteError{Code: "unavailable", Message: "topic t is being created; retry in a moment"}, false, false, ""},
		{"creating with another code", &RemoteError{Code: "conflict", Detail: []byte(`{"creating":true}`)}, false, false, ""},
		{"too large", &RemoteError{Code: "bad_request", Detail: []byte(`{"too_large":true,"limit":"max_msg_size"}`)}, false, true, LimitMaxMsgSize},
		{"too large words only", &RemoteError{Code: "bad_request", Message: "message size exceeds maximum allowed"}, false, false, ""},
		{"too large false", &RemoteError{Code: "bad_request", Detail: []byte(`{"too_large":false}`)}, false, false, ""},
		{"too large with another code", &RemoteError{Code: "unavailable", Detail: []byte(`{"too_large":true}`)}, false, false, ""},
		{"bad detail", &RemoteError{Code: "bad_request", Detail: []byte(`{`)}, false, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errors.Is(tc.re, ErrTopicCreating); got != tc.creating {
				t.Errorf("errors.Is(ErrTopicCreating) = %v, want %v", got, tc.creating)
			}
			if got := errors.Is(tc.re, ErrRecordTooLarge); got != tc.large {
				t.Errorf("errors.Is(ErrRecordTooLarge) = %v, want %v", got, tc.large)
			}
			limit, ok := TooLargeLimit(tc.re)
			if ok != tc.large || limit != tc.limit {
				t.Errorf("TooLargeLimit = %q, %v; want %q, %v", limit, ok, tc.limit, tc.large)
			}
		})
	}
	local := []error{&TopicCreatingError{Topic: "t"}, TooLarge(LimitMaxPayload, "too big")}
	for i, sentinel := range []error{ErrTopicCreating, ErrRecordTooLarge} {
		if !errors.Is(local[i], sentinel) || Code(local[i]) != []string{"unavailable", "bad_request"}[i] {
			t.Errorf("%v: matches %v: %v, code %s", local[i], sentinel, errors.Is(local[i], sentinel), Code(local[i]))
		}
	}
	if limit, ok := TooLargeLimit(fmt.Errorf("wrapped: %w", local[1])); !ok || limit != LimitMaxPayload {
		t.Errorf("TooLargeLimit of a wrapped TooLargeError = %q, %v", limit, ok)
	}
}
