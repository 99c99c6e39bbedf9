package main

import (
	"flag"
	"log/slog"
	"path/filepath"

	"github.com/notify-dev/notify/services/push/apns"
	"github.com/notify-dev/notify/services/pushmock"
)

// apnsMockFlags registers the mock's APNs flags. The credentials default to
// the APNs settings senders read, so a mock and a sender started from one
// environment agree; with none set, apnsMockCredentials picks the dev
// credentials.
func apnsMockFlags(fs *flag.FlagSet, c *pushmock.APNsConfig) *string {
	fs.StringVar(&c.KeyFile, "apns-key-file", envOr(envAPNsKeyFile, ""),
		"APNs: the key provider tokens are verified with, the senders' .p8 or its PUBLIC KEY PEM ("+envAPNsKeyFile+"; default: the dev credentials)")
	fs.StringVar(&c.KeyID, "apns-key-id", envOr(envAPNsKeyID, ""), "APNs: the kid tokens must carry ("+envAPNsKeyID+")")
	fs.StringVar(&c.TeamID, "apns-team-id", envOr(envAPNsTeamID, ""), "APNs: the iss tokens must carry ("+envAPNsTeamID+")")
	fs.StringVar(&c.Topic, "apns-topic", "", "APNs: the only apns-topic accepted (default: any)")
	fs.DurationVar(&c.TokenMaxAge, "apns-token-max-age", apns.MaxTokenAge, "APNs: provider tokens older than this answer 403 ExpiredProviderToken")
	return fs.String("apns-dev-dir", "", "APNs: where the dev credentials are made and read when --apns-key-file is unset "+
		"(default: apns/ beside the directory of --cert-file, which is "+apns.DefaultDevKeyDir+" for the default --cert-file)")
}

// apnsDevDir is where the mock keeps the dev credentials: beside the
// directory of its certificate, so that the defaults put both under .local
// where the senders look, and a mock given a temporary certificate file
// (every test) leaves nothing in the source tree.
func apnsDevDir(flagValue, certFile string) string {
	if flagValue != "" {
		return flagValue
	}
	return filepath.Join(filepath.Dir(filepath.Dir(certFile)), "apns")
}

// apnsMockCredentials fills in the dev credentials (made on first use)
// when none are configured, and says so loudly.
func apnsMockCredentials(log *slog.Logger, c *pushmock.APNsConfig, devDir string) error {
	if c.KeyFile != "" || c.KeyID != "" || c.TeamID != "" {
		return nil // configured: pushmock.New checks they are complete
	}
	k, created, err := apns.EnsureDevKey(devDir)
	if err != nil {
		return err
	}
	c.KeyFile, c.KeyID, c.TeamID = k.KeyFile, k.KeyID, k.TeamID
	log.Warn("push mock: APNs side trusts the DEV credentials (for local senders only; `notify apns dev-key` prints them)",
		"key_file", k.KeyFile, "key_id", k.KeyID, "team_id", k.TeamID, "generated_now", created)
	return nil
}
