// Package natsconf writes nats-server configuration files (the syntax of nats-server's -c FILE)
// for the nodes of a JetStream cluster that pctl runs on: client and monitoring listeners, cluster
// routes with their credentials, the JetStream store and its sync policy, max_payload and the NKey
// users with their permissions.
//
// It only renders text: it knows nothing of pctl's roles (package broker owns those) and starts
// nothing (package natscluster starts nodes from these files). The output is deterministic for a
// given Node, so tests can compare it and operators can diff it.
package natsconf

import (
	"fmt"
	"strconv"
	"strings"
)

// Node is the configuration of one nats-server node.
type Node struct {
	// Name is the server_name; a JetStream cluster needs a unique, stable one per node.
	Name string
	// Host and Port are the client listener. Host default "127.0.0.1"; Port 0 means nats-server's
	// default, 4222.
	Host string
	Port int
	// HTTPPort, if not 0, enables the monitoring endpoint (/healthz, /jsz, /varz) on Host, or on
	// 127.0.0.1 when Host is every interface (0.0.0.0 or ::): monitoring has no authentication.
	HTTPPort int

	// ClusterName names the cluster (every node the same); empty means a single server: no
	// cluster block at all.
	ClusterName string
	// ClusterHost and ClusterPort are the route listener. ClusterHost default: Host.
	ClusterHost string
	ClusterPort int
	// ClusterAdvertise, if set, is the route address this node tells the others to use for
	// implicit (gossiped) routes, "host:port".
	ClusterAdvertise string
	// Routes are the other nodes' route addresses, "host:port". A node may list itself: the server
	// detects and ignores a route to itself.
	Routes []string
	// RouteUser and RoutePassword, if set, protect the route listener; the same pair is used in the
	// route URLs, so every node must have the same.
	RouteUser, RoutePassword string

	// StoreDir is JetStream's storage directory (JetStream is always enabled); nats-server keeps
	// its files in StoreDir/jetstream.
	StoreDir string
	// SyncInterval is JetStream's fsync policy: "always" (fsync before acknowledging), a duration
	// such as "2m", or "" for nats-server's default (every 2 minutes).
	SyncInterval string
	// MaxPayload is the largest message in bytes; 0 means nats-server's default (1 MiB).
	MaxPayload int

	// Users are the NKey users allowed to connect. None means no client authentication.
	Users []User

	// Extra is appended verbatim at the end (other nats-server settings).
	Extra string
}

// User is an NKey user.
type User struct {
	// Comment is written above the user (for example the role's name).
	Comment string
	// NKey is the user's public key ("U...").
	NKey string
	// Permissions, if nil, allows everything.
	Permissions *Permissions
}

// Permissions are a user's subject permissions; an empty list is left out (nats-server then allows
// everything for that direction unless the other list of the same direction says otherwise).
type Permissions struct {
	PublishAllow, PublishDeny     []string
	SubscribeAllow, SubscribeDeny []string
}

// Render returns the node's configuration file.
func (n Node) Render() []byte {
	var b strings.Builder
	host := n.Host
	if host == "" {
		host = "127.0.0.1"
	}
	fmt.Fprintf(&b, "# nats-server configuration of node %s (written by pctl).\n", n.Name)
	fmt.Fprintf(&b, "server_name: %s\n", quote(n.Name))
	if n.Port != 0 {
		fmt.Fprintf(&b, "listen: %s\n", quote(hostPort(host, n.Port)))
	} else {
		fmt.Fprintf(&b, "host: %s\n", quote(host))
	}
	if n.HTTPPort != 0 {
		mh := host
		if mh == "0.0.0.0" || mh == "::" {
			mh = "127.0.0.1"
		}
		fmt.Fprintf(&b, "http: %s\n", quote(hostPort(mh, n.HTTPPort)))
	}
	if n.MaxPayload != 0 {
		fmt.Fprintf(&b, "max_payload: %d\n", n.MaxPayload)
		// max_pending must not be below max_payload; nats-server's default is 64 MiB.
		if n.MaxPayload > 64<<20 {
			fmt.Fprintf(&b, "max_pending: %d\n", n.MaxPayload)
		}
	}
	b.WriteString("\njetstream {\n")
	fmt.Fprintf(&b, "  store_dir: %s\n", quote(n.StoreDir))
	if n.SyncInterval != "" {
		fmt.Fprintf(&b, "  sync_interval: %s\n", quote(n.SyncInterval))
	}
	b.WriteString("}\n")

	if n.ClusterName != "" {
		ch := n.ClusterHost
		if ch == "" {
			ch = host
		}
		b.WriteString("\ncluster {\n")
		fmt.Fprintf(&b, "  name: %s\n", quote(n.ClusterName))
		fmt.Fprintf(&b, "  listen: %s\n", quote(hostPort(ch, n.ClusterPort)))
		if n.ClusterAdvertise != "" {
			fmt.Fprintf(&b, "  advertise: %s\n", quote(n.ClusterAdvertise))
		}
		if n.RouteUser != "" {
			b.WriteString("  authorization {\n")
			fmt.Fprintf(&b, "    user: %s\n    password: %s\n", quote(n.RouteUser), quote(n.RoutePassword))
			b.WriteString("  }\n")
		}
		b.WriteString("  routes: [\n")
		for _, r := range n.Routes {
			cred := ""
			if n.RouteUser != "" {
				cred = urlEscape(n.RouteUser) + ":" + urlEscape(n.RoutePassword) + "@"
			}
			fmt.Fprintf(&b, "    %s\n", quote("nats-route://"+cred+r))
		}
		b.WriteString("  ]\n}\n")
	}

	if len(n.Users) > 0 {
		b.WriteString("\nauthorization {\n  users: [\n")
		for _, u := range n.Users {
			if u.Comment != "" {
				fmt.Fprintf(&b, "    # %s\n", strings.ReplaceAll(u.Comment, "\n", " "))
			}
			fmt.Fprintf(&b, "    { nkey: %s", quote(u.NKey))
			if p := u.Permissions; p != nil {
				b.WriteString(", permissions: {\n")
				writeDirection(&b, "publish", p.PublishAllow, p.PublishDeny)
				writeDirection(&b, "subscribe", p.SubscribeAllow, p.SubscribeDeny)
				b.WriteString("    }")
			}
			b.WriteString(" }\n")
		}
		b.WriteString("  ]\n}\n")
	}
	if n.Extra != "" {
		b.WriteString("\n" + strings.TrimRight(n.Extra, "\n") + "\n")
	}
	return []byte(b.String())
}

func writeDirection(b *strings.Builder, name string, allow, deny []string) {
	if len(allow) == 0 && len(deny) == 0 {
		return
	}
	fmt.Fprintf(b, "      %s: {", name)
	sep := " "
	if len(allow) > 0 {
		fmt.Fprintf(b, "%sallow: %s", sep, list(allow))
		sep = ", "
	}
	if len(deny) > 0 {
		fmt.Fprintf(b, "%sdeny: %s", sep, list(deny))
	}
	b.WriteString(" }\n")
}

func list(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = quote(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// quote returns s as a double-quoted string of the nats-server config syntax. Quoting keeps "$"
// (a variable reference when unquoted) and ">" literal.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\t':
			b.WriteString(`\t`)
		case '\r':
			b.WriteString(`\r`)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

func hostPort(host string, port int) string {
	if strings.Contains(host, ":") {
		return "[" + host + "]:" + strconv.Itoa(port)
	}
	return host + ":" + strconv.Itoa(port)
}

// urlEscape escapes the characters that would end a URL's user information.
func urlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Layout describes a cluster to plan: either Nodes nodes on one machine (loopback, ports counted
// up from the base ports) or one node on each of Hosts (every node on the base ports, listening
// on all interfaces, routes to the hosts by name).
type Layout struct {
	// ClusterName default "pctl".
	ClusterName string
	// Nodes on this machine (used when Hosts is empty). Default 3.
	Nodes int
	// Hosts, if set, puts one node on each host.
	Hosts []string
	// Port, ClusterPort and HTTPPort are the base ports: default 4222, 6222 and 8222. HTTPPort -1
	// turns monitoring off.
	Port, ClusterPort, HTTPPort int
	// StoreDir returns a node's JetStream directory.
	StoreDir func(name string) string
	// SyncInterval, MaxPayload, RouteUser, RoutePassword and Users are copied to every node.
	SyncInterval             string
	MaxPayload               int
	RouteUser, RoutePassword string
	Users                    []User
}

// Plan returns the nodes of a layout, named node-1, node-2, ... A single node has no cluster
// block.
func Plan(l Layout) ([]Node, error) {
	if l.ClusterName == "" {
		l.ClusterName = "pctl"
	}
	if l.Port == 0 {
		l.Port = 4222
	}
	if l.ClusterPort == 0 {
		l.ClusterPort = 6222
	}
	if l.HTTPPort == 0 {
		l.HTTPPort = 8222
	}
	n := l.Nodes
	if len(l.Hosts) > 0 {
		n = len(l.Hosts)
	} else if n == 0 {
		n = 3
	}
	if n < 1 {
		return nil, fmt.Errorf("natsconf: %d nodes; a cluster has at least 1", n)
	}
	if l.StoreDir == nil {
		return nil, fmt.Errorf("natsconf: no store directory")
	}
	step := 1
	if len(l.Hosts) > 0 {
		step = 0
	}
	top := l.Port + step*(n-1)
	for _, p := range []int{l.ClusterPort + step*(n-1), l.HTTPPort + step*(n-1)} {
		top = max(top, p)
	}
	if top > 65535 {
		return nil, fmt.Errorf("natsconf: ports up to %d needed; choose lower base ports", top)
	}
	if step == 1 && overlap(n, l.Port, l.ClusterPort, l.HTTPPort) {
		return nil, fmt.Errorf("natsconf: the client ports %d.., route ports %d.. and monitoring ports %d.. of %d nodes overlap; choose base ports at least %d apart", l.Port, l.ClusterPort, l.HTTPPort, n, n)
	}
	routeHost := func(i int) string {
		if len(l.Hosts) > 0 {
			return l.Hosts[i]
		}
		return "127.0.0.1"
	}
	nodes := make([]Node, n)
	for i := range nodes {
		name := fmt.Sprintf("node-%d", i+1)
		nd := Node{
			Name: name, Host: "127.0.0.1", Port: l.Port + step*i,
			StoreDir: l.StoreDir(name), SyncInterval: l.SyncInterval, MaxPayload: l.MaxPayload,
			Users: l.Users,
		}
		if len(l.Hosts) > 0 {
			nd.Host = "0.0.0.0"
		}
		if l.HTTPPort > 0 {
			nd.HTTPPort = l.HTTPPort + step*i
		}
		if n > 1 {
			nd.ClusterName, nd.ClusterPort = l.ClusterName, l.ClusterPort+step*i
			nd.RouteUser, nd.RoutePassword = l.RouteUser, l.RoutePassword
			for j := 0; j < n; j++ {
				if j != i {
					nd.Routes = append(nd.Routes, hostPort(routeHost(j), l.ClusterPort+step*j))
				}
			}
		}
		nodes[i] = nd
	}
	return nodes, nil
}

// ClientURL returns the URL a client on this machine (or, with Hosts, anywhere) uses for node i
// of a plan made from l.
func (l Layout) ClientURL(nodes []Node, i int) string {
	h := "127.0.0.1"
	if len(l.Hosts) > 0 {
		h = l.Hosts[i]
	}
	return "nats://" + hostPort(h, nodes[i].Port)
}

func overlap(n int, bases ...int) bool {
	for a := range bases {
		for b := a + 1; b < len(bases); b++ {
			if bases[a] < bases[b]+n && bases[b] < bases[a]+n {
				return true
			}
		}
	}
	return false
}
