package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/ids"
)

func init() {
	register(command{name: "token", summary: "print a signed API bearer token for a user or a service (HS256, " + auth.EnvSecret + ")", run: runToken})
}

// runToken prints only the token on stdout, so TOKEN=$(notify token --user X)
// works; the dev-secret warning goes to stderr.
func runToken(ctx context.Context, args []string) error { return printToken(os.Stdout, args) }

func printToken(w io.Writer, args []string) error {
	fs := newFlagSet("token", "(--user ID | --service NAME --scope S[,S…]) [--ttl 1h] [--dev]")
	dev := devFlag(fs)
	user := fs.String("user", "", "user the token speaks for: a uuid, or the platform's own id when "+ids.EnvNamespace+" is set (the API maps it)")
	service := fs.String("service", "", "service the token speaks for (subject "+auth.ServicePrefix+"NAME); needs --scope")
	scope := fs.String("scope", "", "the service's scopes, comma-separated: "+scopeList())
	ttl := fs.Duration("ttl", time.Hour, "how long the token is valid; at most the API's maximum ("+auth.EnvMaxLifetime+", default "+auth.DefaultMaxLifetime.String()+")")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{msg: fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	claims, err := tokenSubject(*user, *service, *scope)
	if err != nil {
		return err
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
	claims.IssuedAt, claims.ExpiresAt = now, now.Add(*ttl)
	tok, err := key.Sign(claims)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, tok)
	return err
}

// tokenSubject checks the flags naming who the token is for. A user's id
// is written as given (the API maps platform ids with the same
// namespace), after checking here that it maps, so a token the API would
// refuse is never printed.
func tokenSubject(user, service, scope string) (auth.Claims, error) {
	switch {
	case user != "" && service != "":
		return auth.Claims{}, usageError{msg: "give --user or --service, not both"}
	case user == "" && service == "":
		return auth.Claims{}, usageError{msg: "--user or --service is required"}
	case user != "":
		if scope != "" {
			return auth.Claims{}, usageError{msg: "--scope is for --service tokens: a user's rights follow from the roster (a course's instructor publishes to it)"}
		}
		m, err := ids.FromEnv()
		if err != nil {
			return auth.Claims{}, err
		}
		if _, err := m.Map(user); err != nil {
			return auth.Claims{}, usageError{msg: fmt.Sprintf("--user: %v", err)}
		}
		return auth.Claims{Subject: user}, nil
	}
	if err := auth.CheckServiceName(service); err != nil {
		return auth.Claims{}, usageError{msg: "--service: " + err.Error()}
	}
	scopes, err := auth.ParseScopes(scope)
	if err != nil {
		return auth.Claims{}, usageError{msg: "--scope: " + err.Error()}
	}
	if len(scopes) == 0 {
		return auth.Claims{}, usageError{msg: "--scope is required with --service: " + scopeList()}
	}
	return auth.Claims{Subject: auth.ServicePrefix + service, Scopes: scopes}, nil
}

func scopeList() string {
	s := ""
	for i, sc := range auth.Scopes {
		if i > 0 {
			s += ", "
		}
		s += string(sc)
	}
	return s
}
