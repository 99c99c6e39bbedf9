package publishbench_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/notify-dev/notify/benchmarks/publishbench"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/auth"
)

// A small run against the in-process API seeds the empty database,
// publishes with both load generators, proves every returned event has
// its material, and removes what it published.
func TestRunSmall(t *testing.T) {
	for _, client := range []string{"lean", "stdlib"} {
		t.Run(client, func(t *testing.T) {
			db := schematest.NewDatabase(t)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := publishbench.Run(ctx, publishbench.Config{
				Pool: db.Pool, Database: db.Name, Client: client,
				Clients: 3, Requests: 40, Warmup: 5, Users: 50, IdempotencyKeys: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.Errors != 0 || !res.Seeded || res.Enrolled != 50 {
				t.Fatalf("errors %d, seeded %v, enrolled %d; want 0, true, 50", res.Errors, res.Seeded, res.Enrolled)
			}
			if res.EventsReturned != 45 || res.EventsVerified != 45 {
				t.Fatalf("%d events returned, %d verified; want 45 and 45", res.EventsReturned, res.EventsVerified)
			}
			if res.P50MS <= 0 || res.MaxMS < res.P99MS {
				t.Errorf("latencies not measured: %+v", res)
			}
			var left int
			if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM materials) + (SELECT count(*) FROM outbox) + (SELECT count(*) FROM api_idempotency)`).Scan(&left); err != nil {
				t.Fatal(err)
			}
			if left != 0 {
				t.Errorf("%d benchmark rows left behind", left)
			}
		})
	}
}

// The lean client speaks plain HTTP only: an https API is a usage error,
// as is an external API without the key its tokens are checked with.
func TestUsageErrors(t *testing.T) {
	db := schematest.NewDatabase(t)
	key, err := auth.NewKey(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]publishbench.Config{
		"lean client, https API": {Pool: db.Pool, Users: 5, Requests: 1, APIURL: "https://127.0.0.1:1", Key: key},
		"external API, no key":   {Pool: db.Pool, Users: 5, Requests: 1, APIURL: "http://127.0.0.1:1"},
		"unknown client":         {Pool: db.Pool, Users: 5, Requests: 1, Client: "curl"},
	} {
		if _, err := publishbench.Run(context.Background(), cfg); !errors.Is(err, publishbench.ErrUsage) {
			t.Errorf("%s: error %v, want ErrUsage", name, err)
		}
	}
}
