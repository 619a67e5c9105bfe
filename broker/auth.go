package broker

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/broker/wire"
)

// Roles. Each has an NKey user whose seed is written to <data dir>/<role>.nk (mode 0600).
const (
	RoleAdmin    = "admin"
	RoleProducer = "producer"
	RoleConsumer = "consumer"
	roleBroker   = "broker" // the broker's own connection
)

// Roles lists the client roles, for messages and the CLI.
var Roles = []string{RoleAdmin, RoleProducer, RoleConsumer}

type authFile struct {
	Users map[string]string `json:"users"` // role -> public NKey
}

// ensureCredentials creates the role users on first start and loads them afterwards. Seeds are
// written with mode 0600; the public keys go to auth.json.
func ensureCredentials(dir string) (map[string]string, error) {
	path := filepath.Join(dir, "auth.json")
	b, err := os.ReadFile(path)
	if err == nil {
		var af authFile
		if err := json.Unmarshal(b, &af); err != nil {
			return nil, fmt.Errorf("read %s: %w (delete it and the .nk files to create new credentials)", path, err)
		}
		for _, r := range append(Roles, roleBroker) {
			if af.Users[r] == "" {
				return nil, fmt.Errorf("%s has no %s user; delete it and the .nk files to create new credentials", path, r)
			}
			if _, err := os.Stat(CredsPath(dir, r)); err != nil {
				return nil, fmt.Errorf("credentials %s: %w", CredsPath(dir, r), err)
			}
		}
		return af.Users, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	af := authFile{Users: map[string]string{}}
	for _, r := range append(Roles, roleBroker) {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return nil, err
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		if err := os.WriteFile(CredsPath(dir, r), append(seed, '\n'), 0o600); err != nil {
			return nil, err
		}
		if err := os.Chmod(CredsPath(dir, r), 0o600); err != nil { // in case the file existed
			return nil, err
		}
		af.Users[r] = pub
	}
	b, _ = json.MarshalIndent(af, "", "  ")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return af.Users, nil
}

// CredsPath is where the broker writes a role's NKey seed.
func CredsPath(dir, role string) string { return filepath.Join(dir, role+".nk") }

// RolePermissions returns the NATS permissions of a role (spec/protocol.md §8), nil meaning
// everything; 'pctl nats-server config' writes them into an external cluster's configuration.
func RolePermissions(role string) *server.Permissions { return permissions(role) }

// permissions returns the NATS permissions of a role (spec/protocol.md §8).
func permissions(role string) *server.Permissions {
	inbox := []string{"_INBOX.>", wire.EventsPrefix + ".>"}
	switch role {
	case RoleAdmin, roleBroker:
		return nil // everything
	case RoleProducer:
		return &server.Permissions{
			Publish: &server.SubjectPermission{Allow: []string{
				wire.DataPrefix + ".>", wire.ProducePrefix + ".>", wire.APIPrefix + ".>",
				"$JS.API.INFO", "$JS.API.STREAM.INFO.>", "$JS.API.DIRECT.GET.>", "$JS.API.STREAM.MSG.GET.>",
			}},
			Subscribe: &server.SubjectPermission{Allow: inbox},
		}
	case RoleConsumer:
		return &server.Permissions{
			Publish: &server.SubjectPermission{
				Allow: []string{
					wire.APIPrefix + ".>", "$JS.API.>", "$JS.ACK.>", "$JS.FC.>",
					"$KV." + wire.GroupsBucket + ".>",
				},
				Deny: []string{
					"$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>",
					"$JS.API.STREAM.PURGE.>", "$JS.API.STREAM.MSG.DELETE.>", "$JS.API.STREAM.RESTORE.>",
					"$JS.API.STREAM.SNAPSHOT.>",
				},
			},
			Subscribe: &server.SubjectPermission{Allow: inbox},
		}
	}
	return &server.Permissions{Publish: &server.SubjectPermission{Deny: []string{">"}}, Subscribe: &server.SubjectPermission{Deny: []string{">"}}}
}
