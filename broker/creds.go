package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker/wire"
)

// usersFile is where an embedded broker keeps its scoped users (public keys and scopes only: the
// seeds stay with whoever issued them).
const usersFile = "users.json"

// userRegistry is the embedded server's list of scoped users: kept in the data directory, loaded
// at start, and applied to the running server by a configuration reload whenever it changes.
type userRegistry struct {
	dir string

	mu    sync.Mutex // held across the file write and the reload (local, not network, I/O)
	users []ScopedUser
	base  []*server.NkeyUser // the role users
	srv   *server.Server
	opts  *server.Options // what the server runs with (a copy the server never sees)

	// adds is the broker's streamAdds: a reload holds it for writing (see Broker.streamAdds).
	adds *sync.RWMutex
}

// newUserRegistry loads the scoped users and adds them to opts (before the server starts).
func newUserRegistry(dir string, opts *server.Options) (*userRegistry, error) {
	// The registry keeps its own copies: the server keeps (and may change) the options it runs
	// with, and reading them while it does is a data race (seen under -race beside a reload).
	r := &userRegistry{dir: dir, base: opts.Clone().Nkeys}
	b, err := os.ReadFile(filepath.Join(dir, usersFile))
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return nil, err
	default:
		var f wire.CredsListReply
		if err := json.Unmarshal(b, &f); err != nil {
			return nil, fmt.Errorf("read %s: %w (fix or remove it: it lists the scoped credentials 'pctl creds issue' made)", filepath.Join(dir, usersFile), err)
		}
		for _, u := range f.Users {
			if err := validateScoped(u); err != nil {
				return nil, fmt.Errorf("%s: user %s: %w", filepath.Join(dir, usersFile), u.NKey, err)
			}
		}
		r.users = f.Users
	}
	opts.Nkeys = r.nkeys()
	r.opts = opts.Clone()
	return r, nil
}

func (r *userRegistry) nkeys() []*server.NkeyUser {
	out := append([]*server.NkeyUser(nil), r.base...)
	for _, u := range r.users {
		out = append(out, &server.NkeyUser{Nkey: u.NKey, Permissions: ScopedPermissions(u)})
	}
	return out
}

// update changes the list with f (under the lock), saves it and reloads the server. f returns
// false when nothing changed.
func (r *userRegistry) update(f func(users []ScopedUser) ([]ScopedUser, bool)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	users, changed := f(append([]ScopedUser(nil), r.users...))
	if !changed {
		return nil
	}
	b, _ := json.MarshalIndent(wire.CredsListReply{Users: users}, "", "  ")
	path := filepath.Join(r.dir, usersFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("%w: save scoped users: %v", wire.ErrInternal, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("%w: save scoped users: %v", wire.ErrInternal, err)
	}
	prev := r.users
	r.users = users
	opts := r.opts.Clone()
	opts.Nkeys = r.nkeys()
	r.adds.Lock()
	err := r.srv.ReloadOptions(opts.Clone()) // the server gets a copy of its own
	r.adds.Unlock()
	if err != nil {
		r.users = prev
		return fmt.Errorf("%w: reload the server's users: %v", wire.ErrInternal, err)
	}
	r.opts = opts
	return nil
}

func (r *userRegistry) list() []ScopedUser {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ScopedUser(nil), r.users...)
}

// credsComment labels a user's configuration entry.
func credsComment(u ScopedUser) string {
	s := fmt.Sprintf("pctl %s of topic %s", u.Role, u.Topic)
	if u.Group != "" {
		s += ", group " + u.Group
	}
	s += fmt.Sprintf(" (topic id %s, %d partitions)", u.TopicID, u.Partitions)
	if u.Name != "" {
		s += ": " + u.Name
	}
	return s
}

// apiCredsAdd lets a scoped user in: the embedded server at once; with an external NATS server
// the reply carries the configuration entry to add to every node.
func (b *Broker) apiCredsAdd(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.CredsRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	t, _, err := b.getTopic(ctx, req.Topic)
	if err != nil {
		return nil, err
	}
	u := ScopedUser{NKey: req.NKey, Role: req.Role, Topic: t.Name, TopicID: t.ID, Group: req.Group, Name: req.Name,
		Created: time.Now().UTC().Truncate(time.Second), Partitions: t.MaxPartitions()}
	if err := validateScoped(u); err != nil {
		return nil, err
	}
	reply := wire.CredsReply{User: u, Config: UserConfigEntry(credsComment(u), u.NKey, ScopedPermissions(u))}
	if b.users == nil {
		return reply, nil
	}
	err = b.users.update(func(us []ScopedUser) ([]ScopedUser, bool) {
		for i := range us {
			if us[i].NKey == u.NKey {
				us[i] = u
				return us, true
			}
		}
		return append(us, u), true
	})
	if err != nil {
		return nil, err
	}
	reply.Applied = true
	b.cfg.Logf("broker: scoped credential %s: %s", u.NKey, credsComment(u))
	return reply, nil
}

// apiCredsRevoke removes a scoped user: the embedded server closes its connections.
func (b *Broker) apiCredsRevoke(ctx context.Context, m *nats.Msg) (any, error) {
	var req wire.CredsRequest
	if err := decode(m, &req); err != nil {
		return nil, err
	}
	if b.users == nil {
		return nil, fmt.Errorf("%w: this broker uses an external NATS server: remove user %s from every node's configuration and reload them", wire.ErrBadRequest, req.NKey)
	}
	var found *ScopedUser
	err := b.users.update(func(us []ScopedUser) ([]ScopedUser, bool) {
		for i := range us {
			if us[i].NKey == req.NKey {
				u := us[i]
				found = &u
				return append(us[:i], us[i+1:]...), true
			}
		}
		return us, false
	})
	if err != nil {
		return nil, err
	}
	if found == nil {
		return nil, fmt.Errorf("%w: no scoped credential has the public key %q; 'pctl creds list' shows them", wire.ErrNotFound, req.NKey)
	}
	b.cfg.Logf("broker: revoked scoped credential %s", req.NKey)
	return wire.CredsReply{User: *found, Applied: true}, nil
}

// apiCredsList lists the scoped users of the embedded server.
func (b *Broker) apiCredsList(ctx context.Context, m *nats.Msg) (any, error) {
	if b.users == nil {
		return nil, fmt.Errorf("%w: this broker uses an external NATS server, whose configuration lists its users", wire.ErrBadRequest)
	}
	return wire.CredsListReply{Users: b.users.list()}, nil
}

// refreshScoped follows a topic's growth for its scoped producers: their direct gets name each
// partition stream, so a topic with more partitions than a user's permissions name gets them
// (a configuration reload). Runs after every descriptor change of a topic with scoped users.
func (b *Broker) refreshScoped(ctx context.Context, topic string) {
	if b.users == nil {
		return
	}
	var want []ScopedUser
	for _, u := range b.users.list() {
		if u.Topic == topic {
			want = append(want, u)
		}
	}
	if len(want) == 0 {
		return
	}
	t, _, err := b.getTopic(ctx, topic)
	if err != nil {
		return
	}
	err = b.users.update(func(us []ScopedUser) ([]ScopedUser, bool) {
		changed := false
		for i := range us {
			if us[i].Topic == topic && us[i].TopicID == t.ID && us[i].Partitions < t.MaxPartitions() {
				us[i].Partitions, changed = t.MaxPartitions(), true
			}
		}
		return us, changed
	})
	if err != nil {
		b.cfg.Logf("broker: scoped credentials of topic %s: %v", topic, err)
	}
}

// credsRoutes adds the credential API to the broker's routes.
func (b *Broker) credsRoutes(routes map[string]handler) {
	routes[wire.AdminCredsAdd] = b.apiCredsAdd
	routes[wire.AdminCredsList] = b.apiCredsList
	routes[wire.AdminCredsRevoke] = b.apiCredsRevoke
}

// subscribeCreds follows descriptor changes for refreshScoped.
func (b *Broker) subscribeCreds() error {
	if b.users == nil {
		return nil
	}
	s, err := b.nc.Subscribe(wire.EventsPrefix+".topic.*", func(m *nats.Msg) {
		topic := strings.TrimPrefix(m.Subject, wire.EventsPrefix+".topic.")
		b.spawn(func() {
			ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
			defer cancel()
			b.refreshScoped(ctx, topic)
		})
	})
	if err != nil {
		return err
	}
	b.subs = append(b.subs, s)
	return nil
}
