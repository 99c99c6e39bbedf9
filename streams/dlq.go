package streams

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// Dead letters on Topics.DLQ() follow the Kafka Connect convention: the key
// and value are the failed record's bytes, unchanged (so a record that is not
// even JSON survives intact), its headers are kept, and dlq.* headers say
// why it failed and where it came from. Anything that reads Kafka headers can
// inspect them; nothing needs a notify-specific envelope decoder.
const (
	HeaderDLQReason    = "dlq.reason"    // one of the Reason* constants
	HeaderDLQError     = "dlq.error"     // human-readable cause
	HeaderDLQAttempt   = "dlq.attempt"   // send attempts made (0 for malformed)
	HeaderDLQTime      = "dlq.time"      // RFC 3339 (nanoseconds) when dead-lettered
	HeaderDLQTopic     = "dlq.topic"     // source topic
	HeaderDLQPartition = "dlq.partition" // source partition
	HeaderDLQOffset    = "dlq.offset"    // source offset
)

// Dead-letter reasons.
const (
	// ReasonMalformed: the record can never be processed (bad JSON, unknown
	// version, missing field). The value is the record as received.
	ReasonMalformed = "malformed"
	// ReasonMaxAttempts: some subscriptions still failed with a retryable
	// error after the last allowed attempt. The value is a PushCommand
	// naming exactly those subscriptions (SubscriptionIDs) with Attempt set
	// to the last attempt made, so a redrive can re-queue just them.
	ReasonMaxAttempts = "max_attempts"
)

// DeadLetter is one record on the dead-letter topic.
type DeadLetter struct {
	Reason  string    `json:"reason"`
	Error   string    `json:"error"`
	Attempt int       `json:"attempt"`
	Time    time.Time `json:"time"`
	// Source coordinates of the record that failed.
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	// Key and Value are the dead-lettered record's bytes.
	Key   []byte `json:"-"`
	Value []byte `json:"-"`
	// Headers are the source record's headers (dlq.* excluded).
	Headers []kgo.RecordHeader `json:"-"`

	// DLQPartition and DLQOffset locate this dead letter on the DLQ topic;
	// set by DecodeDeadLetter.
	DLQPartition int32 `json:"dlq_partition"`
	DLQOffset    int64 `json:"dlq_offset"`
}

// NewDeadLetter describes src as failed for reason. Value defaults to src's
// value; callers dead-lettering a narrower command replace it.
func NewDeadLetter(src *kgo.Record, reason string, cause error, attempt int, now time.Time) DeadLetter {
	d := DeadLetter{
		Reason:    reason,
		Attempt:   attempt,
		Time:      now.UTC(),
		Topic:     src.Topic,
		Partition: src.Partition,
		Offset:    src.Offset,
		Key:       src.Key,
		Value:     src.Value,
	}
	if cause != nil {
		d.Error = cause.Error()
	}
	for _, h := range src.Headers {
		if !strings.HasPrefix(h.Key, "dlq.") {
			d.Headers = append(d.Headers, h)
		}
	}
	return d
}

// Header returns the value of the source record's header key, "" if absent.
func (d DeadLetter) Header(key string) string {
	for _, h := range d.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// Record builds the Kafka record to produce to the DLQ topic. The partition
// is left to the producer's partitioner (keyed by the original key).
func (d DeadLetter) Record(dlqTopic string) *kgo.Record {
	hs := make([]kgo.RecordHeader, 0, len(d.Headers)+7)
	hs = append(hs, d.Headers...)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderDLQReason, Value: []byte(d.Reason)},
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(d.Error)},
		kgo.RecordHeader{Key: HeaderDLQAttempt, Value: []byte(strconv.Itoa(d.Attempt))},
		kgo.RecordHeader{Key: HeaderDLQTime, Value: []byte(d.Time.UTC().Format(time.RFC3339Nano))},
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(d.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: []byte(strconv.Itoa(int(d.Partition)))},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: []byte(strconv.FormatInt(d.Offset, 10))},
	)
	return &kgo.Record{Topic: dlqTopic, Key: d.Key, Value: d.Value, Headers: hs}
}

// DecodeDeadLetter reads a record from the DLQ topic. A record without a
// dlq.reason header was not written by notify; it is reported as malformed
// so tools can show and skip it.
func DecodeDeadLetter(r *kgo.Record) (DeadLetter, error) {
	d := DeadLetter{Key: r.Key, Value: r.Value, DLQPartition: r.Partition, DLQOffset: r.Offset, Partition: -1, Offset: -1}
	var have bool
	var errs []string
	for _, h := range r.Headers {
		v := string(h.Value)
		switch h.Key {
		case HeaderDLQReason:
			d.Reason, have = v, true
		case HeaderDLQError:
			d.Error = v
		case HeaderDLQAttempt:
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, "attempt "+strconv.Quote(v))
			}
			d.Attempt = n
		case HeaderDLQTime:
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				errs = append(errs, "time "+strconv.Quote(v))
			}
			d.Time = t
		case HeaderDLQTopic:
			d.Topic = v
		case HeaderDLQPartition:
			n, err := strconv.ParseInt(v, 10, 32)
			if err != nil {
				errs = append(errs, "partition "+strconv.Quote(v))
			}
			d.Partition = int32(n)
		case HeaderDLQOffset:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				errs = append(errs, "offset "+strconv.Quote(v))
			}
			d.Offset = n
		default:
			d.Headers = append(d.Headers, h)
		}
	}
	if !have {
		return d, fmt.Errorf("%w: dead letter %d@%d has no %s header", ErrMalformed, r.Partition, r.Offset, HeaderDLQReason)
	}
	if len(errs) > 0 {
		return d, fmt.Errorf("%w: dead letter %d@%d has bad headers: %s", ErrMalformed, r.Partition, r.Offset, strings.Join(errs, ", "))
	}
	return d, nil
}

// ProduceDeadLetter writes d to the DLQ topic and waits for the broker's
// acknowledgement, so a caller can commit the source offset right after.
//
// It returns when ctx ends even if the broker has not answered: franz-go
// refuses to fail an idempotent record it has already sent (it cannot know
// whether the broker wrote it) and would wait for that broker however long
// it is down (see kgo.AllowIdempotentProduceCancellation), holding up a
// consumer's Stop past any timeout. Returning is safe: the source record
// stays uncommitted, so it is dead-lettered again by its next owner — a
// dead letter may be duplicated, never lost. The produce goroutine ends when
// the broker answers or the client is closed.
func ProduceDeadLetter(ctx context.Context, cl *kgo.Client, dlqTopic string, d DeadLetter) error {
	done := make(chan error, 1)
	go func() { done <- cl.ProduceSync(ctx, d.Record(dlqTopic)).FirstErr() }()
	var err error
	select {
	case err = <-done:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("produce dead letter for %s[%d]@%d: %w", d.Topic, d.Partition, d.Offset, err)
	}
	return nil
}

// DeadLetterScan reads a DLQ topic from a starting point up to the end it
// had when the scan began (records arriving later wait for the next scan).
type DeadLetterScan struct {
	// Topic is the DLQ topic. Required.
	Topic string
	// Group, when set, starts each partition at the group's committed
	// offset (the first record not yet handled) instead of the beginning.
	Group string
}

// ScannedPartition is where a scan of one partition started and ended.
type ScannedPartition struct {
	Partition int32
	Start     int64 // first offset read
	End       int64 // end offset at scan start: offsets < End were read
}

// Scan calls fn for every record in [start, end) of every partition, in
// offset order per partition. A fn error stops the scan and is returned.
// Undecodable records are passed to fn with the decode error so tools can
// show and skip them. It returns the partitions scanned.
func (s DeadLetterScan) Scan(ctx context.Context, cl *kgo.Client, fn func(d DeadLetter, decodeErr error) error) ([]ScannedPartition, error) {
	adm := kadm.NewClient(cl)
	starts, err := adm.ListStartOffsets(ctx, s.Topic)
	if err != nil {
		return nil, fmt.Errorf("list start offsets of %s: %w", s.Topic, err)
	}
	ends, err := adm.ListEndOffsets(ctx, s.Topic)
	if err != nil {
		return nil, fmt.Errorf("list end offsets of %s: %w", s.Topic, err)
	}
	if err := listedErr(ends, s.Topic); err != nil {
		return nil, err
	}
	var committed kadm.OffsetResponses
	if s.Group != "" {
		committed, err = adm.FetchOffsetsForTopics(ctx, s.Group, s.Topic)
		if err != nil {
			return nil, fmt.Errorf("fetch offsets of group %s: %w", s.Group, err)
		}
	}
	var parts []ScannedPartition
	consume := map[int32]kgo.Offset{}
	for p, end := range ends[s.Topic] {
		start := starts[s.Topic][p].Offset
		if s.Group != "" {
			if o, ok := committed.Lookup(s.Topic, p); ok && o.Err == nil && o.At >= 0 && o.At > start {
				start = o.At
			}
		}
		parts = append(parts, ScannedPartition{Partition: p, Start: start, End: end.Offset})
		if start < end.Offset {
			consume[p] = kgo.NewOffset().At(start)
		}
	}
	if len(consume) == 0 {
		return parts, nil
	}
	// A separate, group-less client: reading must never join or disturb
	// the group whose offsets we only look at.
	rd, err := kgo.NewClient(append(clientSeeds(cl),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{s.Topic: consume}),
	)...)
	if err != nil {
		return nil, fmt.Errorf("dlq reader: %w", err)
	}
	defer rd.Close()
	remaining := len(consume)
	endOf := map[int32]int64{}
	for _, sp := range parts {
		endOf[sp.Partition] = sp.End
	}
	done := map[int32]bool{}
	for remaining > 0 {
		fs := rd.PollFetches(ctx)
		if ctx.Err() != nil {
			return parts, ctx.Err()
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if ferr == nil && !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("fetch %s[%d]: %w", t, p, err)
			}
		})
		if ferr != nil {
			return parts, ferr
		}
		var stop error
		fs.EachRecord(func(r *kgo.Record) {
			if stop != nil || done[r.Partition] || r.Offset >= endOf[r.Partition] {
				return
			}
			d, derr := DecodeDeadLetter(r)
			if err := fn(d, derr); err != nil {
				stop = err
				return
			}
			if r.Offset+1 >= endOf[r.Partition] {
				done[r.Partition] = true
				remaining--
			}
		})
		if stop != nil {
			return parts, stop
		}
	}
	return parts, nil
}

// CommitGroupOffsets commits next offsets (the first record not yet handled)
// for a group that has no live members, as tools do for groups they drive
// without joining (DLQ redrive, replay).
func CommitGroupOffsets(ctx context.Context, adm *kadm.Client, group, topic string, next map[int32]int64) error {
	if len(next) == 0 {
		return nil
	}
	os := kadm.Offsets{}
	for p, o := range next {
		os.Add(kadm.Offset{Topic: topic, Partition: p, At: o, LeaderEpoch: -1})
	}
	resp, err := adm.CommitOffsets(ctx, group, os)
	if err != nil {
		return fmt.Errorf("commit offsets of group %s: %w", group, err)
	}
	if err := resp.Error(); err != nil {
		if errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.IllegalGeneration) || errors.Is(err, kerr.RebalanceInProgress) {
			return fmt.Errorf("commit offsets of group %s: %w (the group has live members; stop them first)", group, err)
		}
		return fmt.Errorf("commit offsets of group %s: %w", group, err)
	}
	return nil
}

func listedErr(l kadm.ListedOffsets, topic string) error {
	ps, ok := l[topic]
	if !ok {
		return fmt.Errorf("topic %s does not exist", topic)
	}
	for p, o := range ps {
		if o.Err != nil {
			if p < 0 {
				return fmt.Errorf("topic %s: %w", topic, o.Err)
			}
			return fmt.Errorf("topic %s[%d]: %w", topic, p, o.Err)
		}
	}
	return nil
}

// clientSeeds rebuilds the seed-broker and client-id options of cl, and
// its TLS and SASL, so a helper can open a second client on the same
// cluster.
func clientSeeds(cl *kgo.Client) []kgo.Opt {
	seeds := cl.OptValues(kgo.SeedBrokers)
	var out []kgo.Opt
	if len(seeds) == 1 {
		if s, ok := seeds[0].([]string); ok {
			out = append(out, kgo.SeedBrokers(s...))
		}
	}
	if id := cl.OptValue(kgo.ClientID); id != nil {
		if s, ok := id.(string); ok {
			out = append(out, kgo.ClientID(s))
		}
	}
	if c, ok := cl.OptValue(kgo.DialTLSConfig).(*tls.Config); ok && c != nil {
		out = append(out, kgo.DialTLSConfig(c.Clone()))
	}
	if ms, ok := cl.OptValue(kgo.SASL).([]sasl.Mechanism); ok && len(ms) > 0 {
		out = append(out, kgo.SASL(ms...))
	}
	return out
}
