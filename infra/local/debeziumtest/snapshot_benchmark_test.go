package debeziumtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/infra/local/debeziumtest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/streams/streamstest"
)

// BenchmarkSnapshotUsers measures Debezium's initial snapshot of a
// platform's users table of 100k rows, as the roster consumer would first
// meet it: from the worker's exec to the connector RUNNING (startup), and
// from there to the last snapshot record read from Kafka (snapshot).
//
//	go test -run '^$' -bench SnapshotUsers -benchtime 1x ./infra/local/debeziumtest
func BenchmarkSnapshotUsers(b *testing.B) {
	const rows = 100_000
	for _, schemas := range []bool{false, true} {
		b.Run(fmt.Sprintf("schemas.enable=%v", schemas), func(b *testing.B) {
			var startup, snapshot time.Duration
			for i := 0; i < b.N; i++ {
				s, n := snapshotOnce(b, rows, schemas)
				startup += s
				snapshot += n
			}
			b.ReportMetric(startup.Seconds()/float64(b.N), "s-startup/op")
			b.ReportMetric(snapshot.Seconds()/float64(b.N), "s-snapshot/op")
			b.ReportMetric(float64(rows)*float64(b.N)/snapshot.Seconds(), "rows/s")
		})
	}
}

func snapshotOnce(b *testing.B, rows int, schemas bool) (startup, snapshot time.Duration) {
	b.StopTimer()
	db := schematest.NewEmptyDatabase(b)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE users (id bigint PRIMARY KEY, full_name text, lang text, tz text)`); err != nil {
		b.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO users SELECT g, 'User ' || g, 'en', 'Europe/Berlin' FROM generate_series(1, $1::int) g`, rows); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	c := debeziumtest.Start(b, debeziumtest.Config{
		Database:      db.Name,
		Tables:        []string{"public.users"},
		TopicPrefix:   strings.TrimSuffix(streamstest.Prefix(), "."),
		SchemasEnable: schemas,
	})
	t0 := time.Now()
	cl := streamstest.Client(b, kgo.ConsumeTopics(c.Topic("public.users")),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxBytes(64<<20))
	n := 0
	var last *kgo.Record
	for n < rows {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			b.Fatalf("%d of %d snapshot records within the deadline", n, rows)
		}
		fs.EachRecord(func(r *kgo.Record) { n++; last = r })
	}
	snapshot = time.Since(t0)
	b.StopTimer()
	// The last row read must be the snapshot's last record: anything else
	// means the count above measured something other than the snapshot.
	var v struct {
		Payload struct {
			Op     string `json:"op"`
			Source struct {
				Snapshot string `json:"snapshot"`
			} `json:"source"`
		} `json:"payload"`
		Op     string `json:"op"`
		Source struct {
			Snapshot string `json:"snapshot"`
		} `json:"source"`
	}
	if err := json.Unmarshal(last.Value, &v); err != nil {
		b.Fatal(err)
	}
	op, snap := v.Op, v.Source.Snapshot
	if schemas {
		op, snap = v.Payload.Op, v.Payload.Source.Snapshot
	}
	if n != rows || op != "r" || snap != "last" {
		b.Fatalf("read %d records, the last op %q snapshot %q; want %d, r, last", n, op, snap, rows)
	}
	b.Logf("%d rows: RUNNING after %s, snapshot read in %s", rows, c.Startup.Round(100*time.Millisecond), snapshot.Round(100*time.Millisecond))
	return c.Startup, snapshot
}
