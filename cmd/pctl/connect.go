package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"pctl.dev/pctl/broker"
	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
	"pctl.dev/pctl/runtime"
)

// Every command that talks to a broker takes --server and --creds, with the same defaults:
//
//	--server: $PCTL_SERVER, else nats://127.0.0.1:4222 (where 'pctl serve' listens by default);
//	--creds:  $PCTL_CREDS, else the admin.nk in the default data directory of 'pctl serve' when it
//	          exists (the broker and the CLI are usually the same user on the same machine), else
//	          none.
//
// Exit statuses of broker commands (see exitFor): 2 when the input was wrong (bad flags, a name
// that does not exist, a bad request, something that already exists), 1 when the broker refused
// (permissions) or failed (unreachable, plugin rejected, in use, conflict).

const connHelp = `
Connection: --server URL (default $PCTL_SERVER, else nats://127.0.0.1:4222) and --creds FILE, an
NKey seed file from the broker's data directory: admin.nk, producer.nk or consumer.nk (default
$PCTL_CREDS, else the admin.nk of 'pctl serve' in its default data directory, if it exists).
$PCTL_REQUEST_TIMEOUT bounds each broker request (default 30s); $PCTL_PROGRESS=always|never
shows or hides progress on standard error (default: only when it is a terminal).`

// connFlags are the connection flags of a command.
type connFlags struct {
	server string
	creds  string
}

func addConnFlags(fs *flag.FlagSet) *connFlags {
	cf := &connFlags{}
	fs.StringVar(&cf.server, "server", "", "broker `URL` (default $PCTL_SERVER, else nats://127.0.0.1:4222)")
	fs.StringVar(&cf.creds, "creds", "", "NKey seed `FILE`: admin.nk, producer.nk or consumer.nk (default $PCTL_CREDS, else the default data directory's admin.nk)")
	return cf
}

// resolve applies the defaults: flags, then the environment, then the local broker's files.
func (cf *connFlags) resolve(e *env) (url, creds string) {
	url, creds = cf.server, cf.creds
	if url == "" {
		url = e.getenv("PCTL_SERVER")
	}
	if url == "" {
		url = "nats://127.0.0.1:4222"
	}
	if creds == "" {
		creds = e.getenv("PCTL_CREDS")
	}
	if creds == "" {
		if dir, err := broker.DefaultDataDir(); err == nil {
			if p := broker.CredsPath(dir, broker.RoleAdmin); fileExists(p) {
				creds = p
			}
		}
	}
	return url, creds
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// connect connects to the broker. On failure it has printed the error and returns the exit
// status (>= 0); on success the status is -1. rt, if not nil, runs the partitioner modules
// (and stays the caller's to close).
func (cf *connFlags) connect(e *env, cmd string, rt *runtime.Runtime) (*client.Client, int) {
	url, creds := cf.resolve(e)
	if creds != "" {
		if _, err := os.Stat(creds); err != nil {
			return nil, usageErr(e, cmd, "--creds %s: %v; use admin.nk, producer.nk or consumer.nk from the broker's data directory", creds, unwrapPath(err))
		}
	}
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	opts := client.Options{URL: url, Creds: creds, Name: "pctl " + cmd, Runtime: rt}
	if d, err := time.ParseDuration(e.getenv("PCTL_REQUEST_TIMEOUT")); err == nil && d > 0 {
		opts.Timeout = d // each broker request's limit (default 30s)
	}
	c, err := client.Connect(ctx, opts)
	if err != nil {
		if errors.Is(err, wire.ErrBadRequest) {
			// The credentials file exists but is not an NKey seed, or the URL is not a NATS one.
			return nil, usageErr(e, cmd, "%s", trimSentinel(err))
		}
		return nil, failErr(e, cmd, err)
	}
	return c, -1
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// exitFor prints a broker command's error on one line and returns its exit status: 2 for errors
// in what the user gave (wire.ErrBadRequest, wire.ErrNotFound, wire.ErrExists), 1 for everything
// else: refusals (wire.ErrPermission), a broker that is unreachable or failed, a rejected or
// failing plugin, a conflict, a plugin in use, an interrupted command.
func exitFor(e *env, cmd string, err error) int {
	switch {
	case errors.Is(err, wire.ErrBadRequest), errors.Is(err, wire.ErrNotFound), errors.Is(err, wire.ErrExists):
		return usageErr(e, cmd, "%s", oneLine(trimSentinel(err)))
	case errors.Is(err, context.Canceled):
		return usageFail(e, cmd, "interrupted")
	}
	return usageFail(e, cmd, "%s", oneLine(err.Error()))
}

// usageFail prints a one-line failure (exit status 1) from a format.
func usageFail(e *env, cmd string, format string, args ...any) int {
	fmt.Fprintf(e.stderr, "pctl %s: %s\n", cmd, fmt.Sprintf(format, args...))
	return exitFailure
}

// oneLine folds a message onto one line.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if !strings.ContainsAny(s, "\r\n") {
		return s
	}
	return strings.Join(strings.Fields(strings.NewReplacer("\r", " ", "\n", "; ").Replace(s)), " ")
}

// cmdRuntime returns a runtime for a client that partitions or consumes: the compiled modules
// are cached on disk like the other commands' (see newLibrary).
func cmdRuntime(e *env) (*runtime.Runtime, error) {
	cfg := runtime.Config{CacheDir: cacheDir(e)}
	rt, err := runtime.New(e.ctx, cfg)
	if err != nil && cfg.CacheDir != "" {
		cfg.CacheDir = ""
		rt, err = runtime.New(e.ctx, cfg)
	}
	return rt, err
}

// trimSentinel drops a leading "bad request: ", "not found: " or "already exists: " from a
// message whose own words already say it.
func trimSentinel(err error) string {
	s := err.Error()
	for _, sentinel := range []error{wire.ErrBadRequest, wire.ErrNotFound, wire.ErrExists} {
		if rest, ok := strings.CutPrefix(s, sentinel.Error()+": "); ok && errors.Is(err, sentinel) {
			return rest
		}
	}
	return s
}

var violationRE = regexp.MustCompile(`(?i)permissions violation for (?:publish|subscription) to "([^"]+)"`)

// onViolation calls f with the subject of every permission violation the server reports on the
// client's connection, after the client's own handler. The client turns violations into
// wire.ErrPermission on its request and produce paths only; a consumer's JetStream calls (group
// state, partition readers) just time out, so 'pctl consume' watches for itself.
func onViolation(c *client.Client, f func(subject string)) {
	nc := c.Conn()
	prev := nc.Opts.AsyncErrorCB
	nc.SetErrorHandler(func(conn *nats.Conn, sub *nats.Subscription, err error) {
		if prev != nil {
			prev(conn, sub, err)
		}
		if errors.Is(err, nats.ErrPermissionViolation) {
			if m := violationRE.FindStringSubmatch(err.Error()); m != nil {
				f(m[1])
			}
		}
	})
}
