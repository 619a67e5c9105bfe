package client

import (
	"context"
	"fmt"
	"os"

	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/broker/wire"
)

// publicKey returns the public key of an NKey seed file.
func publicKey(seedFile string) (string, error) {
	b, err := os.ReadFile(seedFile)
	if err != nil {
		return "", err
	}
	kp, err := nkeys.ParseDecoratedNKey(b)
	if err != nil {
		return "", err
	}
	defer kp.Wipe()
	return kp.PublicKey()
}

// AddCredential asks the broker to let in a scoped user (spec/protocol.md §8): req names its
// public key, role ("producer" or "consumer"), topic and (consumers) group. With an embedded
// server the user may connect when this returns (Applied); otherwise the reply's Config is the
// user's entry for every node's configuration. Needs the admin role.
func (c *Client) AddCredential(ctx context.Context, req wire.CredsRequest) (*wire.CredsReply, error) {
	var r wire.CredsReply
	if _, err := c.request(ctx, wire.AdminCredsAdd, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// RevokeCredential removes a scoped user from the embedded server (its connections close).
func (c *Client) RevokeCredential(ctx context.Context, pub string) (*wire.CredsReply, error) {
	var r wire.CredsReply
	if _, err := c.request(ctx, wire.AdminCredsRevoke, wire.CredsRequest{NKey: pub}, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// Credentials lists the scoped users the embedded server knows.
func (c *Client) Credentials(ctx context.Context) ([]wire.Credential, error) {
	var r wire.CredsListReply
	if _, err := c.request(ctx, wire.AdminCredsList, struct{}{}, &r); err != nil {
		return nil, err
	}
	return r.Users, nil
}

// NewCredential makes an NKey user key pair: the seed (to keep secret, in the user's file) and
// the public key (for AddCredential).
func NewCredential() (seed []byte, pub string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return nil, "", fmt.Errorf("make a key pair: %w", err)
	}
	defer kp.Wipe()
	s, err := kp.Seed()
	if err != nil {
		return nil, "", err
	}
	seed = append([]byte(nil), s...) // Wipe zeroes the key pair's own copy
	pub, err = kp.PublicKey()
	return seed, pub, err
}
