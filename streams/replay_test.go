package streams_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
	"github.com/notify-dev/notify/streams/streamstest"
)

func TestDeadLetterRoundTrip(t *testing.T) {
	t.Parallel()
	src := &kgo.Record{
		Topic: "outbox.event.push", Partition: 7, Offset: 42,
		Key: []byte(`"ev"`), Value: []byte("{not json"),
		Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("row-1")}, {Key: "eventType", Value: []byte("PushCommand")}, {Key: "dlq.reason", Value: []byte("stale")}},
	}
	now := time.Date(2025, 3, 1, 12, 0, 0, 123, time.UTC)
	d := streams.NewDeadLetter(src, streams.ReasonMalformed, errors.New("bad json"), 0, now)
	r := d.Record("notify.push.dlq")
	r.Partition, r.Offset = 0, 9
	got, err := streams.DecodeDeadLetter(r)
	if err != nil {
		t.Fatal(err)
	}
	if got.Reason != streams.ReasonMalformed || got.Error != "bad json" || got.Topic != src.Topic || got.Partition != 7 || got.Offset != 42 || !got.Time.Equal(now) {
		t.Fatalf("decoded %+v", got)
	}
	if string(got.Value) != "{not json" || string(got.Key) != `"ev"` || got.Header("id") != "row-1" || got.Header("dlq.reason") != "" || len(got.Headers) != 2 {
		t.Fatalf("payload or headers not preserved: %+v", got)
	}
	if got.DLQPartition != 0 || got.DLQOffset != 9 {
		t.Fatalf("dlq coordinates %d@%d", got.DLQPartition, got.DLQOffset)
	}
	if _, err := streams.DecodeDeadLetter(&kgo.Record{Value: []byte("x")}); !errors.Is(err, streams.ErrMalformed) {
		t.Fatalf("record without dlq headers: %v", err)
	}
}

func TestDeadLetterScanResumesFromGroup(t *testing.T) {
	t.Parallel()
	topics := streamstest.NewTopics(t)
	cl := streamstest.Client(t)
	adm := streamstest.Admin(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := 0; i < 5; i++ {
		src := &kgo.Record{Topic: topics.Push(), Value: []byte(fmt.Sprint(i))}
		if err := streams.ProduceDeadLetter(ctx, cl, topics.DLQ(), streams.NewDeadLetter(src, streams.ReasonMalformed, errors.New("x"), 0, time.Now())); err != nil {
			t.Fatal(err)
		}
	}
	group := topics.Group("dlq-redrive")
	scan := streams.DeadLetterScan{Topic: topics.DLQ(), Group: group}
	var seen []string
	parts, err := scan.Scan(ctx, cl, func(d streams.DeadLetter, derr error) error {
		if derr != nil {
			return derr
		}
		seen = append(seen, string(d.Value))
		if len(seen) == 3 {
			return errStop
		}
		return nil
	})
	if !errors.Is(err, errStop) || len(seen) != 3 || len(parts) != 1 || parts[0].End != 5 {
		t.Fatalf("first scan: err %v seen %v parts %+v", err, seen, parts)
	}
	if err := streams.CommitGroupOffsets(ctx, adm, group, topics.DLQ(), map[int32]int64{0: 3}); err != nil {
		t.Fatal(err)
	}
	seen = nil
	if _, err := scan.Scan(ctx, cl, func(d streams.DeadLetter, _ error) error { seen = append(seen, string(d.Value)); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seen) != "[3 4]" {
		t.Fatalf("resumed scan saw %v, want [3 4]", seen)
	}
}

var errStop = errors.New("stop")

func TestReplayResetsOffsetsOnlyWithoutMembers(t *testing.T) {
	t.Parallel()
	layout := streams.DefaultTopics()
	layout.PushPartitions = 3
	topics := streamstest.NewTopicsWith(t, layout)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prod := streamstest.Client(t, kgo.RecordPartitioner(kgo.ManualPartitioner()))
	adm := streamstest.Admin(t)
	for i := 0; i < 9; i++ {
		r := &kgo.Record{Topic: topics.Push(), Partition: int32(i % 3), Value: []byte("v")}
		if err := prod.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, topics.Push())
	if err != nil {
		t.Fatal(err)
	}
	group := topics.Group(streams.GroupPush)
	next := map[int32]int64{}
	for p, o := range ends[topics.Push()] {
		next[p] = o.Offset
	}
	if err := streams.CommitGroupOffsets(ctx, adm, group, topics.Push(), next); err != nil {
		t.Fatal(err)
	}

	plan, err := streams.PlanReplay(ctx, adm, group, topics.Push(), streams.ReplayTarget{Earliest: true}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Partitions) != 3 || plan.Records() != 9 {
		t.Fatalf("plan %+v records %d, want 3 partitions and 9 records", plan, plan.Records())
	}
	for _, r := range plan.Partitions {
		if r.New != 0 || r.Old != r.End {
			t.Fatalf("partition %+v: want old = end and new = 0", r)
		}
	}
	// A future time moves nothing back: every partition goes to its end.
	future, err := streams.PlanReplay(ctx, adm, group, topics.Push(), streams.ReplayTarget{Time: time.Now().Add(time.Hour)}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if future.Records() != 0 {
		t.Fatalf("future plan replays %d records", future.Records())
	}
	// By duration: an hour back covers everything just produced.
	back, err := streams.PlanReplay(ctx, adm, group, topics.Push(), streams.ReplayTarget{ByDuration: time.Hour}, time.Now())
	if err != nil || back.Records() != 9 {
		t.Fatalf("by-duration plan %+v err %v", back, err)
	}

	// A live member makes both planning and applying refuse.
	member := streamstest.Client(t, kgo.ConsumerGroup(group), kgo.ConsumeTopics(topics.Push()), kgo.DisableAutoCommit())
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		member.PollRecords(pctx, 1)
		pcancel()
		_, err = streams.PlanReplay(ctx, adm, group, topics.Push(), streams.ReplayTarget{Earliest: true}, time.Now())
		if errors.Is(err, streams.ErrGroupActive) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("PlanReplay with a live member: %v, want ErrGroupActive", err)
		}
	}
	if err := streams.ApplyReplay(ctx, adm, plan); !errors.Is(err, streams.ErrGroupActive) {
		t.Fatalf("ApplyReplay with a live member: %v, want ErrGroupActive", err)
	}
	member.LeaveGroup()
	member.Close()

	if err := streams.ApplyReplay(ctx, adm, plan); err != nil {
		t.Fatal(err)
	}
	after, err := adm.FetchOffsetsForTopics(ctx, group, topics.Push())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range plan.Partitions {
		o, _ := after.Lookup(topics.Push(), r.Partition)
		if o.At != 0 {
			t.Fatalf("partition %d committed at %d after replay, want 0", r.Partition, o.At)
		}
	}
}
