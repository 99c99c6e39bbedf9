package api

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/notify-dev/notify/schema/schematest"
)

// insertKeys stores n records for fresh users named prefix-0…prefix-(n-1),
// created at createdAt.
func insertKeys(t *testing.T, pool *pgxpool.Pool, prefix string, n int, createdAt time.Time) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `
		INSERT INTO api_idempotency (user_id, key, request_hash, status, response, created_at)
		SELECT gen_random_uuid(), $1 || '-' || i, '\x00', 201, '{}', $2
		FROM generate_series(0, $3 - 1) AS i`, prefix, createdAt, n)
	if err != nil {
		t.Fatal(err)
	}
}

func storedKeys(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, _ := pool.Query(context.Background(), `SELECT key FROM api_idempotency ORDER BY key`)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

// One sweep deletes exactly the records older than the TTL, in more than
// one batch, and keeps the rest — including one exactly TTL old.
func TestSweepIdempotencyKeysDeletesOnlyExpired(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	srv := newTestServer(t, db.Pool, Config{IdempotencyTTL: time.Hour, IdempotencySweepBatch: 3})
	now := time.Now().Truncate(time.Microsecond)
	insertKeys(t, db.Pool, "old-a", 4, now.Add(-25*time.Hour))
	insertKeys(t, db.Pool, "old-b", 3, now.Add(-time.Hour-time.Microsecond))
	insertKeys(t, db.Pool, "edge", 1, now.Add(-time.Hour))
	insertKeys(t, db.Pool, "fresh", 4, now.Add(-time.Minute))

	n, err := srv.sweepIdempotencyKeys(context.Background(), now)
	if err != nil {
		t.Fatal(err)
	}
	// 7 expired with a batch of 3: batches of 3, 3 and 1.
	if n != 7 || srv.m.keysExpired.Get() != 7 {
		t.Fatalf("swept %d (metric %d), want 7", n, srv.m.keysExpired.Get())
	}
	want := []string{"edge-0", "fresh-0", "fresh-1", "fresh-2", "fresh-3"}
	if got := storedKeys(t, db.Pool); !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}

	// Exactly a batch expired: the loop runs one more, empty, DELETE.
	insertKeys(t, db.Pool, "old-c", 3, now.Add(-2*time.Hour))
	if n, err := srv.sweepIdempotencyKeys(context.Background(), now); err != nil || n != 3 {
		t.Fatalf("second sweep: %d, %v; want 3", n, err)
	}
	if n, err := srv.sweepIdempotencyKeys(context.Background(), now); err != nil || n != 0 {
		t.Fatalf("third sweep: %d, %v; want 0", n, err)
	}
	if got := storedKeys(t, db.Pool); !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
}

// A retry whose record expired and was swept is a new request: 201 without
// Idempotent-Replayed, a second event, and a new record for the key.
func TestPublishAfterKeyExpiredIsNewRequest(t *testing.T) {
	t.Parallel()
	e := newTestEnv(t)
	body := `{"title":"Quiz","body":"b"}`
	first := e.publish(body, "key-1")
	if first.status != http.StatusCreated {
		t.Fatalf("publish: %d %s", first.status, first.body)
	}
	if r := e.publish(body, "key-1"); r.status != http.StatusCreated || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("retry within TTL: %d %v %s, want a replay", r.status, r.header, r.body)
	}

	e.exec(`UPDATE api_idempotency SET created_at = created_at - $1::interval`, DefaultIdempotencyTTL+time.Minute)
	if n, err := e.srv.sweepIdempotencyKeys(context.Background(), time.Now()); err != nil || n != 1 {
		t.Fatalf("sweep: %d, %v; want 1", n, err)
	}

	again := e.publish(body, "key-1")
	if again.status != http.StatusCreated || again.header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("retry after expiry: %d %v %s, want a new 201", again.status, again.header, again.body)
	}
	var a, b PublishResponse
	first.decode(t, &a)
	again.decode(t, &b)
	if a.EventID == b.EventID || a.MaterialID == b.MaterialID {
		t.Fatalf("retry after expiry answered the first event: %s and %s", first.body, again.body)
	}
	if m, o, k := e.count("materials"), e.count("outbox"), e.count("api_idempotency"); m != 2 || o != 2 || k != 1 {
		t.Fatalf("%d materials, %d events, %d keys; want 2, 2, 1", m, o, k)
	}
	// The new record replays the new event.
	if r := e.publish(body, "key-1"); r.header.Get("Idempotent-Replayed") != "true" || string(r.body) != string(again.body) {
		t.Fatalf("retry of the new request: %v %s, want a replay of %s", r.header, r.body, again.body)
	}
}

// Start runs the sweeper, Stop stops it and waits for it.
func TestIdempotencySweeperFollowsServerLifecycle(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	insertKeys(t, db.Pool, "old", 5, time.Now().Add(-48*time.Hour))
	insertKeys(t, db.Pool, "fresh", 2, time.Now())
	srv := newTestServer(t, db.Pool, Config{Addr: "127.0.0.1:0", IdempotencySweepInterval: time.Millisecond, IdempotencySweepBatch: 2})
	if srv.sweeper != nil {
		t.Fatal("New started the sweeper")
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Several sweeps: the first at Start, the rest on ticks.
	for srv.m.sweeps.Get() < 3 {
		time.Sleep(time.Millisecond)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-srv.sweeper.done:
	default:
		t.Fatal("Stop returned before the sweeper exited")
	}
	if got, want := storedKeys(t, db.Pool), []string{"fresh-0", "fresh-1"}; !slices.Equal(got, want) {
		t.Fatalf("kept %v, want %v", got, want)
	}
	if n := srv.m.keysExpired.Get(); n != 5 {
		t.Fatalf("expired metric %d, want 5", n)
	}
	// Nothing sweeps after Stop: a record that expires now stays.
	sweeps := srv.m.sweeps.Get()
	insertKeys(t, db.Pool, "late", 1, time.Now().Add(-48*time.Hour))
	time.Sleep(50 * time.Millisecond) // 50 intervals
	if n := srv.m.sweeps.Get(); n != sweeps {
		t.Fatalf("%d sweeps after Stop", n-sweeps)
	}
	if n := len(storedKeys(t, db.Pool)); n != 3 {
		t.Fatalf("%d records, want 3: something swept after Stop", n)
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}

func TestIdempotencySweeperDisabled(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	srv := newTestServer(t, db.Pool, Config{Addr: "127.0.0.1:0", IdempotencySweepInterval: -1})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if srv.sweeper != nil {
		t.Fatal("a negative interval started the sweeper")
	}
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A failing sweep logs a warning and is retried at the next tick; the
// server keeps serving.
func TestIdempotencySweepFailureWarnsAndRetries(t *testing.T) {
	t.Parallel()
	db := schematest.NewDatabase(t)
	pool, err := pgxpool.New(context.Background(), db.URL)
	if err != nil {
		t.Fatal(err)
	}
	pool.Close() // every statement fails, like a database that is gone
	var logs strings.Builder
	var mu sync.Mutex
	srv := newTestServer(t, pool, Config{Addr: "127.0.0.1:0", IdempotencySweepInterval: time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(lockedWriter{&mu, &logs}, nil))})
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for srv.m.sweepErrors.Get() < 2 {
		time.Sleep(time.Millisecond)
	}
	res, err := http.Get("http://" + srv.Addr() + "/healthz")
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("healthz after failed sweeps: %v %v", res, err)
	}
	res.Body.Close()
	if err := srv.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var warned bool
	for line := range strings.Lines(logs.String()) {
		var rec struct{ Level, Msg, Err string }
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Level == "WARN" &&
			strings.HasPrefix(rec.Msg, "expiring idempotency keys failed") && strings.Contains(rec.Err, "delete idempotency keys") {
			warned = true
		}
	}
	if !warned {
		t.Fatalf("no warning for the failed sweep in:\n%s", logs.String())
	}
}

func TestIdempotencyConfigValidation(t *testing.T) {
	t.Parallel()
	for want, cfg := range map[string]Config{
		"idempotency TTL":         {IdempotencyTTL: -time.Hour},
		"idempotency sweep batch": {IdempotencySweepBatch: -1},
		"sweep batch 100001":      {IdempotencySweepBatch: 100_001},
	} {
		cfg.Key = mustKey(t, string(testSecret))
		vapid, _ := ParseVAPIDPrivateKey(DevVAPIDPrivateKey)
		cfg.VAPIDPublicKey = vapid.PublicKey()
		_, err := New(cfg, &pgxpool.Pool{})
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want an error naming %q", cfg, err, want)
		}
	}
	d := Config{}.withDefaults()
	if d.IdempotencyTTL != 24*time.Hour || d.IdempotencySweepInterval != 10*time.Minute || d.IdempotencySweepBatch != 1000 {
		t.Fatalf("defaults %s %s %d", d.IdempotencyTTL, d.IdempotencySweepInterval, d.IdempotencySweepBatch)
	}
}
