package client

import (
	"fmt"
	"net/url"
	"strings"

	"pctl.dev/pctl/broker/wire"
)

// natsSchemes are the URL schemes nats.go connects with. Anything else (http://, https://, a
// typo) would otherwise be passed to nats.go, which treats an unknown scheme as a plain TCP
// address and so "works" against a NATS port while meaning something else.
var natsSchemes = map[string]bool{"nats": true, "tls": true, "ws": true, "wss": true}

// CheckServerURL checks a server URL as Connect takes it: one URL, or several separated by
// commas (a cluster), each nats://HOST:PORT, tls://, ws:// or wss://, or a bare HOST:PORT. It
// returns an error matching wire.ErrBadRequest that names the offending URL and what to use.
func CheckServerURL(s string) error {
	for _, one := range strings.Split(s, ",") {
		one = strings.TrimSpace(one)
		if one == "" {
			return fmt.Errorf("%w: server URL %q has an empty entry; give nats://HOST:PORT, or several separated by commas", wire.ErrBadRequest, s)
		}
		if !strings.Contains(one, "://") {
			continue // HOST:PORT: nats.go adds nats://
		}
		u, err := url.Parse(one)
		if err != nil {
			return fmt.Errorf("%w: server URL %q: %v; give nats://HOST:PORT", wire.ErrBadRequest, one, err)
		}
		if !natsSchemes[strings.ToLower(u.Scheme)] {
			return fmt.Errorf("%w: server URL %q: %s:// is not a NATS scheme; use nats://%s (or tls://, ws://, wss://)", wire.ErrBadRequest, one, u.Scheme, hostOr(u.Host))
		}
		if u.Host == "" {
			return fmt.Errorf("%w: server URL %q has no host; give %s://HOST:PORT", wire.ErrBadRequest, one, u.Scheme)
		}
	}
	return nil
}

func hostOr(h string) string {
	if h == "" {
		return "HOST:PORT"
	}
	return h
}
