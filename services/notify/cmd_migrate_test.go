package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

// migrateEnv points migrate at a fresh database and topic prefix, deleting
// the topics afterwards.
func migrateEnv(t *testing.T) (*kadm.Client, streams.Topics, int) {
	t.Helper()
	db := schematest.NewEmptyDatabase(t)
	t.Setenv("NOTIFY_DATABASE_URL", db.URL)
	t.Setenv("NOTIFY_KAFKA_BROKERS", strings.Join(streamstest.Brokers(t), ","))
	topics := streams.DefaultTopics().WithPrefix(streamstest.Prefix())
	t.Setenv("NOTIFY_TOPIC_PREFIX", topics.Prefix)
	adm := streamstest.Admin(t)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var names []string
		for _, s := range topics.Specs() {
			names = append(names, s.Name)
		}
		_, _ = adm.DeleteTopics(ctx, names...)
	})
	n, err := streams.BrokerCount(t.Context(), adm)
	if err != nil {
		t.Fatal(err)
	}
	return adm, topics, n
}

// A replication factor above the broker count is refused naming the flag
// and the count, before the database or Kafka is changed. On the shared
// single test broker: --replication-factor 2 (3 on a cluster of 2, …).
func TestMigrateRefusesReplicationAboveBrokers(t *testing.T) {
	adm, topics, n := migrateEnv(t)
	var out, errb bytes.Buffer
	code := mainErr([]string{"migrate", "--replication-factor", strconv.Itoa(n + 1)}, &out, &errb)
	want := fmt.Sprintf("--replication-factor %d: the Kafka cluster at %s has %d broker(s)", n+1, strings.Join(streamstest.Brokers(t), ","), n)
	if code != 2 || !strings.Contains(errb.String(), want) {
		t.Fatalf("exit %d, stderr %q; want exit 2 and %q", code, errb.String(), want)
	}
	details, err := adm.ListTopics(t.Context(), topics.Push())
	if err != nil {
		t.Fatal(err)
	}
	if details[topics.Push()].Err == nil {
		t.Error("the push topic was created although migrate refused")
	}
	// Nothing was applied to the database either: a later run applies it all.
	stdout := captureStdout(t, func() {
		if code := mainErr([]string{"migrate", "--no-kafka", "--json"}, os.Stdout, &errb); code != 0 {
			t.Fatalf("migrate --no-kafka afterwards: exit %d: %s", code, errb.String())
		}
	})
	var res struct {
		Applied []struct {
			Version int `json:"version"`
		} `json:"applied"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil || len(res.Applied) == 0 || res.Applied[0].Version != 1 {
		t.Fatalf("migrate --no-kafka after the refused run printed %q (%v): the refused run had applied migrations", stdout, err)
	}

	// min ISR above the factor, and nonsense values, are usage errors too.
	for _, args := range [][]string{
		{"--replication-factor", "1", "--min-insync-replicas", "2"},
		{"--min-insync-replicas", strconv.Itoa(n + 1)},
		{"--replication-factor", "-1"},
	} {
		errb.Reset()
		if code := mainErr(append([]string{"migrate"}, args...), &out, &errb); code != 2 || !strings.Contains(errb.String(), args[len(args)-2]) {
			t.Errorf("migrate %v: exit %d, stderr %q; want exit 2 naming %s", args, code, errb.String(), args[len(args)-2])
		}
	}
}

// migrate creates the topics with the flags' replication and reports (exit
// 1, the topic named) an existing topic that differs.
func TestMigrateReplicationFlags(t *testing.T) {
	adm, topics, _ := migrateEnv(t)
	stdout := captureStdout(t, func() {
		var errb bytes.Buffer
		if code := mainErr([]string{"migrate", "--json", "--replication-factor", "1", "--min-insync-replicas", "1"}, os.Stdout, &errb); code != 0 {
			t.Fatalf("migrate: exit %d: %s", code, errb.String())
		}
	})
	var res struct {
		Topics []streams.EnsureResult `json:"topics"`
	}
	if err := json.Unmarshal([]byte(stdout), &res); err != nil {
		t.Fatalf("migrate --json printed %q: %v", stdout, err)
	}
	if len(res.Topics) != 8 { // material, notification, fanout, push, push lane, dlq, lifecycle, roster dlq
		t.Fatalf("topics: %+v", res.Topics)
	}
	for _, r := range res.Topics {
		if !r.Created || r.ReplicationFactor != 1 || r.MinInsyncReplicas != 1 {
			t.Errorf("%+v: want created with RF 1, min ISR 1", r)
		}
	}
	// The broker's own view (its metadata may lag the creation a moment).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		details, err := adm.ListTopics(t.Context(), topics.Push())
		if err != nil {
			t.Fatal(err)
		}
		rf := details[topics.Push()].Partitions.NumReplicas()
		if rf == 1 {
			break
		}
		if rf > 1 || time.Now().After(deadline) {
			t.Fatalf("push topic has %d replicas, want 1", rf)
		}
	}

	// Asking for min ISR 2 of topics that have 1 is reported, not accepted.
	// (On one broker RF 1 with min ISR 2 is refused first: ask RF 1 there.)
	two := "2"
	if _, err := adm.AlterTopicConfigs(t.Context(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "min.insync.replicas", Value: &two}}, topics.Push()); err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	var code int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		errb.Reset()
		captureStdout(t, func() {
			code = mainErr([]string{"migrate", "--replication-factor", "1", "--min-insync-replicas", "1"}, os.Stdout, &errb)
		})
		if code != 0 {
			break
		}
	}
	want := topics.Push() + ": min.insync.replicas 2, want 1"
	if code != 1 || !strings.Contains(errb.String(), want) {
		t.Fatalf("second migrate: exit %d, stderr %q; want exit 1 naming %q", code, errb.String(), want)
	}
}
