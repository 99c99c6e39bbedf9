package streams_test

import (
	"context"
	"testing"

	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

func TestEnsureTopicsIdempotent(t *testing.T) {
	t.Parallel()
	topics := streamstest.NewTopics(t) // creates them once
	adm := streamstest.Admin(t)
	ctx := context.Background()
	res, err := streams.EnsureTopics(ctx, adm, topics)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 {
		t.Fatalf("got %d results, want 4", len(res))
	}
	for _, r := range res {
		if r.Created {
			t.Errorf("%s created again on the second call", r.Topic)
		}
	}
	details, err := adm.ListTopics(ctx, topics.Push())
	if err != nil {
		t.Fatal(err)
	}
	if n := len(details[topics.Push()].Partitions); n != int(topics.PushPartitions) {
		t.Fatalf("push topic has %d partitions, want %d", n, topics.PushPartitions)
	}
	// Asking for more partitions than exist is a configuration error, not a
	// silent downgrade of the load-spreading contract.
	more := topics
	more.PushPartitions++
	if _, err := streams.EnsureTopics(ctx, adm, more); err == nil {
		t.Fatal("EnsureTopics accepted a topic with fewer partitions than configured")
	}
}

func TestTopicsValidate(t *testing.T) {
	t.Parallel()
	bad := streams.DefaultTopics()
	bad.PushPartitions = 0
	if bad.Validate() == nil {
		t.Fatal("0 partitions accepted")
	}
	if err := streams.DefaultTopics().WithPrefix("bad prefix").Validate(); err == nil {
		t.Fatal("prefix with a space accepted")
	}
	tp := streams.DefaultTopics().WithPrefix("x.")
	if tp.Material() != "x.outbox.event.material" || tp.DLQ() != "x.notify.push.dlq" || tp.Group(streams.GroupPush) != "x.notify-push" {
		t.Fatalf("names: %s %s %s", tp.Material(), tp.DLQ(), tp.Group(streams.GroupPush))
	}
}

func TestParseBrokers(t *testing.T) {
	t.Parallel()
	for _, good := range []string{"127.0.0.1:19092", "a:1, b:2", "[::1]:9092"} {
		if _, err := streams.ParseBrokers(good); err != nil {
			t.Errorf("ParseBrokers(%q): %v", good, err)
		}
	}
	for _, bad := range []string{"", "host", ":9092", "h:0", "h:x", "h:70000"} {
		if _, err := streams.ParseBrokers(bad); err == nil {
			t.Errorf("ParseBrokers(%q) accepted", bad)
		}
	}
}

func TestDecodeCommands(t *testing.T) {
	t.Parallel()
	if _, err := streams.DecodePushCommand([]byte(`{"v":2,"event_id":"e","first_user":"a","last_user":"b","attempt":1}`)); err == nil {
		t.Error("unknown version accepted")
	}
	if _, err := streams.DecodePushCommand([]byte(`not json`)); err == nil {
		t.Error("bad JSON accepted")
	}
	if _, err := streams.DecodeSliceCommand([]byte(`{"v":1,"event_id":"e","course_id":"c","lo":"a","hi":"b","slice_size":0}`)); err == nil {
		t.Error("slice size 0 accepted")
	}
	m, err := streams.DecodeMaterialPublished([]byte(`"{\"event_id\":\"e\",\"course_id\":\"c\",\"published_at\":\"2026-01-01T00:00:00Z\"}"`))
	if err != nil || m.EventID != "e" {
		t.Fatalf("string payload form: %+v %v", m, err)
	}
}
