package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/retention"
	"github.com/notify-dev/notify/services/startstop"
)

// `notify retention`: --json is the report, the text mode a table, a dry
// run changes nothing, bad flags are usage errors.
func TestRetentionCommand(t *testing.T) {
	db := schematest.NewDatabase(t)
	t.Setenv("NOTIFY_DATABASE_URL", db.URL)
	ctx := context.Background()
	// A day of last year: old under any keep.
	old := time.Now().UTC().AddDate(-1, 0, 0).Format(time.DateOnly)
	for _, table := range retention.DefaultTables {
		if _, err := db.Pool.Exec(ctx, `SELECT event_partition_create($1::regclass, $2::date)`, table, old); err != nil {
			t.Fatal(err)
		}
	}
	run := func(args ...string) (int, string, string) {
		var errb bytes.Buffer
		var code int
		out := captureStdout(t, func() { code = mainErr(append([]string{"retention"}, args...), os.Stdout, &errb) })
		return code, out, errb.String()
	}
	oldPart := "notifications_p" + strings.ReplaceAll(old, "-", "")
	exists := func() bool {
		var ok bool
		if err := db.Pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, oldPart).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}

	code, out, stderr := run("--keep", "30d", "--dry-run", "--json")
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s%s", code, out, stderr)
	}
	var rep struct {
		Keep       string         `json:"keep"`
		DryRun     bool           `json:"dry_run"`
		Counts     map[string]int `json:"counts"`
		Partitions []struct {
			Table, Partition, Day, Action string
		} `json:"partitions"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("--json output is not one JSON object: %v\n%s", err, out)
	}
	if rep.Keep != "30d" || !rep.DryRun || rep.Counts["drop"] < 2 || len(rep.Partitions) == 0 {
		t.Fatalf("dry run report: %s", out)
	}
	if !exists() {
		t.Fatal("the dry run dropped a partition")
	}

	code, out, stderr = run("--keep", "30d")
	if code != 0 || !strings.Contains(out, "TABLE") || !strings.Contains(out, oldPart) || !strings.Contains(out, "dropped ") {
		t.Fatalf("run: exit %d\n%s%s", code, out, stderr)
	}
	if exists() {
		t.Fatal("the old partition survived the run")
	}

	for _, bad := range [][]string{{}, {"--keep", "1h"}, {"--keep", "30"}, {"--keep", "30d", "--ahead", "0"}, {"--keep", "30d", "extra"}} {
		if code, out, stderr := run(bad...); code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)\n%s%s", bad, code, out, stderr)
		}
	}
}

// The sweeper always runs beside the service under one lifecycle: without
// --retention-keep it drops nothing and creates the coming days'
// partitions.
func TestRetentionFlagsWrap(t *testing.T) {
	db := schematest.NewDatabase(t)
	svc := &nopService{}
	off := retentionFlags{interval: time.Hour}
	got, err := off.wrap(svc, db.Pool, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := got.(*withSweeper); !ok || w.sweeper == nil {
		t.Fatalf("without --retention-keep: %T, want the service with a create-only sweeper", got)
	}
	for _, bad := range []retentionFlags{{keep: "1h", interval: time.Hour}, {keep: "x", interval: time.Hour}, {keep: "30d", interval: time.Second}} {
		if _, err := bad.wrap(svc, db.Pool, slog.New(slog.DiscardHandler)); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
	on := retentionFlags{keep: "30d", interval: time.Hour}
	got, err = on.wrap(svc, db.Pool, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := got.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !svc.Started() {
		t.Fatal("the service did not start")
	}
	if err := got.Start(ctx); err == nil {
		t.Fatal("second Start accepted")
	}
	if err := startstop.StopTimeout(got, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if svc.Started() {
		t.Fatal("the service did not stop")
	}
}

type nopService struct{ startstop.Base }

func (s *nopService) Start(ctx context.Context) error {
	_, err := s.Begin(ctx)
	return err
}

func (s *nopService) Stop(ctx context.Context) error { return s.Base.Stop(ctx, nil) }
