package wire

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"
)

// TestKeyTokenVectors checks KeyToken against spec/vectors/compact/keytoken.json, written from
// the spec's text by Python's base64 and hashlib (tools/crosscheck/keytoken.py), not by this code.
// Every SDK checks its own key token against the same file.
func TestKeyTokenVectors(t *testing.T) {
	data, err := os.ReadFile("../../spec/vectors/compact/keytoken.json")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []struct {
			KeyHex string `json:"key_hex"`
			Token  string `json:"token"`
		} `json:"cases"`
	}
	if err := json.Unmarshal(data, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) < 500 {
		t.Fatalf("only %d cases", len(f.Cases))
	}
	long := 0
	for _, c := range f.Cases {
		k, err := hex.DecodeString(c.KeyHex)
		if err != nil {
			t.Fatal(err)
		}
		if got := KeyToken(k); got != c.Token {
			t.Errorf("KeyToken(%x) = %q, want %q", k, got, c.Token)
		}
		if strings.HasPrefix(c.Token, "h") {
			long++
		}
	}
	if long == 0 {
		t.Fatal("no hashed (long-key) case")
	}
}
