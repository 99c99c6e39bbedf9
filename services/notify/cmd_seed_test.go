package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
)

// notify seed --preferences: a bad share is a usage error naming it,
// before anything is written; good shares are seeded and reported.
func TestSeedPreferencesFlag(t *testing.T) {
	db := schematest.NewDatabase(t)
	t.Setenv("NOTIFY_DATABASE_URL", db.URL)
	for args, want := range map[string]string{
		"muted=1.2":                    "--preferences: muted share must be between 0 and 1, got 1.2",
		"muted=0.7,quiet=0.4":          "--preferences: the shares add up to",
		"loud=0.1":                     `--preferences: unknown key "loud" (keys muted, quiet, type_rules, capped)`,
		"quiet=0.3 --quiet-ends-in 0s": "--quiet-ends-in must be between 1s and 12h0m0s",
	} {
		var out, errb bytes.Buffer
		a := append([]string{"seed", "--users", "100", "--preferences"}, strings.Fields(args)...)
		if code := mainErr(a, &out, &errb); code != 2 || !strings.Contains(errb.String(), want) {
			t.Errorf("seed --preferences %s: exit %d, stderr %q; want 2 and %q", args, code, errb.String(), want)
		}
	}
	var n int
	if err := db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM users").Scan(&n); err != nil || n != 0 {
		t.Fatalf("refused seeds wrote %d users (%v)", n, err)
	}
	stdout := captureStdout(t, func() {
		var errb bytes.Buffer
		if code := mainErr([]string{"seed", "--users", "1000", "--subs-ratio", "0", "--preferences", "muted=0.2,quiet=0.3,type_rules=0.1", "--quiet-ends-in", "90s", "--json"}, os.Stdout, &errb); code != 0 {
			t.Fatalf("seed: exit %d: %s", code, errb.String())
		}
	})
	var res struct {
		Preferences struct {
			Muted     int64  `json:"muted"`
			Quiet     int64  `json:"quiet"`
			TypeRules int64  `json:"type_rules"`
			Capped    int64  `json:"capped"`
			QuietEnd  string `json:"quiet_end"`
		} `json:"preferences"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("seed --json printed %q: %v", stdout, err)
	}
	if p := res.Preferences; p.Muted != 200 || p.Quiet != 300 || p.TypeRules != 100 || p.Capped != 0 || p.QuietEnd == "" {
		t.Fatalf("seed --json preferences: %+v", p)
	}
	if err := db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM user_preferences").Scan(&n); err != nil || n != 600 {
		t.Fatalf("%d preference rows (%v), want 600", n, err)
	}
}
