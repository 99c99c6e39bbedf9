package streams_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
)

// Every notify client that produces — the consumers' dead letters, the CDC
// connector (connect.producerOpts adds AllISRAcks to ClientOpts) — must be
// idempotent with acks=all: on a cluster a record is acknowledged only once
// min.insync.replicas brokers have it, and a batch retried across a leader
// move is not written twice. Nothing in ClientOpts or a consumer's options
// may weaken franz-go's defaults.
func TestProducersIdempotentAllAcks(t *testing.T) {
	t.Parallel()
	plain, err := kgo.NewClient(streams.ClientOpts([]string{"127.0.0.1:1"}, "contract")...)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	c, err := streams.NewConsumer(streams.ConsumerConfig{
		Brokers: []string{"127.0.0.1:1"}, Group: "contract", Topics: []string{"contract"}, DLQTopic: "contract.dlq",
		Handler: func(context.Context, *kgo.Record) error { return nil },
	})
	if err != nil {
		t.Fatal(err)
	}
	for name, cl := range map[string]*kgo.Client{"ClientOpts": plain, "consumer": c.Client()} {
		if v := cl.OptValue(kgo.DisableIdempotentWrite); v != false {
			t.Errorf("%s: DisableIdempotentWrite = %v, want false", name, v)
		}
		if v, ok := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); !ok || v != kgo.AllISRAcks() {
			t.Errorf("%s: RequiredAcks = %v, want all in-sync replicas", name, cl.OptValue(kgo.RequiredAcks))
		}
	}
	c.Client().Close()
}
