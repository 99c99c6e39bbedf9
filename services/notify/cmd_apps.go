package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/services/apps"
	"github.com/notify-dev/notify/services/apps/secrets"
	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/webpush"
)

func init() {
	register(command{name: "apps", summary: "the apps and their push credentials: add | list | show | rotate | remove | secrets-key", run: runApps})
}

const appsUsage = "usage: notify apps add|list|show|rotate|remove|secrets-key [NAME] [flags] [--json]"

// runApps is the operator's side of package apps, straight on the
// database. Exit 0 on success, 1 for an unknown app, 2 for bad usage or a
// refused credential, 3 for a change that does not apply (the app exists,
// has devices, or is the environment's default).
func runApps(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return usageError{msg: appsUsage}
	}
	sub, args := args[0], args[1:]
	if sub == "secrets-key" {
		return runAppsSecretsKey(args)
	}
	needsName := map[string]bool{"add": true, "show": true, "rotate": true, "remove": true, "list": false}
	named, ok := needsName[sub]
	if !ok {
		return usageError{msg: fmt.Sprintf("unknown apps command %q; %s", sub, appsUsage)}
	}
	fs := newFlagSet("apps "+sub, "")
	var infra infraFlags
	infra.register(fs, false)
	asJSON := fs.Bool("json", false, "print the result as JSON")
	var cf credentialFlags
	if sub == "add" || sub == "rotate" {
		cf.register(fs, sub == "rotate")
	}
	// Accept the name before or after the flags.
	var name string
	if named && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if named && name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return usageError{msg: "unexpected arguments: " + strings.Join(fs.Args(), " ")}
	}
	if named && name == "" {
		return usageError{msg: "give the app's NAME; " + appsUsage}
	}
	key, err := secrets.FromEnv(os.Getenv)
	if err != nil {
		return err
	}
	pool, err := infra.pool(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := apps.NewStore(pool, apps.Config{Key: key, Default: defaultAppFromEnv()})
	if sub == "add" || sub == "rotate" {
		// A key that does not match what is stored would seal this app's
		// credentials where no worker can open them.
		if err := store.CheckKey(ctx); err != nil {
			return err
		}
	}

	var out any
	switch sub {
	case "list":
		list, err := store.List(ctx)
		if err != nil {
			return err
		}
		if *asJSON {
			return json.NewEncoder(os.Stdout).Encode(map[string]any{"apps": list})
		}
		printAppList(list)
		return nil
	case "show":
		out, err = store.Get(ctx, name)
	case "add", "rotate":
		spec, serr := cf.spec(name)
		if serr != nil {
			return serr
		}
		if sub == "add" {
			out, err = store.Add(ctx, spec)
		} else {
			out, err = store.Rotate(ctx, name, spec)
		}
	case "remove":
		err = store.Remove(ctx, name)
		out = map[string]string{"removed": name}
	}
	var ie *apps.InvalidError
	switch {
	case errors.Is(err, apps.ErrNotFound):
		return exitError{code: 1, msg: fmt.Sprintf("no app %q in %s", name, redactURL(infra.databaseURL))}
	case errors.As(err, &ie):
		return usageError{msg: "--" + ie.Field + ": " + ie.Msg}
	case errors.Is(err, apps.ErrExists), errors.Is(err, apps.ErrHasDevices), errors.Is(err, apps.ErrDefault):
		return exitError{code: 3, msg: err.Error()}
	case err != nil:
		return err
	}
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	if a, ok := out.(apps.App); ok {
		printApp(a)
	} else {
		fmt.Printf("app %s removed\n", name)
	}
	return nil
}

func runAppsSecretsKey(args []string) error {
	fs := newFlagSet("apps secrets-key", "[--json]")
	asJSON := fs.Bool("json", false, `print {"key"} as JSON`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	k := secrets.Generate()
	if *asJSON {
		return json.NewEncoder(os.Stdout).Encode(map[string]string{"key": k})
	}
	fmt.Printf("# seals the apps' credentials in the database; every api and push process needs the same one.\n")
	fmt.Printf("# keep it secret, or put it in a file only its owner can read (chmod 600) and set %s\n", secrets.EnvKeyFile)
	fmt.Printf("%s=%s\n", secrets.EnvKey, k)
	return nil
}

// credentialFlags are add's and rotate's: files are read here, so neither
// keys nor service accounts ever appear on a command line.
type credentialFlags struct {
	vapidKeyFile, vapidSubject             string
	newVAPIDKey                            bool
	fcmFile, fcmEndpoint                   string
	apnsKeyFile, apnsKeyID, apnsTeamID     string
	apnsTopics, apnsEnvironment, apnsEndpt string
	fcmRateLimit, apnsConnections          int
}

func (c *credentialFlags) register(fs *flag.FlagSet, rotate bool) {
	fs.StringVar(&c.vapidKeyFile, "vapid-private-key-file", "", "file with the VAPID private key (base64url, as `notify vapid generate` prints it); with --vapid-subject alone a key pair is made")
	fs.StringVar(&c.vapidSubject, "vapid-subject", "", "VAPID contact: mailto: or https: URI")
	if rotate {
		fs.BoolVar(&c.newVAPIDKey, "new-vapid-key", false, "make a new VAPID key pair for new subscriptions (old subscriptions keep theirs)")
	}
	fs.StringVar(&c.fcmFile, "fcm-credentials", "", "the Firebase project's service-account JSON file")
	fs.StringVar(&c.fcmEndpoint, "fcm-endpoint", "", "FCM's origin (default "+fcm.DefaultEndpoint+")")
	fs.StringVar(&c.apnsKeyFile, "apns-key-file", "", "the .p8 signing key from Apple")
	fs.StringVar(&c.apnsKeyID, "apns-key-id", "", "the key's id (JWT kid)")
	fs.StringVar(&c.apnsTeamID, "apns-team-id", "", "the developer team id (JWT iss)")
	fs.StringVar(&c.apnsTopics, "apns-topics", "", "comma-separated bundle ids this app's devices may name; the first is the default")
	fs.StringVar(&c.apnsEnvironment, "apns-environment", "", "production (default) or sandbox")
	fs.StringVar(&c.apnsEndpt, "apns-endpoint", "", "an origin replacing Apple's (default "+apns.ProductionEndpoint+")")
	fs.IntVar(&c.fcmRateLimit, "fcm-rate-limit", 0, "messages a minute each push worker sends to this app's FCM project (default 600000, FCM's default quota)")
	fs.IntVar(&c.apnsConnections, "apns-connections", 0, "HTTP/2 connections each push worker opens to APNs with this app's key (default 16)")
}

func (c *credentialFlags) spec(name string) (apps.Spec, error) {
	s := apps.Spec{Name: name, VAPIDSubject: c.vapidSubject, NewVAPIDKey: c.newVAPIDKey,
		FCMEndpoint: c.fcmEndpoint, APNsKeyID: c.apnsKeyID, APNsTeamID: c.apnsTeamID,
		APNsEnvironment: c.apnsEnvironment, APNsEndpoint: c.apnsEndpt,
		FCMRateLimit: c.fcmRateLimit, APNsConnections: c.apnsConnections}
	if c.fcmRateLimit < 0 || c.apnsConnections < 0 {
		return s, usageError{msg: "--fcm-rate-limit and --apns-connections must be positive"}
	}
	if c.vapidKeyFile != "" {
		b, err := os.ReadFile(c.vapidKeyFile)
		if err != nil {
			return s, usageError{msg: "--vapid-private-key-file: " + err.Error()}
		}
		s.VAPIDPrivateKey = vapidKeyFromFile(b)
	}
	var err error
	if c.fcmFile != "" {
		if s.FCMCredentials, err = os.ReadFile(c.fcmFile); err != nil {
			return s, usageError{msg: "--fcm-credentials: " + err.Error()}
		}
	}
	if c.apnsKeyFile != "" {
		if s.APNsKey, err = os.ReadFile(c.apnsKeyFile); err != nil {
			return s, usageError{msg: "--apns-key-file: " + err.Error()}
		}
	}
	for _, t := range strings.Split(c.apnsTopics, ",") {
		if t = strings.TrimSpace(t); t != "" {
			s.APNsTopics = append(s.APNsTopics, t)
		}
	}
	return s, nil
}

// vapidKeyFromFile takes the key from what `notify vapid generate` prints
// (its NOTIFY_VAPID_PRIVATE_KEY= line, or --json's private_key), or from
// a file holding only the key.
func vapidKeyFromFile(b []byte) string {
	var j struct {
		PrivateKey string `json:"private_key"`
	}
	if json.Unmarshal(b, &j) == nil && j.PrivateKey != "" {
		return j.PrivateKey
	}
	var first string
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, envVAPIDPrivateKey+"="); ok {
			return v
		}
		if first == "" && line != "" && !strings.HasPrefix(line, "#") && !strings.Contains(line, "=") {
			first = line
		}
	}
	return first
}

func printAppList(list []apps.App) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tPLATFORMS\tSOURCE\tUPDATED")
	for _, a := range list {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", a.Name, a.Version, platforms(a), a.Source, a.UpdatedAt.Format(time.RFC3339))
	}
	tw.Flush()
}

func platforms(a apps.App) string {
	var p []string
	if a.WebPush != nil {
		p = append(p, "webpush")
	}
	if a.FCM != nil {
		p = append(p, "fcm")
	}
	if a.APNs != nil {
		p = append(p, "apns")
	}
	if len(p) == 0 {
		return "-"
	}
	return strings.Join(p, ",")
}

// printApp shows an app's public parts; its private ones are never read.
func printApp(a apps.App) {
	fmt.Printf("app %s: version %d, %s, created %s, updated %s\n", a.Name, a.Version, a.Source,
		a.CreatedAt.Format(time.RFC3339), a.UpdatedAt.Format(time.RFC3339))
	if a.Source == "environment" {
		fmt.Printf("  credentials: the NOTIFY_VAPID_*, NOTIFY_FCM_* and NOTIFY_APNS_* variables of each process\n")
	}
	if w := a.WebPush; w != nil {
		fmt.Printf("  webpush  subject %s\n", w.Subject)
		for _, k := range w.Keys {
			state := "current"
			if k.RetiredAt != nil {
				state = "retired " + k.RetiredAt.Format(time.RFC3339) + ", signs for its subscriptions"
			}
			fmt.Printf("           key %d %s (%s)\n", k.ID, k.PublicKey, state)
		}
	}
	if f := a.FCM; f != nil {
		ep := f.Endpoint
		if ep == "" {
			ep = fcm.DefaultEndpoint
		}
		rate := "default " + strconv.Itoa(push.DefaultFCMRateLimit)
		if f.RateLimit > 0 {
			rate = strconv.Itoa(f.RateLimit)
		}
		fmt.Printf("  fcm      project %s, %s, endpoint %s, rate limit %s/min per worker\n", f.ProjectID, f.ClientEmail, ep, rate)
	}
	if p := a.APNs; p != nil {
		ep := p.Endpoint
		if ep == "" {
			ep = "Apple's"
		}
		conns := "default"
		if p.Connections > 0 {
			conns = strconv.Itoa(p.Connections)
		}
		fmt.Printf("  apns     team %s, key %s, %s, topics %s, endpoint %s, connections %s per worker\n", p.TeamID, p.KeyID, p.Environment,
			strings.Join(p.Topics, ","), ep, conns)
	}
}

// defaultAppFromEnv is what this shell's environment says of the default
// app, public parts only, for list and show: each service reads the same
// variables (and reports a bad one at its start), so an unset or bad one
// is simply left out here.
func defaultAppFromEnv() *apps.App {
	var a apps.App
	if k, err := webpush.ParseVAPIDKey(os.Getenv(envVAPIDPrivateKey)); err == nil {
		a.WebPush = &apps.WebPush{Subject: os.Getenv(envVAPIDSubject), Keys: []apps.VAPIDKey{{PublicKey: k.PublicKey()}}}
	}
	if f := os.Getenv(envFCMCredentials); f != "" {
		if c, err := fcm.LoadCredentials(f); err == nil {
			a.FCM = &apps.FCM{ProjectID: c.ProjectID, ClientEmail: c.ClientEmail, Endpoint: os.Getenv(envFCMEndpoint)}
		}
	}
	if id, team := os.Getenv(envAPNsKeyID), os.Getenv(envAPNsTeamID); id != "" && team != "" {
		a.APNs = &apps.APNs{KeyID: id, TeamID: team, Environment: "production", Endpoint: os.Getenv(envAPNsEndpoint)}
		if t := os.Getenv(envAPNsTopic); t != "" {
			a.APNs.Topics = []string{t}
		}
	}
	return &a
}

// appsSecretsKey reads NOTIFY_SECRETS_KEY / NOTIFY_SECRETS_KEY_FILE for a
// service and checks it against what is stored: the API seals with it,
// so a key other than the workers' would store credentials no worker can
// open. open also opens every app's credentials, as a push worker must:
// a missing or wrong key stops it at start, naming the setting, instead
// of failing every send of that app later.
func appsSecretsKey(ctx context.Context, pool *pgxpool.Pool, open bool) (*secrets.Key, error) {
	key, err := secrets.FromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	store := apps.NewStore(pool, apps.Config{Key: key})
	if open {
		_, err = store.Load(ctx)
	} else {
		err = store.CheckKey(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("apps' credentials: %w", err)
	}
	return key, nil
}
