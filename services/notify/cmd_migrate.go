package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/notify-dev/notify/schema"
	"github.com/notify-dev/notify/streams"
)

func init() {
	register(command{name: "migrate", summary: "apply pending schema migrations and create the Kafka topics", run: runMigrate})
}

func runMigrate(ctx context.Context, args []string) error {
	fs := newFlagSet("migrate", "[flags]")
	var inf infraFlags
	inf.register(fs, true)
	noKafka := fs.Bool("no-kafka", false, "apply database migrations only; skip topic creation")
	asJSON := fs.Bool("json", false, "print one JSON object instead of text")
	t := streams.DefaultTopics()
	partFlag := func(p *int32, name, what string) {
		fs.Func(name, fmt.Sprintf("partitions of %s (default %d)", what, *p), func(s string) error {
			var v int32
			if _, err := fmt.Sscan(s, &v); err != nil {
				return fmt.Errorf("not a number: %q", s)
			}
			*p = v
			return nil
		})
	}
	partFlag(&t.MaterialPartitions, "material-partitions", "outbox.event.material")
	partFlag(&t.FanoutPartitions, "fanout-partitions", "outbox.event.fanout")
	partFlag(&t.PushPartitions, "push-partitions", "outbox.event.push")
	partFlag(&t.DLQPartitions, "dlq-partitions", "notify.push.dlq")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	t.Prefix = inf.topicPrefix
	if err := t.Validate(); err != nil {
		return usageError{msg: err.Error()}
	}
	cfg, err := inf.connConfig()
	if err != nil {
		return err
	}
	var brokers []string
	if !*noKafka {
		if brokers, err = inf.brokerList(); err != nil {
			return err
		}
	}

	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	cancel()
	if err != nil {
		return fmt.Errorf("connect to Postgres at %s: %w (start it with: bash infra/local/up.sh)", redactURL(inf.databaseURL), err)
	}
	defer conn.Close(context.Background())
	applied, err := schema.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	out := struct {
		Applied []schema.Applied       `json:"applied"`
		Topics  []streams.EnsureResult `json:"topics,omitempty"`
	}{Applied: applied}
	if !*noKafka {
		cl, adm, err := inf.kafkaAdmin("migrate")
		if err != nil {
			return err
		}
		defer cl.Close()
		kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out.Topics, err = streams.EnsureTopics(kctx, adm, t)
		if err != nil {
			return fmt.Errorf("%w (is Kafka up at %v? start it with: bash infra/local/up.sh, or pass --no-kafka)", err, brokers)
		}
	}
	if *asJSON {
		if out.Applied == nil {
			out.Applied = []schema.Applied{}
		}
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	if len(applied) == 0 {
		fmt.Println("database: up to date, nothing to apply")
	}
	for _, a := range applied {
		fmt.Printf("database: applied %04d_%s (%s)\n", a.Version, a.Name, a.Duration.Round(time.Millisecond))
	}
	for _, r := range out.Topics {
		state := "exists"
		if r.Created {
			state = "created"
		}
		fmt.Printf("kafka:    %-28s %3d partitions  %s\n", r.Topic, r.Partitions, state)
	}
	return nil
}
