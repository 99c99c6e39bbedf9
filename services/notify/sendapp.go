package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/apps/secrets"
)

// appFlag is the one-off senders' --app: send with an app's stored
// credentials, opened with the secrets key as the push workers open them,
// instead of the environment's (which are the app default's).
type appFlag struct {
	name  string
	infra infraFlags
}

func (a *appFlag) register(fs *flag.FlagSet) {
	fs.StringVar(&a.name, "app", "", "send with this app's stored credentials (opened with "+secrets.EnvKey+") instead of the environment's; default: the environment's, the app "+apps.Default)
	a.infra.register(fs, false)
}

// load is the app named by --app with its credentials opened; nil for the
// environment's (no --app, or --app default).
func (a *appFlag) load(ctx context.Context) (*apps.App, error) {
	if a.name == "" || a.name == apps.Default {
		return nil, nil
	}
	key, err := secrets.FromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	pool, err := a.infra.pool(ctx)
	if err != nil {
		return nil, err
	}
	defer pool.Close()
	app, err := apps.NewStore(pool, apps.Config{Key: key}).Open(ctx, a.name)
	if errors.Is(err, apps.ErrNotFound) {
		return nil, usageError{msg: fmt.Sprintf("--app: no app %q (notify apps list)", a.name)}
	}
	if err != nil {
		return nil, fmt.Errorf("--app %s: %w", a.name, err)
	}
	return &app, nil
}

// flagSet reports whether the command line gave the flag name.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) {
		if f.Name == name {
			set = true
		}
	})
	return set
}
