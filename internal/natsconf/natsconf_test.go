package natsconf

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// TestRenderParsesWithNATSServer checks the rendered files against nats-server's own parser (the
// independent source): every setting comes back as written.
func TestRenderParsesWithNATSServer(t *testing.T) {
	kp, _ := nkeys.CreateUser()
	pub, _ := kp.PublicKey()
	kp2, _ := nkeys.CreateUser()
	pub2, _ := kp2.PublicKey()
	dir := t.TempDir()
	store := filepath.Join(dir, "store dir with \"quotes\" and $dollar")
	tests := []struct {
		name  string
		node  Node
		check func(t *testing.T, o *server.Options)
	}{
		{
			name: "cluster node with users",
			node: Node{
				Name: "n1", Host: "127.0.0.1", Port: 14222, HTTPPort: 18222,
				ClusterName: "pctl", ClusterPort: 16222, Routes: []string{"127.0.0.1:16222", "127.0.0.1:16223"},
				RouteUser: "route", RoutePassword: "p@ss/w:rd",
				StoreDir: store, SyncInterval: "always", MaxPayload: 16 << 20,
				Users: []User{
					{Comment: "broker", NKey: pub},
					{Comment: "producer", NKey: pub2, Permissions: &Permissions{
						PublishAllow: []string{"pctl.data.>", "$JS.API.INFO"}, PublishDeny: []string{"$JS.API.STREAM.DELETE.>"},
						SubscribeAllow: []string{"_INBOX.>"},
					}},
				},
			},
			check: func(t *testing.T, o *server.Options) {
				eq(t, "server_name", o.ServerName, "n1")
				eq(t, "host", o.Host, "127.0.0.1")
				eq(t, "port", o.Port, 14222)
				eq(t, "http port", o.HTTPPort, 18222)
				eq(t, "max_payload", o.MaxPayload, int32(16<<20))
				eq(t, "jetstream", o.JetStream, true)
				eq(t, "store_dir", o.StoreDir, store)
				eq(t, "sync always", o.SyncAlways, true)
				eq(t, "cluster name", o.Cluster.Name, "pctl")
				eq(t, "cluster port", o.Cluster.Port, 16222)
				eq(t, "route user", o.Cluster.Username, "route")
				eq(t, "route password", o.Cluster.Password, "p@ss/w:rd")
				eq(t, "routes", len(o.Routes), 2)
				pw, _ := o.Routes[1].User.Password()
				eq(t, "route URL user", o.Routes[1].User.Username(), "route")
				eq(t, "route URL password", pw, "p@ss/w:rd")
				eq(t, "route URL host", o.Routes[1].Host, "127.0.0.1:16223")
				eq(t, "users", len(o.Nkeys), 2)
				eq(t, "broker key", o.Nkeys[0].Nkey, pub)
				if o.Nkeys[0].Permissions != nil {
					t.Errorf("broker user has permissions %+v, want none (everything)", o.Nkeys[0].Permissions)
				}
				p := o.Nkeys[1].Permissions
				eq(t, "publish allow", p.Publish.Allow, []string{"pctl.data.>", "$JS.API.INFO"})
				eq(t, "publish deny", p.Publish.Deny, []string{"$JS.API.STREAM.DELETE.>"})
				eq(t, "subscribe allow", p.Subscribe.Allow, []string{"_INBOX.>"})
			},
		},
		{
			name: "single server defaults",
			node: Node{Name: "solo", StoreDir: store, SyncInterval: "30s"},
			check: func(t *testing.T, o *server.Options) {
				eq(t, "port (nats-server applies its default 4222 later)", o.Port, 0)
				eq(t, "sync always", o.SyncAlways, false)
				eq(t, "sync interval", o.SyncInterval, 30*time.Second)
				eq(t, "cluster", o.Cluster.Name, "")
				eq(t, "users", len(o.Nkeys), 0)
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "n.conf")
			if err := os.WriteFile(path, tc.node.Render(), 0o600); err != nil {
				t.Fatal(err)
			}
			o, err := server.ProcessConfigFile(path)
			if err != nil {
				t.Fatalf("nats-server rejects the rendered file: %v\n%s", err, tc.node.Render())
			}
			tc.check(t, o)
		})
	}
}

func eq[V any](t *testing.T, what string, got, want V) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s = %v, want %v", what, got, want)
	}
}
