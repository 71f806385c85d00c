// Command rollstore stores immutable rollout records with binary payloads
// on Azure Blob Storage or a local folder, and serves them over HTTP.
//
// Usage:
//
//	rollstore serve [flags]    run the HTTP service (see rollstore serve --help)
//	rollstore fixture [flags]  run the staging fixture on a fresh prefix (see rollstore fixture --help)
//	rollstore version          print the version (also: rollstore --version)
//
// Every flag has an environment-variable equivalent (ROLLSTORE_ and the
// flag's name in upper case with '-' as '_'; ROLLSTORE_FIXTURE_ for the
// fixture's own flags); a flag given on the command line wins over the
// environment. A ROLLSTORE_* variable that no flag reads is warned about
// at start.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"

	"github.com/rollstore/rollstore/internal/version"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], cmdEnv{
		stdout:    os.Stdout,
		stderr:    os.Stderr,
		lookupEnv: os.LookupEnv,
		environ:   os.Environ,
	}))
}

// cmdEnv is what a subcommand may use of its surroundings, so tests can run
// subcommands in-process with their own environment and output.
type cmdEnv struct {
	stdout, stderr io.Writer
	lookupEnv      func(string) (string, bool)
	// environ lists the environment (KEY=value), for the warning about
	// unknown ROLLSTORE_* variables; nil skips it.
	environ func() []string
	// listening, when set, is told the address serve listens on (tests ask
	// for port 0 and learn the port here); metricsListening likewise for
	// --metrics-listen.
	listening        func(net.Addr)
	metricsListening func(net.Addr)
}

type command struct {
	summary string
	run     func(ctx context.Context, env cmdEnv, args []string) error
}

func commands() map[string]command {
	return map[string]command{
		"serve":   {"run the HTTP service", runServe},
		"fixture": {"run the staging fixture on a fresh prefix", runFixture},
		"version": {"print the version", runVersion},
	}
}

func runVersion(_ context.Context, env cmdEnv, args []string) error {
	if len(args) > 0 {
		fmt.Fprintf(env.stderr, "rollstore version: unexpected arguments %q\n", args)
		return errUsage
	}
	fmt.Fprintln(env.stdout, version.Get())
	return nil
}

// knownEnv is every ROLLSTORE_* variable a command reads: serve's and the
// fixture's (one environment may configure both).
func knownEnv() map[string]bool {
	known := map[string]bool{}
	serve := defaultServeConfig()
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	serve.flags(fs)
	fs.VisitAll(func(f *flag.Flag) { known[envName(f.Name)] = true })
	fixture := defaultFixtureConfig()
	fs = flag.NewFlagSet("fixture", flag.ContinueOnError)
	storeFlags, _ := fixture.flags(fs)
	envOf := fixtureEnvName(storeFlags)
	fs.VisitAll(func(f *flag.Flag) { known[envOf(f.Name)] = true })
	return known
}

// errUsage marks errors whose message has already been printed with usage
// help; run exits 2 for them, as flag parsing conventionally does.
var errUsage = errors.New("usage error")

// run executes the subcommand in args and returns the exit code.
func run(ctx context.Context, args []string, env cmdEnv) int {
	cmds := commands()
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" || args[0] == "-help" {
		w := env.stdout
		if len(args) == 0 {
			w = env.stderr
		}
		printUsage(w, cmds)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	cmd, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(env.stderr, "rollstore: unknown command %q\n\n", args[0])
		printUsage(env.stderr, cmds)
		return 2
	}
	err := cmd.run(ctx, env, args[1:])
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		fmt.Fprintf(env.stderr, "rollstore %s: %v\n", args[0], err)
		return 1
	}
}

func printUsage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "Usage: rollstore <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Commands:")
	names := make([]string, 0, len(cmds))
	for name := range cmds {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(w, "  %-10s %s\n", name, cmds[name].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'rollstore <command> --help' for the flags of a command;")
	fmt.Fprintln(w, "'rollstore --version' prints the version.")
}
