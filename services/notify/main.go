// Command notify runs every part of the notify pipeline and its tooling:
// migrations, seed data, the services (api, cdc, fanout, push, pushmock),
// status, replay, and benchmarks.
//
// Each subcommand lives in its own cmd_*.go file and registers itself in
// init, so adding one never touches this file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// command is one `notify <name>` subcommand.
type command struct {
	name    string
	summary string
	// run gets the arguments after the subcommand name. It returns an
	// error to print; usageError makes main print the command's usage too.
	run func(ctx context.Context, args []string) error
}

var commands = newRegistry[command]("command")

func register(c command) { commands.add(c.name, c.summary, c) }

// usageError is a bad invocation: exit code 2 and a hint.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitError carries a specific exit code without printing anything more.
type exitError struct {
	code int
	msg  string
}

func (e exitError) Error() string { return e.msg }

func main() {
	os.Exit(mainErr(os.Args[1:], os.Stdout, os.Stderr))
}

func mainErr(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		printHelp(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands.entries[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "notify: unknown command %q\n\n", args[0])
		printHelp(stderr)
		return 2
	}
	if err := checkLogSettings(); err != nil {
		fmt.Fprintf(stderr, "notify %s: %v\n", c.name, err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := c.run(ctx, args[1:])
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "notify %s: %s\nRun 'notify %s --help' for usage.\n", c.name, ue.msg, c.name)
		return 2
	}
	var ee exitError
	if errors.As(err, &ee) {
		if ee.msg != "" {
			fmt.Fprintf(stderr, "notify %s: %s\n", c.name, ee.msg)
		}
		return ee.code
	}
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		fmt.Fprintf(stderr, "notify %s: interrupted\n", c.name)
		return 130
	}
	fmt.Fprintf(stderr, "notify %s: %v\n", c.name, err)
	return 1
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "notify — fan one committed event out to a million in-app notifications and Web Pushes.")
	fmt.Fprintln(w, "\nUsage: notify <command> [flags]\n\nCommands:")
	for _, n := range commands.names() {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands.summary[n])
	}
	fmt.Fprintln(w, "\nEnvironment (flags override):")
	fmt.Fprintf(w, "  %-22s %s (default %s)\n", envDatabaseURL, "Postgres connection URL", defaultDatabaseURL)
	fmt.Fprintf(w, "  %-22s %s (default %s)\n", envKafkaBrokers, "comma-separated Kafka brokers", defaultKafkaBrokers)
	fmt.Fprintln(w, "\nRun 'notify <command> --help' for a command's flags.")
}

// newFlagSet makes a flag set for a subcommand whose errors come back to main
// instead of exiting inside the flag package.
func newFlagSet(name, usage string) *flag.FlagSet {
	fs := flag.NewFlagSet("notify "+name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: notify %s %s\n\nFlags:\n", name, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parseFlags parses args and turns a flag error into a usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{msg: err.Error()}
	}
	return nil
}

// newLogger returns the CLI logger: text on stderr. Services use JSON (see
// serviceLogger) because their output goes to log collectors.
func newLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: logLevel()}))
}

func serviceLogger(service string) *slog.Logger {
	opts := &slog.HandlerOptions{Level: logLevel()}
	var h slog.Handler = slog.NewJSONHandler(os.Stderr, opts)
	if f, _ := logFormat(); f == "text" {
		h = slog.NewTextHandler(os.Stderr, opts)
	}
	return slog.New(h).With("service", service)
}

const (
	envLogLevel  = "NOTIFY_LOG_LEVEL"
	envLogFormat = "NOTIFY_LOG_FORMAT"
)

// checkLogSettings refuses a bad NOTIFY_LOG_LEVEL or NOTIFY_LOG_FORMAT
// before any command runs: a typo must not silently log at another level
// or in another format than the log collector expects.
func checkLogSettings() error {
	if _, err := parseLogLevel(); err != nil {
		return err
	}
	_, err := logFormat()
	return err
}

// logLevel is NOTIFY_LOG_LEVEL (default info); checkLogSettings has
// refused a bad value before any logger is made.
func logLevel() slog.Level {
	l, _ := parseLogLevel()
	return l
}

func parseLogLevel() (slog.Level, error) {
	v := strings.TrimSpace(os.Getenv(envLogLevel))
	if v == "" {
		return slog.LevelInfo, nil
	}
	var l slog.Level
	if err := l.UnmarshalText([]byte(v)); err != nil {
		return slog.LevelInfo, fmt.Errorf("invalid %s %q: want debug, info, warn or error (optionally with an offset, e.g. info+2)", envLogLevel, v)
	}
	return l, nil
}

// logFormat is NOTIFY_LOG_FORMAT: "json" (the default for services) or
// "text". The CLI's own messages are always text.
func logFormat() (string, error) {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(envLogFormat))); v {
	case "", "json":
		return "json", nil
	case "text":
		return "text", nil
	default:
		return "json", fmt.Errorf("invalid %s %q: want json or text", envLogFormat, v)
	}
}
