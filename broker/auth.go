package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
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
// They do not include the user's private inbox: UserPermissions does.
func RolePermissions(role string) *server.Permissions { return permissions(role) }

// UserPermissions returns the permissions of the role user whose public NKey is pub: the role's,
// plus its private inbox (InboxPrefix), where pctl's Go client receives its replies.
func UserPermissions(role, pub string) *server.Permissions {
	p := permissions(role)
	if p != nil && pub != "" {
		p.Subscribe.Allow = append(p.Subscribe.Allow, InboxPrefix(pub)+".>")
	}
	return p
}

// InboxPrefix is the reply-subject prefix of the user whose public NKey is pub
// (spec/protocol.md §8): a scoped user may subscribe to its own inbox only, so that no
// credential can watch another client's replies (records delivered to it, its acknowledgements).
func InboxPrefix(pub string) string { return wire.InboxPrefix(pub) }

// Scoped roles: a credential limited to one topic (spec/protocol.md §8).
const (
	ScopeProducer = "producer" // may produce to one topic
	ScopeConsumer = "consumer" // may consume one topic as one group
)

// ScopedUser is a credential limited to one topic and, for a consumer, one group: Kafka's ACLs
// on a topic and a group.
type ScopedUser = wire.Credential

// validateScoped checks a scoped user's fields.
func validateScoped(u ScopedUser) error {
	if !nkeys.IsValidPublicUserKey(u.NKey) {
		return fmt.Errorf("%w: %q is not a public NKey user key (U...)", wire.ErrBadRequest, u.NKey)
	}
	if err := wire.ValidTopic(u.Topic); err != nil {
		return fmt.Errorf("%w: topic: %v", wire.ErrBadRequest, err)
	}
	if u.TopicID == "" || strings.ContainsAny(u.TopicID, ".*> \t") {
		return fmt.Errorf("%w: topic id %q", wire.ErrBadRequest, u.TopicID)
	}
	switch u.Role {
	case ScopeProducer:
		if u.Group != "" {
			return fmt.Errorf("%w: a producer credential has no group (got %q)", wire.ErrBadRequest, u.Group)
		}
	case ScopeConsumer:
		if err := wire.ValidGroup(u.Group); err != nil {
			return fmt.Errorf("%w: a consumer credential needs its group: %v", wire.ErrBadRequest, err)
		}
	default:
		return fmt.Errorf("%w: role %q: a scoped credential is a producer or a consumer (the admin role is never scoped)", wire.ErrBadRequest, u.Role)
	}
	return nil
}

// ScopedPermissions returns what a scoped user may publish and subscribe to (spec/protocol.md §8).
//
// A consumer of (topic T, group G) reads T's streams through consumers filtered on
// pctl.data.T.> (the filter is a token of the consumer-create subject: a consumer filtered so
// reads nothing of another topic), reads and writes only G's keys of T in the group bucket
// (writes to $KV.pctl-groups.<T's id>.G.>; its watch and gets are filtered the same way), and
// subscribes only to its own inbox and T's events. A producer of T publishes only to T's record
// subjects (not the retired ones) and T's produce service, and reads back only T's streams
// (direct gets, which name a stream: the first Partitions are listed). Both may read the broker
// API and stream metadata (STREAM.INFO and STREAM.LIST: counts and sequences, no records).
func ScopedPermissions(u ScopedUser) *server.Permissions {
	groups := "$KV." + wire.GroupsBucket + "."
	common := []string{wire.APIPrefix + ".>", "$JS.API.INFO", "$JS.API.STREAM.INFO.*", "$JS.API.STREAM.LIST"}
	sub := []string{InboxPrefix(u.NKey) + ".>", wire.TopicEventSubject(u.Topic)}
	switch u.Role {
	case ScopeConsumer:
		mine := groups + u.TopicID + "." + u.Group + ".>"
		return &server.Permissions{
			Publish: &server.SubjectPermission{Allow: append(common,
				"$JS.API.CONSUMER.CREATE.*.*."+wire.DataPrefix+"."+u.Topic+".>",
				"$JS.API.CONSUMER.CREATE.KV_"+wire.GroupsBucket+".*."+mine,
				"$JS.API.DIRECT.GET.KV_"+wire.GroupsBucket+"."+mine,
				"$JS.API.CONSUMER.MSG.NEXT.*.*", "$JS.API.CONSUMER.INFO.*.*", "$JS.API.CONSUMER.DELETE.*.*",
				"$JS.FC.>",
				mine,
			)},
			Subscribe: &server.SubjectPermission{Allow: sub},
		}
	case ScopeProducer:
		allow := append(common, wire.DataPrefix+"."+u.Topic+".>", wire.ProduceSubject(u.Topic))
		for q := 0; q < u.Partitions; q++ {
			allow = append(allow, "$JS.API.DIRECT.GET."+wire.StreamName(u.Topic, q), "$JS.API.STREAM.MSG.GET."+wire.StreamName(u.Topic, q))
		}
		return &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: allow, Deny: []string{wire.DataPrefix + "." + u.Topic + ".retired.>"}},
			Subscribe: &server.SubjectPermission{Allow: sub},
		}
	}
	return &server.Permissions{Publish: &server.SubjectPermission{Deny: []string{">"}}, Subscribe: &server.SubjectPermission{Deny: []string{">"}}}
}

// UserConfigEntry returns a user's entry for the users list of a nats-server configuration's
// authorization block (an external cluster's nodes need it to let the user in).
func UserConfigEntry(comment, pub string, p *server.Permissions) string {
	var b strings.Builder
	if comment != "" {
		fmt.Fprintf(&b, "# %s\n", strings.ReplaceAll(comment, "\n", " "))
	}
	fmt.Fprintf(&b, "{ nkey: %s", confQuote(pub))
	if p != nil {
		b.WriteString(", permissions: {\n")
		for _, d := range []struct {
			name string
			sp   *server.SubjectPermission
		}{{"publish", p.Publish}, {"subscribe", p.Subscribe}} {
			if d.sp == nil || len(d.sp.Allow)+len(d.sp.Deny) == 0 {
				continue
			}
			fmt.Fprintf(&b, "  %s: {", d.name)
			sep := " "
			if len(d.sp.Allow) > 0 {
				fmt.Fprintf(&b, "%sallow: %s", sep, confList(d.sp.Allow))
				sep = ", "
			}
			if len(d.sp.Deny) > 0 {
				fmt.Fprintf(&b, "%sdeny: %s", sep, confList(d.sp.Deny))
			}
			b.WriteString(" }\n")
		}
		b.WriteString("}")
	}
	b.WriteString(" }\n")
	return b.String()
}

func confList(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = confQuote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// confQuote quotes a string for the nats-server configuration syntax (quoted, "$" and ">" stay
// literal).
func confQuote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`, "\t", `\t`, "\r", `\r`)
	return `"` + r.Replace(s) + `"`
}

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
			}, Deny: []string{wire.DataPrefix + ".*.retired.>"}}, // retired partitions are never published to
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
					// Cluster and account operations, and pausing other clients' consumers.
					"$JS.API.STREAM.PEER.REMOVE.>", "$JS.API.STREAM.LEADER.STEPDOWN.>", "$JS.API.CONSUMER.LEADER.STEPDOWN.>",
					"$JS.API.META.>", "$JS.API.SERVER.>", "$JS.API.ACCOUNT.>", "$JS.API.CONSUMER.PAUSE.>", "$JS.API.CONSUMER.UNPIN.>",
				},
			},
			Subscribe: &server.SubjectPermission{Allow: inbox},
		}
	}
	return &server.Permissions{Publish: &server.SubjectPermission{Deny: []string{">"}}, Subscribe: &server.SubjectPermission{Deny: []string{">"}}}
}

// relayed reports whether a message reached a broker service through JetStream instead of from a
// client allowed to publish to its subject. NATS permissions check who publishes to a subject,
// but JetStream sends on behalf of whoever asks: stored messages to a pull request's reply
// subject, to a push consumer's deliver subject (and its queue group), a direct get's answer,
// an API response or a status message to any reply subject a client names. A client with read
// access to some stream could thus make a value it stored arrive at pctl.admin.topic.delete as
// if an admin had sent it (TestJetStreamCannotRelayToTheBroker). What JetStream sends carries
// its marks: deliveries have a $JS.ACK reply subject; direct get answers the Nats-Stream
// header; status messages a status line; API responses a JSON "type" of io.nats.jetstream. A
// request/reply API call must also name a reply subject, which relayed deliveries without a
// mark never do.
func relayed(m *nats.Msg, needReply bool) bool {
	if needReply && m.Reply == "" {
		return true
	}
	if strings.HasPrefix(m.Reply, "$JS.") {
		return true
	}
	if m.Header != nil {
		for _, h := range []string{"Nats-Stream", "Nats-Sequence", "Nats-Subject", "Status", "Nats-Status"} {
			if len(m.Header.Values(h)) > 0 {
				return true
			}
		}
	}
	return bytes.HasPrefix(bytes.TrimLeft(m.Data, " \t\r\n"), []byte(`{"type":"io.nats.`))
}
