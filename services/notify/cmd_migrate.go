package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

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
	partFlag(&t.PushLanePartitions, "push-lane-partitions", "outbox.event.push.lane")
	partFlag(&t.DLQPartitions, "dlq-partitions", "notify.push.dlq")
	partFlag(&t.NotificationPartitions, "notification-partitions", "outbox.event.notification")
	partFlag(&t.LifecyclePartitions, "lifecycle-partitions", "outbox.event.lifecycle")
	rf := fs.Int("replication-factor", 0, "replication factor of the topics created (default min(3, brokers in the cluster); at most the broker count)")
	minISR := fs.Int("min-insync-replicas", 0, "min.insync.replicas of the topics created (default replication factor − 1, at least 1)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	t.Prefix = inf.topicPrefix
	if *rf < 0 || *rf > 32767 {
		return usageError{msg: fmt.Sprintf("--replication-factor must be ≥ 1 (0 or absent: min(3, brokers)), got %d", *rf)}
	}
	if *minISR < 0 {
		return usageError{msg: fmt.Sprintf("--min-insync-replicas must be ≥ 1 (0 or absent: replication factor − 1), got %d", *minISR)}
	}
	t.ReplicationFactor, t.MinInsyncReplicas = int16(*rf), *minISR
	if *rf > 0 && *minISR > *rf {
		return usageError{msg: fmt.Sprintf("--min-insync-replicas %d exceeds --replication-factor %d: no write could ever succeed", *minISR, *rf)}
	}
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

	// Kafka's side is checked before the database is touched: a replication
	// the cluster cannot hold fails the whole command, not half of it.
	var adm *kadm.Client
	if !*noKafka {
		var cl *kgo.Client
		if cl, adm, err = inf.kafkaAdmin("migrate"); err != nil {
			return err
		}
		defer cl.Close()
		kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		n, err := streams.BrokerCount(kctx, adm)
		cancel()
		if err != nil {
			return fmt.Errorf("%w (%s)", err, kafkaHint(err, fmt.Sprintf("is Kafka up at %v? start it with: bash infra/local/up.sh, or pass --no-kafka", brokers)))
		}
		if err := replicationFits(t, n, brokers); err != nil {
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
		kctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out.Topics, err = streams.EnsureTopics(kctx, adm, t)
		var re *streams.ReplicationError
		if errors.As(err, &re) {
			// The cluster shrank since the check above.
			return replicationFits(t, re.Brokers, brokers)
		}
		if err != nil {
			return fmt.Errorf("%w (%s)", err, kafkaHint(err, fmt.Sprintf("is Kafka up at %v? start it with: bash infra/local/up.sh, or pass --no-kafka", brokers)))
		}
	}
	// Existing topics keep their replicas (changing them is a partition
	// reassignment); one that differs from what was asked fails the command
	// after everything is printed, so it is not mistaken for done.
	var mismatchErr error
	if m := streams.Mismatches(out.Topics); len(m) > 0 {
		mismatchErr = exitError{code: 1, msg: fmt.Sprintf("%d existing topic(s) differ from the replication asked for and were left as they are:\n  %s\nchange them with kafka-reassign-partitions / kafka-configs --alter, or create them afresh", len(m), strings.Join(m, "\n  "))}
	}
	if *asJSON {
		if out.Applied == nil {
			out.Applied = []schema.Applied{}
		}
		if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
			return err
		}
		return mismatchErr
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
		if r.Mismatch != "" {
			state = "exists, DIFFERS: " + r.Mismatch
		}
		fmt.Printf("kafka:    %-28s %3d partitions  RF %d  min ISR %d  %s\n", r.Topic, r.Partitions, r.ReplicationFactor, r.MinInsyncReplicas, state)
	}
	return mismatchErr
}

// replicationFits checks t's replication against a cluster of n brokers,
// naming the flag that asks too much and the broker count.
func replicationFits(t streams.Topics, n int, brokers []string) error {
	factor, minISR, err := t.Replication(n)
	if err == nil {
		return nil
	}
	var re *streams.ReplicationError
	switch {
	case errors.As(err, &re) && t.ReplicationFactor > 0:
		return usageError{msg: fmt.Sprintf("--replication-factor %d: the Kafka cluster at %s has %d broker(s); a topic cannot have more replicas than there are brokers (give at most %d, or leave the flag out for min(3, brokers))",
			factor, strings.Join(brokers, ","), n, n)}
	case errors.As(err, &re):
		return fmt.Errorf("the Kafka cluster at %s lists no brokers: %w", strings.Join(brokers, ","), err)
	default:
		return usageError{msg: fmt.Sprintf("--min-insync-replicas %d exceeds the replication factor %d (the cluster at %s has %d broker(s)): no write could ever succeed", minISR, factor, strings.Join(brokers, ","), n)}
	}
}
