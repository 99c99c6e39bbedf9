package streams_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
)

// pgErr carries an SQLSTATE the way pgconn.PgError does.
type pgErr string

func (e pgErr) Error() string    { return "ERROR: SQLSTATE " + string(e) }
func (e pgErr) SQLState() string { return string(e) }

// deadLetters reads every record of a DLQ topic written so far, decoded.
func (b broker) deadLetters(t *testing.T, dlq string, want int) []streams.DeadLetter {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.brokers...), kgo.ConsumeTopics(dlq), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out []streams.DeadLetter
	for len(out) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d dead letters, want %d", len(out), want)
		}
		fs.EachRecord(func(r *kgo.Record) {
			d, err := streams.DecodeDeadLetter(r)
			if err != nil {
				t.Fatalf("dead letter: %v", err)
			}
			out = append(out, d)
		})
	}
	return out
}

func TestIsDataError(t *testing.T) {
	for code, want := range map[string]bool{
		"22021": true, "22P02": true, "22001": true, "23502": true, "23503": true, "23514": true,
		"23505": false, "23P01": false, "40001": false, "08006": false, "42P01": false, "": false,
	} {
		err := fmt.Errorf("plan event: %w", pgErr(code))
		if got := streams.IsDataError(err); got != want {
			t.Errorf("IsDataError(%q) = %v, want %v", code, got, want)
		}
	}
}

func TestUnavailable(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{fmt.Errorf("query: %w", syscall.ECONNRESET), true},
		{context.DeadlineExceeded, true},
		{pgErr("57P01"), true},
		{pgErr("40P01"), true},
		{pgErr("53300"), true},
		{pgErr("57P03"), true}, // starting up: a service starting waits
		{pgErr("08006"), true},
		{pgErr("3D000"), false}, // no such database: a setting to fix
		{pgErr("28P01"), false}, // wrong password
		{pgErr("22021"), false},
		{pgErr("42P01"), false},
		{errors.New("encode payload: boom"), false},
	} {
		if got := streams.Unavailable(tc.err); got != tc.want {
			t.Errorf("Unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestConsumerDeadLettersDataErrors: a record whose SQL is refused for its
// data (22021, a NUL in text) goes to the DLQ at once with the database's
// error and is committed; the records behind it are not held up. A unique
// violation is a conflict that a retry resolves, so it is retried.
func TestConsumerDeadLettersDataErrors(t *testing.T) {
	t.Parallel()
	b := fakeBroker(t)
	topic := b.topic(t, 1)
	dlq := b.topic(t, 1)
	group := "g"
	b.produce(t, topic, 0, 0, 4)
	var poisonTries, conflictTries atomic.Int32
	startConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic}, CommitInterval: 10 * time.Millisecond, DLQTopic: dlq,
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond, MaxAttempts: -1, // only the data error may dead-letter
		Handler: func(ctx context.Context, r *kgo.Record) error {
			switch r.Offset {
			case 1:
				poisonTries.Add(1)
				return fmt.Errorf("plan event: insert run: %w", pgErr("22021"))
			case 2:
				if conflictTries.Add(1) < 3 {
					return fmt.Errorf("record outcomes: %w", pgErr("23505"))
				}
			}
			return nil
		},
	})
	eventually(t, "all 4 committed", func() bool { return b.committed(t, group, topic, 0) == 4 })
	if got := poisonTries.Load(); got != 1 {
		t.Errorf("data error tried %d times, want 1", got)
	}
	if got := conflictTries.Load(); got != 3 {
		t.Errorf("unique violation tried %d times, want 3 (retried until it succeeds)", got)
	}
	ds := b.deadLetters(t, dlq, 1)
	d := ds[0]
	if len(ds) != 1 || d.Reason != streams.ReasonDataError || d.Offset != 1 || d.Topic != topic || d.Attempt != 1 ||
		string(d.Value) != "1" || d.Error == "" || !containsAll(d.Error, "22021") {
		t.Fatalf("dead letters %+v, want one data_error for offset 1 naming 22021", ds)
	}
}

// TestConsumerGivesUpAfterMaxAttempts: a record that keeps failing is
// dead-lettered after MaxAttempts and committed, while failures that say a
// server is unreachable never count: an outage longer than MaxAttempts
// attempts dead-letters nothing.
func TestConsumerGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	b := fakeBroker(t)
	topic := b.topic(t, 1)
	dlq := b.topic(t, 1)
	group := "g"
	b.produce(t, topic, 0, 0, 3)
	var stuckTries, outageTries atomic.Int32
	startConsumer(t, streams.ConsumerConfig{
		Brokers: b.brokers, Group: group, Topics: []string{topic}, CommitInterval: 10 * time.Millisecond, DLQTopic: dlq,
		RetryMin: time.Millisecond, RetryMax: 5 * time.Millisecond, MaxAttempts: 3,
		Handler: func(ctx context.Context, r *kgo.Record) error {
			switch r.Offset {
			case 0:
				if outageTries.Add(1) <= 10 {
					return fmt.Errorf("acquire: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
				}
			case 1:
				stuckTries.Add(1)
				return errors.New("render: template broken")
			}
			return nil
		},
	})
	eventually(t, "all 3 committed", func() bool { return b.committed(t, group, topic, 0) == 3 })
	if got := outageTries.Load(); got != 11 {
		t.Errorf("record behind an outage tried %d times, want 11 (10 refused, then done)", got)
	}
	if got := stuckTries.Load(); got != 3 {
		t.Errorf("failing record tried %d times, want MaxAttempts = 3", got)
	}
	ds := b.deadLetters(t, dlq, 1)
	if d := ds[0]; len(ds) != 1 || d.Reason != streams.ReasonRetriesExhausted || d.Offset != 1 || d.Attempt != 3 || !containsAll(d.Error, "template broken", "3 attempts") {
		t.Fatalf("dead letters %+v, want one retries_exhausted for offset 1 after 3 attempts", ds)
	}
}

func TestConsumerMaxAttemptsValidation(t *testing.T) {
	_, err := streams.NewConsumer(streams.ConsumerConfig{Brokers: []string{"127.0.0.1:1"}, Group: "g", Topics: []string{"t"},
		Handler: func(context.Context, *kgo.Record) error { return nil }, MaxAttempts: -2})
	if err == nil || !containsAll(err.Error(), "max attempts") {
		t.Fatalf("MaxAttempts -2: error %v, want one naming max attempts", err)
	}
}

func TestPushCommandNotBeforeBounded(t *testing.T) {
	far := time.Now().Add(1000 * 24 * time.Hour).UTC()
	near := time.Now().Add(10 * time.Minute).UTC().Truncate(time.Millisecond)
	for _, tc := range []struct {
		nb      time.Time
		bounded bool
	}{{far, true}, {near, false}} {
		v := `{"v":1,"event_id":"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11","first_user":"00000000-0000-0000-0000-000000000001","last_user":"00000000-0000-0000-0000-000000000002","attempt":2,"subscription_ids":[1],"not_before":"` + tc.nb.Format(time.RFC3339Nano) + `"}`
		before := time.Now()
		c, err := streams.DecodePushCommand([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		got := *c.NotBefore
		if tc.bounded {
			if got.Before(before.Add(streams.MaxNotBeforeAhead)) || got.After(time.Now().Add(streams.MaxNotBeforeAhead)) {
				t.Errorf("not_before %s decoded as %s, want now + %s", tc.nb, got, streams.MaxNotBeforeAhead)
			}
		} else if !got.Equal(tc.nb) {
			t.Errorf("not_before %s within the bound decoded as %s, want it unchanged", tc.nb, got)
		}
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
