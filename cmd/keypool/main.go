// Command keypool runs keypool without writing Go.
//
//	keypool demo     a live, offline demo against a fake vendor (-proxy: the proxy in front of it)
//	keypool check    every mistake of a proxy's configuration, one a line, without serving
//	keypool serve    a local proxy that pools upstream keys behind one base URL, with a status page
//	keypool status   each key's benches and window use
//	keypool unbench  lift a key's benches on a running proxy
//	keypool reset-spend  forget what a key spent on a running proxy
//	keypool disable  take a key of a running proxy out of rotation; keypool enable puts it back
//	keypool reload   re-read a running proxy's configuration file, as SIGHUP does
//	keypool health   whether a running proxy answers /healthz (a container's HEALTHCHECK)
//	keypool version  which keypool this is
//
// Run "keypool help" for the commands and "keypool <command> -h" for their
// flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// exitUsage is the exit status for a bad command line or configuration.
const exitUsage = 2

func main() {
	// A closed terminal (SIGHUP) stops a command as Ctrl-C does: the demo
	// writes its state and cleans up. serve takes SIGHUP as the daemon's
	// signal to re-read its configuration (reload.go).
	stopOn := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if len(os.Args) > 1 && os.Args[1] == "serve" {
		signal.Ignore(syscall.SIGHUP) // until serve listens for it
	} else {
		stopOn = append(stopOn, syscall.SIGHUP)
	}
	ctx, stop := signal.NotifyContext(context.Background(), stopOn...)
	defer stop()
	// The first signal ends ctx; a second one exits at once.
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-signals
		<-signals
		fmt.Fprintln(os.Stderr, "keypool: a second signal: exiting at once, without finishing the shutdown")
		os.Exit(exitInterrupted)
	}()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// exitInterrupted is the exit status after a second signal: 128 + SIGINT's
// number, as a shell reports a command Ctrl-C ended.
const exitInterrupted = 130

// command is one subcommand of keypool.
type command struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

func commands() []command {
	return []command{
		{"demo", "run a live, offline demo: a pool of keys against a fake vendor", runDemo},
		{"check", "check a proxy configuration: every mistake, one a line", runCheck},
		{"serve", "serve a local proxy that pools upstream keys behind one base URL", runServe},
		{"status", "show each key's benches and window use, from a proxy or a state directory", runStatus},
		{"unbench", "lift a key's benches on a running proxy", runUnbench},
		{"reset-spend", "forget what a key spent on a running proxy", runResetSpend},
		{"disable", "take a key of a running proxy out of rotation, kept across restarts", runDisable},
		{"enable", "put a key keypool disable took out back into rotation", runEnable},
		{"reload", "re-read a running proxy's configuration, as SIGHUP does", runReload},
		{"health", "ask a running proxy's /healthz: exit status 0 when it answers 200", runHealth},
		{"version", "show keypool's version and how it was built", runVersion},
	}
}

// run runs the command line args and returns the exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		if len(args) == 0 {
			return exitUsage
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], stdout, stderr)
		var ue usageError
		switch {
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, &ue):
			printError(stderr, c.name, err)
			return exitUsage
		default:
			printError(stderr, c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "keypool: unknown command %q\n", args[0])
	usage(stderr)
	return exitUsage
}

// printError writes err, a line at a time, each line after the command's
// name: a configuration's mistakes are a line each.
func printError(w io.Writer, name string, err error) {
	for line := range strings.Lines(err.Error()) {
		fmt.Fprintf(w, "keypool %s: %s\n", name, strings.TrimSuffix(line, "\n"))
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: keypool <command> [flags]")
	fmt.Fprintln(w)
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, `Run "keypool <command> -h" for a command's flags.`)
}

// usageError is a mistake on the command line or in a configuration: the
// command exits with status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// newFlagSet returns the flag set of a command whose usage line is use and
// whose purpose is about.
func newFlagSet(name, use, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "Usage: "+use)
		fmt.Fprintln(fs.Output(), "\n"+about)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args with fs, whose output goes to stderr; a bad flag
// or an argument is a usageError.
func parseFlags(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	_, err := parseArgs(fs, args, stderr, 0)
	return err
}

// parseArgs parses args with fs, whose output goes to stderr, and returns
// the arguments that are not flags, at most most of them; flags may come
// before and after them. A bad flag or one argument too many is a
// usageError.
func parseArgs(fs *flag.FlagSet, args []string, stderr io.Writer, most int) ([]string, error) {
	fs.SetOutput(stderr)
	var rest []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err}
		}
		if fs.NArg() == 0 {
			return rest, nil
		}
		if len(rest) == most {
			return nil, usageError{fmt.Errorf("unexpected argument %q", fs.Arg(0))}
		}
		rest = append(rest, fs.Arg(0))
		args = fs.Args()[1:]
	}
}
