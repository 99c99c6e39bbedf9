package main

import (
	"bytes"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/notify-dev/notify/schema/schematest"
)

func TestHelpListsCommands(t *testing.T) {
	var out, errb bytes.Buffer
	if code := mainErr([]string{"--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help exit %d", code)
	}
	for _, c := range []string{"migrate", "seed", "run", "bench", "demo"} {
		if !strings.Contains(out.String(), "\n  "+c+" ") {
			t.Errorf("help does not list %s:\n%s", c, out.String())
		}
	}
	if code := mainErr([]string{"nope"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "nope"`) {
		t.Fatalf("unknown command: exit %d, stderr %q", code, errb.String())
	}
}

// A bad setting fails at start and names the setting.
func TestBadSettingsNamed(t *testing.T) {
	for _, c := range []struct {
		env, val, want string
		args           []string
	}{
		{"NOTIFY_KAFKA_BROKERS", "nohostport", "NOTIFY_KAFKA_BROKERS", []string{"migrate"}},
		{"NOTIFY_DATABASE_URL", "::bad", "NOTIFY_DATABASE_URL", []string{"migrate", "--no-kafka"}},
		{"NOTIFY_DATABASE_URL", "::bad", "NOTIFY_DATABASE_URL", []string{"seed", "--users", "10"}},
	} {
		t.Run(c.env+"/"+c.args[0], func(t *testing.T) {
			t.Setenv(c.env, c.val)
			var out, errb bytes.Buffer
			code := mainErr(c.args, &out, &errb)
			if code == 0 || !strings.Contains(errb.String(), c.want) {
				t.Fatalf("exit %d, stderr %q: want non-zero naming %s", code, errb.String(), c.want)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := mainErr([]string{"seed"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "--users") {
		t.Fatalf("seed without --users: exit %d, %q", code, errb.String())
	}
}

func TestSeedTwiceRefuses(t *testing.T) {
	db := schematest.NewDatabase(t)
	t.Setenv("NOTIFY_DATABASE_URL", db.URL)
	stdout := captureStdout(t, func() {
		var errb bytes.Buffer
		if code := mainErr([]string{"seed", "--users", "500", "--json"}, os.Stdout, &errb); code != 0 {
			t.Fatalf("seed: exit %d: %s", code, errb.String())
		}
	})
	var res struct {
		CourseID      string  `json:"course_id"`
		InstructorID  string  `json:"instructor_id"`
		Users         int64   `json:"users"`
		Subscriptions int64   `json:"subscriptions"`
		Seconds       float64 `json:"seconds"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("seed --json printed %q: %v", stdout, err)
	}
	if res.Users != 500 || res.Subscriptions != 549 || res.CourseID == "" || res.InstructorID == "" {
		t.Fatalf("seed --json: %+v", res)
	}
	var errb bytes.Buffer
	if code := mainErr([]string{"seed", "--users", "500"}, os.Stdout, &errb); code == 0 || !strings.Contains(errb.String(), "already holds seed data") {
		t.Fatalf("second seed: exit %d, %q", code, errb.String())
	}
	var n int
	if err := db.Pool.QueryRow(t.Context(), "SELECT count(*) FROM enrollments").Scan(&n); err != nil || n != 500 {
		t.Fatalf("after refused second seed: %d enrollments (%v)", n, err)
	}
}

func captureStdout(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		var b bytes.Buffer
		_, _ = b.ReadFrom(r)
		done <- b.String()
	}()
	defer func() { os.Stdout = old }()
	f()
	w.Close()
	os.Stdout = old
	return <-done
}
