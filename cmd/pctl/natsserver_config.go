package main

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/internal/natsconf"
)

const natsServerConfigHelp = `
Writes the NATS side of a pctl cluster into --dir: one nats-server configuration file per node
(node-1.conf, ...) and the NKey seeds (mode 0600) of the users they allow:

  broker.nk     'pctl serve --creds': the broker's own connection (everything)
  admin.nk      admin clients (everything)
  producer.nk   producers (spec/protocol.md §8: produce, read topics and plugins)
  consumer.nk   consumers (consume, commit positions)

Every node has JetStream on (store in DIR/node-N, or --store-dir), max_payload 16 MiB
(a plugin travels in one message), sync_interval always (JetStream fsyncs before acknowledging,
so an acknowledged record survives a power loss; --sync-interval 2m is nats-server's default),
routes to every other node protected by a generated route password, and monitoring
(/healthz, /jsz) on the HTTP port of 127.0.0.1 (it has no authentication).

Without --hosts the nodes run on this machine on 127.0.0.1, ports counted up from the base ports
(4222.., 6222.., 8222..). With --hosts a,b,c there is one node per host, each on the base ports on
all interfaces: copy node-N.conf to host N (with --store-dir naming a directory that exists there).

It prints how to start the nodes and the broker. Existing files are not overwritten without
--force (new keys: every client then needs the new credentials).

Examples:
  pctl nats-server config --dir ./cluster
  pctl nats-server config --dir ./cluster --hosts nats-1,nats-2,nats-3 --store-dir /var/lib/nats
`

func cmdNATSServerConfig(e *env, args []string) int {
	fs := newFlags(e, "nats-server config", "nats-server config --dir DIR [--nodes N | --hosts H1,H2,...] [flags]", natsServerConfigHelp)
	dir := fs.String("dir", "", "`DIR` to write the configuration files and credentials to (required)")
	nodes := fs.Int("nodes", 3, "number of nodes on this machine (ignored with --hosts)")
	hosts := fs.String("hosts", "", "comma-separated `HOSTS`, one node on each")
	port := fs.Int("port", 4222, "client `PORT` of node 1 (the others count up without --hosts)")
	clusterPort := fs.Int("cluster-port", 6222, "route `PORT` of node 1")
	httpPort := fs.Int("http-port", 8222, "monitoring `PORT` of node 1; 0 turns monitoring off")
	clusterName := fs.String("cluster-name", "pctl", "cluster `NAME`")
	storeDir := fs.String("store-dir", "", "JetStream `DIR` of every node (default DIR/node-N; nats-server adds jetstream/)")
	sync := fs.String("sync-interval", "always", "JetStream fsync policy: always, or a `DURATION` such as 2m (nats-server's default)")
	maxPayload := fs.Int("max-payload", 16<<20, "largest message in `BYTES` (a plugin, up to 8 MiB, travels in one)")
	force := fs.Bool("force", false, "overwrite existing files (new keys and route password)")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	const cmd = "nats-server config"
	if len(pos) > 0 {
		return usageErr(e, cmd, "takes no arguments (got %q); the directory is --dir DIR", pos[0])
	}
	if *dir == "" {
		return usageErr(e, cmd, "--dir is required: the directory to write node-N.conf and the credentials to")
	}
	if *sync != "always" {
		if d, err := time.ParseDuration(*sync); err != nil || d <= 0 {
			return usageErr(e, cmd, "--sync-interval %q is neither \"always\" nor a positive duration such as 2m", *sync)
		}
	}
	if *maxPayload < 1<<20 || *maxPayload > 64<<20 {
		return usageErr(e, cmd, "--max-payload %d is out of range: 1 MiB (1048576) to 64 MiB (67108864); pctl needs room for a plugin (up to 8 MiB) in one message", *maxPayload)
	}
	for _, p := range []struct {
		name string
		v    int
	}{{"--port", *port}, {"--cluster-port", *clusterPort}, {"--http-port", *httpPort}} {
		if p.v < 0 || p.v > 65535 || (p.v == 0 && p.name != "--http-port") {
			return usageErr(e, cmd, "%s %d is not a port (1 to 65535)", p.name, p.v)
		}
	}
	var hostList []string
	if *hosts != "" {
		for _, h := range strings.Split(*hosts, ",") {
			if h = strings.TrimSpace(h); h == "" {
				return usageErr(e, cmd, "--hosts %q has an empty host name", *hosts)
			}
			hostList = append(hostList, h)
		}
	} else if *nodes < 1 || *nodes > 32 {
		return usageErr(e, cmd, "--nodes %d is out of range (1 to 32; 3 or 5 for a cluster that survives a node's loss)", *nodes)
	}
	abs, err := filepath.Abs(*dir)
	if err != nil {
		return usageErr(e, cmd, "--dir %s: %v", *dir, err)
	}

	layout := natsconf.Layout{
		ClusterName: *clusterName, Nodes: *nodes, Hosts: hostList,
		Port: *port, ClusterPort: *clusterPort, HTTPPort: *httpPort,
		SyncInterval: *sync, MaxPayload: *maxPayload,
		StoreDir: func(name string) string {
			if *storeDir != "" {
				return *storeDir
			}
			return filepath.Join(abs, name) // nats-server keeps its files in <dir>/jetstream
		},
	}
	if *httpPort == 0 {
		layout.HTTPPort = -1
	}
	if len(hostList) > 1 || (len(hostList) == 0 && *nodes > 1) {
		layout.RouteUser, layout.RoutePassword = "pctl-route", randomSecret()
	}
	// The users, and their seeds to write.
	seeds := map[string][]byte{}
	roles := []string{"broker", broker.RoleAdmin, broker.RoleProducer, broker.RoleConsumer}
	for _, role := range roles {
		kp, err := nkeys.CreateUser()
		if err != nil {
			return failErr(e, cmd, err)
		}
		seed, _ := kp.Seed()
		pub, _ := kp.PublicKey()
		seeds[role] = seed
		u := natsconf.User{Comment: role, NKey: pub}
		if role != "broker" {
			u.Permissions = convertPermissions(broker.UserPermissions(role, pub)) // with its private inbox (spec §8)
		}
		layout.Users = append(layout.Users, u)
	}
	plan, err := natsconf.Plan(layout)
	if err != nil {
		return usageErr(e, cmd, "%s", strings.TrimPrefix(err.Error(), "natsconf: "))
	}

	files := map[string][]byte{}
	for _, nd := range plan {
		files[nd.Name+".conf"] = nd.Render()
	}
	for role, seed := range seeds {
		files[role+".nk"] = append(seed, '\n')
	}
	if !*force {
		for _, name := range sortedKeys(files) {
			p := filepath.Join(abs, name)
			if _, err := os.Stat(p); err == nil {
				return usageErr(e, cmd, "%s exists; --force overwrites it (with new keys every client needs the new credentials)", p)
			} else if !errors.Is(err, iofs.ErrNotExist) {
				return failErr(e, cmd, err)
			}
		}
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return failErr(e, cmd, err)
	}
	for _, name := range sortedKeys(files) {
		p := filepath.Join(abs, name)
		// The files hold secrets (seeds, the route password): mode 0600, also when they existed.
		if err := os.WriteFile(p, files[name], 0o600); err != nil {
			return failErr(e, cmd, err)
		}
		if err := os.Chmod(p, 0o600); err != nil {
			return failErr(e, cmd, err)
		}
	}
	// Check what was written with nats-server's own parser: a file it refuses is a bug here.
	for _, nd := range plan {
		p := filepath.Join(abs, nd.Name+".conf")
		if _, err := server.ProcessConfigFile(p); err != nil {
			return failErr(e, cmd, fmt.Errorf("nats-server refuses the written %s: %v (a bug in pctl: please report it)", p, oneLine(err.Error())))
		}
	}

	w := e.stdout
	urls := make([]string, len(plan))
	for i := range plan {
		urls[i] = layout.ClientURL(plan, i)
	}
	fmt.Fprintf(w, "pctl nats-server config: wrote a %d-node cluster %q to %s\n", len(plan), *clusterName, abs)
	for i, nd := range plan {
		mon := ""
		if nd.HTTPPort != 0 {
			mon = fmt.Sprintf(", monitoring :%d", nd.HTTPPort)
		}
		fmt.Fprintf(w, "  %s.conf: clients %s, routes :%d%s, store %s\n", nd.Name, urls[i], nd.ClusterPort, mon, nd.StoreDir)
	}
	fmt.Fprintf(w, "  credentials: broker.nk (for pctl serve), admin.nk, producer.nk, consumer.nk\n\n")
	if len(hostList) > 0 {
		fmt.Fprintf(w, "Copy node-N.conf to host N and start it there:\n")
	} else {
		fmt.Fprintf(w, "Start every node (each in its own terminal, or as a service):\n")
	}
	for _, nd := range plan {
		fmt.Fprintf(w, "  pctl nats-server -c %s\n", filepath.Join(abs, nd.Name+".conf"))
	}
	replicas := min(3, len(plan))
	fmt.Fprintf(w, "\nThen the broker (as many as you like, anywhere):\n  pctl serve --nats %s --creds %s --replicas %d --data %s\n",
		strings.Join(urls, ","), filepath.Join(abs, "broker.nk"), replicas, filepath.Join(abs, "broker-data"))
	if len(plan)%2 == 0 {
		fmt.Fprintf(e.stderr, "pctl %s: warning: %d nodes stop JetStream when %d are down (a majority of %d is %d); 3 or 5 nodes tolerate as many failures for fewer machines\n",
			cmd, len(plan), len(plan)/2, len(plan), len(plan)/2+1)
	}
	return exitOK
}

func convertPermissions(p *server.Permissions) *natsconf.Permissions {
	if p == nil {
		return nil
	}
	var out natsconf.Permissions
	if p.Publish != nil {
		out.PublishAllow, out.PublishDeny = p.Publish.Allow, p.Publish.Deny
	}
	if p.Subscribe != nil {
		out.SubscribeAllow, out.SubscribeDeny = p.Subscribe.Allow, p.Subscribe.Deny
	}
	return &out
}

func randomSecret() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (it panics on an unusable source)
	return hex.EncodeToString(b)
}
