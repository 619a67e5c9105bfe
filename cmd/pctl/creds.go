package main

import (
	"context"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nkeys"

	"pctl.dev/pctl/broker/wire"
	"pctl.dev/pctl/client"
)

// credsSubs are the `pctl creds` subcommands.
var credsSubs = map[string]command{}

func init() {
	register(command{name: "creds", summary: "issue, list and revoke credentials scoped to one topic (and one consumer group)", run: cmdCreds})
	credsSubs["issue"] = command{name: "issue", summary: "make a producer or consumer credential for one topic", run: cmdCredsIssue}
	credsSubs["list"] = command{name: "list", summary: "list the scoped credentials of the embedded server", run: cmdCredsList}
	credsSubs["revoke"] = command{name: "revoke", summary: "revoke a scoped credential (its connections close)", run: cmdCredsRevoke}
	subcommandSets["creds"] = credsSubs
}

const credsHelp = `
Scoped credentials limit a client to one topic, as Kafka's ACLs scope topics and groups
(spec/protocol.md §8):

  producer (topic T)            produce to T (client side or through the produce service) and
                                read T's records back; nothing of any other topic
  consumer (topic T, group G)   read T's partitions and write only group G's state of T; it
                                cannot change another group's positions, nor publish records

The three role credentials of the data directory (admin.nk, producer.nk, consumer.nk) are not
scoped: they reach every topic and group. Every subcommand needs the admin role.
`

func cmdCreds(e *env, args []string) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		w := e.stderr
		if len(args) > 0 {
			w = e.stdout
		}
		fmt.Fprintf(w, "Usage: pctl creds <subcommand> [flags]\n%s\nSubcommands:\n", credsHelp)
		for _, name := range sortedKeys(credsSubs) {
			fmt.Fprintf(w, "  %-12s %s\n", name, credsSubs[name].summary)
		}
		fmt.Fprintln(w, strings.TrimRight(connHelp, "\n"))
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	c, ok := credsSubs[args[0]]
	if !ok {
		return usageErr(e, "creds", "unknown subcommand %q; one of: %s", args[0], strings.Join(sortedKeys(credsSubs), ", "))
	}
	return c.run(e, args[1:])
}

const credsIssueHelp = `
Makes a key pair, writes its NKey seed to --out (mode 0600; an existing file is kept unless
--force), and tells the broker about the public key and its scope. With the broker's embedded
server the credential works at once (the broker keeps its users in the data directory, in
users.json, and reloads the server). With an external NATS server (pctl serve --nats) the
command prints the user's entry for the users list of every node's authorization block: add it
and reload the nodes (nats-server --signal reload).

The credential is bound to this creation of the topic: a topic deleted and created again needs
new credentials. A producer credential's reads name the topic's partition streams; the embedded
server follows a topic's growth, an external cluster's operator adds the entry printed again.
--print-config prints the entry in any case.

Clients using a scoped credential receive their replies on the private inbox
_INBOX_<public key> (pctl's Go client does this for every NKey credential).

Examples:
  pctl creds issue --role consumer --topic orders --group billing --out billing.nk
  pctl creds issue --role producer --topic orders --out orders-producer.nk
`

func cmdCredsIssue(e *env, args []string) int {
	const cmd = "creds issue"
	fs := newFlags(e, cmd, "creds issue --role producer|consumer --topic TOPIC [--group GROUP] --out FILE [--name LABEL] [--force] [--print-config]", credsIssueHelp)
	cf := addConnFlags(fs)
	role := fs.String("role", "", "`ROLE`: producer or consumer")
	topic := fs.String("topic", "", "the `TOPIC` the credential is limited to")
	group := fs.String("group", "", "consumer `GROUP` the credential may commit for (consumers only)")
	out := fs.String("out", "", "`FILE` to write the NKey seed to (mode 0600)")
	name := fs.String("name", "", "a `LABEL` for people (shown by 'creds list')")
	force := fs.Bool("force", false, "overwrite --out if it exists")
	printConfig := fs.Bool("print-config", false, "print the nats-server users entry even when the embedded server took the credential")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	switch {
	case len(pos) > 0:
		return usageErr(e, cmd, "takes no arguments (got %q)", pos[0])
	case *role != "producer" && *role != "consumer":
		return usageErr(e, cmd, "--role %q: give producer or consumer (admin credentials are never scoped: use admin.nk)", *role)
	case *topic == "":
		return usageErr(e, cmd, "--topic is required: the topic the credential is limited to")
	case *role == "consumer" && *group == "":
		return usageErr(e, cmd, "--group is required for a consumer credential: the consumer group it may commit for")
	case *role == "producer" && *group != "":
		return usageErr(e, cmd, "--group is for consumer credentials only")
	case *out == "":
		return usageErr(e, cmd, "--out FILE is required: where to write the credential's seed")
	}
	if err := wire.ValidTopic(*topic); err != nil {
		return usageErr(e, cmd, "--topic: %v", err)
	}
	if *group != "" {
		if err := wire.ValidGroup(*group); err != nil {
			return usageErr(e, cmd, "--group: %s", trimSentinel(err))
		}
	}
	if _, err := os.Stat(*out); err == nil && !*force {
		return usageErr(e, cmd, "--out %s exists; give another file, or --force to replace it (the credential it holds stays valid until revoked)", *out)
	} else if err != nil && !errors.Is(err, iofs.ErrNotExist) {
		return usageErr(e, cmd, "--out %s: %v", *out, unwrapPath(err))
	}
	seed, pub, err := client.NewCredential()
	if err != nil {
		return failErr(e, cmd, err)
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	// The seed is written before the broker lets the key in: a broker that accepted a key whose
	// seed was lost would hold a credential nobody has.
	if err := writeSeed(*out, seed); err != nil {
		return failErr(e, cmd, fmt.Errorf("write %s: %w", *out, err))
	}
	r, err := c.AddCredential(e.ctx, wire.CredsRequest{NKey: pub, Role: *role, Topic: *topic, Group: *group, Name: *name})
	if err != nil {
		_ = os.Remove(*out)
		return exitFor(e, cmd, err)
	}
	scope := "topic " + r.User.Topic
	if r.User.Group != "" {
		scope += ", group " + r.User.Group
	}
	fmt.Fprintf(e.stdout, "wrote %s: %s credential for %s (public key %s)\n", *out, r.User.Role, scope, pub)
	if r.Applied {
		fmt.Fprintf(e.stdout, "the broker's server accepts it now; connect with --creds %s\n", *out)
	} else {
		fmt.Fprintln(e.stdout, "the broker uses an external NATS server: add this entry to authorization { users: [...] } on every node, then reload them (nats-server --signal reload):")
	}
	if !r.Applied || *printConfig {
		fmt.Fprint(e.stdout, r.Config)
	}
	return exitOK
}

func writeSeed(path string, seed []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(append(seed, '\n')); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(path, 0o600)
}

func cmdCredsList(e *env, args []string) int {
	const cmd = "creds list"
	fs := newFlags(e, cmd, "creds list [--json]", "Lists the scoped credentials the broker's embedded server lets in.")
	cf := addConnFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) > 0 {
		return usageErr(e, cmd, "takes no arguments (got %q)", pos[0])
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	us, err := c.Credentials(e.ctx)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	if *asJSON {
		return writeJSON(e, cmd, us)
	}
	tw := tabwriter.NewWriter(e.stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PUBLIC KEY\tROLE\tTOPIC\tGROUP\tCREATED\tNAME")
	for _, u := range us {
		g := u.Group
		if g == "" {
			g = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", u.NKey, u.Role, u.Topic, g, u.Created.Format("2006-01-02 15:04:05"), u.Name)
	}
	if err := tw.Flush(); err != nil {
		return failErr(e, cmd, err)
	}
	return exitOK
}

func cmdCredsRevoke(e *env, args []string) int {
	const cmd = "creds revoke"
	fs := newFlags(e, cmd, "creds revoke PUBLIC_KEY|SEED_FILE", "Revokes a scoped credential: the embedded server no longer lets it in and closes its connections.\nName it by its public key (U..., see 'creds list') or by its seed file.")
	cf := addConnFlags(fs)
	pos, st := parse(fs, args)
	if st >= 0 {
		return st
	}
	if len(pos) != 1 {
		return usageErr(e, cmd, "give the credential's public key (U...) or its seed file")
	}
	pub := pos[0]
	if !nkeys.IsValidPublicUserKey(pub) {
		b, err := os.ReadFile(pub)
		if err != nil {
			return usageErr(e, cmd, "%q is neither a public NKey user key (U...) nor a readable seed file: %v", pub, unwrapPath(err))
		}
		kp, err := nkeys.ParseDecoratedNKey(b)
		if err != nil {
			return usageErr(e, cmd, "%s is not an NKey seed file: %v", pub, err)
		}
		pub, _ = kp.PublicKey()
		kp.Wipe()
	}
	c, st := cf.connect(e, cmd, nil)
	if st >= 0 {
		return st
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	r, err := c.RevokeCredential(ctx, pub)
	if err != nil {
		return exitFor(e, cmd, err)
	}
	fmt.Fprintf(e.stdout, "revoked %s (%s of topic %s)\n", pub, r.User.Role, r.User.Topic)
	return exitOK
}
