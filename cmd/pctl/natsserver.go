package main

import (
	"flag"
	"fmt"
	"strings"

	"github.com/nats-io/nats-server/v2/server"
)

func init() {
	register(command{name: "nats-server", summary: "run a plain NATS server node (nats-server's flags and config files), or write a cluster's configuration", run: cmdNATSServer})
}

const natsServerHelp = `
Runs a plain NATS server node: the nats-server %s built into pctl, so a cluster for
'pctl serve --nats' needs no second download. It takes nats-server's own flags and configuration
file syntax, and handles signals as nats-server does (SIGINT/SIGTERM stop, SIGHUP reloads the
configuration, SIGUSR2 enters lame duck mode).

  pctl nats-server -c FILE        run a node from a configuration file
  pctl nats-server -c FILE -t     check the file and exit
  pctl nats-server config ...     write the configuration of a pctl cluster (see
                                  'pctl nats-server config --help')

The most used nats-server flags: -c FILE, -t, -p PORT, -a HOST, -n NAME, -m HTTP_PORT, -js,
-sd DIR, --cluster URL, --routes URLS, --cluster_name NAME, -D (debug), -V (trace), -l FILE (log),
-P FILE (pid file). Flags given on the command line win over the file.
`

func cmdNATSServer(e *env, args []string) int {
	if e.capture != nil {
		return exitOK // 'pctl completion' asks for flags: nats-server's own are not ours to list
	}
	if len(args) > 0 && args[0] == "config" {
		return cmdNATSServerConfig(e, args[1:])
	}
	fs := flag.NewFlagSet("nats-server", flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	helped := false
	help := func() {
		helped = true
		fmt.Fprintf(e.stdout, "Usage: pctl nats-server [nats-server flags] | pctl nats-server config [flags]\n\n%s", fmt.Sprintf(strings.TrimPrefix(natsServerHelp, "\n"), "v"+server.VERSION))
	}
	version := func() {
		helped = true
		fmt.Fprintf(e.stdout, "pctl %s, nats-server v%s\n", version, server.VERSION)
	}
	tlsHelp := func() {
		helped = true
		fmt.Fprintln(e.stdout, "TLS is configured as in nats-server: the tls { cert_file, key_file, ca_file, verify } block of the configuration file, or --tls, --tlscert, --tlskey, --tlscacert, --tlsverify.")
	}
	fs.Usage = help
	opts, err := server.ConfigureOptions(fs, args, version, help, tlsHelp)
	switch {
	case helped:
		return exitOK
	case err == flag.ErrHelp:
		return exitOK
	case err != nil:
		if f := configArg(args); f != "" && !strings.Contains(err.Error(), f) {
			return usageErr(e, "nats-server", "configuration file %s: %v", f, oneLine(err.Error()))
		}
		return usageErr(e, "nats-server", "%v", oneLine(err.Error()))
	case opts == nil:
		return exitOK
	case opts.CheckConfig:
		fmt.Fprintf(e.stdout, "pctl nats-server: configuration file %s is valid (%s)\n", opts.ConfigFile, opts.ConfigDigest())
		return exitOK
	}
	// Secrets given as flags do not show in the monitoring endpoint's command line.
	server.RedactArgs(args)

	s, err := server.NewServer(opts)
	if err != nil {
		return failErr(e, "nats-server", err)
	}
	s.ConfigureLogger()
	// Start returns once the listeners run; a port in use is fatal inside (nats-server logs it
	// and exits 1, as the standalone binary does).
	if err := server.Run(s); err != nil {
		return failErr(e, "nats-server", err)
	}
	// Signals are nats-server's (see above); a cancelled context (tests, or pctl's own handler
	// where the server's is off) stops the node the same way.
	done := make(chan struct{})
	go func() { s.WaitForShutdown(); close(done) }()
	select {
	case <-done:
	case <-e.ctx.Done():
		s.Shutdown()
		<-done
	}
	return exitOK
}

// configArg returns the -c/--config value among nats-server's arguments, "" if none.
func configArg(args []string) string {
	for i, a := range args {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || (name != "c" && name != "config") {
			continue
		}
		if hasVal {
			return val
		}
		if i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}
