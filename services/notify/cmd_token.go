package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/notify-dev/notify/services/api"
	"github.com/notify-dev/notify/services/auth"
)

func init() {
	register(command{name: "token", summary: "print a signed API bearer token for a user (HS256, " + auth.EnvSecret + ")", run: runToken})
}

// runToken prints only the token on stdout, so TOKEN=$(notify token --user X)
// works; the dev-secret warning goes to stderr.
func runToken(ctx context.Context, args []string) error { return printToken(os.Stdout, args) }

func printToken(w io.Writer, args []string) error {
	fs := newFlagSet("token", "--user ID [--ttl 1h] [--dev]")
	dev := devFlag(fs)
	user := fs.String("user", "", "user id (uuid) the token speaks for; required")
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid; at most the API's maximum ("+auth.EnvMaxLifetime+", default "+auth.DefaultMaxLifetime.String()+")")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *user == "" {
		return usageError{msg: "--user is required"}
	}
	id, err := api.ParseUUID(*user)
	if err != nil {
		return usageError{msg: fmt.Sprintf("--user %q is not a uuid", *user)}
	}
	if *ttl <= 0 {
		return usageError{msg: fmt.Sprintf("--ttl %s must be positive", *ttl)}
	}
	devMode, err := dev()
	if err != nil {
		return err
	}
	key, err := auth.KeyFromEnv(newLogger(), devMode)
	if err != nil {
		return err
	}
	// The issuer, audience and lifetime bound come from the same
	// environment the API reads, so the token is one it accepts.
	if max := key.Rules().MaxLifetime; *ttl > max {
		return usageError{msg: fmt.Sprintf("--ttl %s exceeds the API's maximum token lifetime %s (%s)", *ttl, max, auth.EnvMaxLifetime)}
	}
	now := time.Now()
	tok, err := key.Sign(auth.Claims{Subject: id.String(), IssuedAt: now, ExpiresAt: now.Add(*ttl)})
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, tok)
	return err
}
