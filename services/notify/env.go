package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
)

const (
	envDatabaseURL      = "NOTIFY_DATABASE_URL"
	envKafkaBrokers     = "NOTIFY_KAFKA_BROKERS"
	defaultDatabaseURL  = "postgres://postgres@127.0.0.1:55432/notify?sslmode=disable"
	defaultKafkaBrokers = "127.0.0.1:19092"
)

// envOr returns the environment variable or def when it is unset or empty.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// infraFlags are the connection settings every command shares. Flags
// override NOTIFY_* variables, which override the local defaults.
type infraFlags struct {
	databaseURL string
	brokers     string
	topicPrefix string
}

func (f *infraFlags) register(fs *flag.FlagSet, kafka bool) {
	fs.StringVar(&f.databaseURL, "database-url", envOr(envDatabaseURL, defaultDatabaseURL), "Postgres URL ("+envDatabaseURL+")")
	if kafka {
		fs.StringVar(&f.brokers, "kafka-brokers", envOr(envKafkaBrokers, defaultKafkaBrokers), "comma-separated Kafka brokers ("+envKafkaBrokers+")")
		fs.StringVar(&f.topicPrefix, "topic-prefix", os.Getenv("NOTIFY_TOPIC_PREFIX"), "prefix for every topic and group name, for isolated test runs (NOTIFY_TOPIC_PREFIX)")
	}
}

// poolConfig validates the database URL, naming the setting when it is bad.
func (f *infraFlags) poolConfig() (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(f.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("invalid %s / --database-url: %w", envDatabaseURL, err)
	}
	return cfg, nil
}

// connConfig validates the database URL for a single connection.
func (f *infraFlags) connConfig() (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(f.databaseURL)
	if err != nil {
		return nil, fmt.Errorf("invalid %s / --database-url: %w", envDatabaseURL, err)
	}
	return cfg, nil
}

// pool opens and pings a pool; the error says what to do when Postgres is
// not there.
func (f *infraFlags) pool(ctx context.Context) (*pgxpool.Pool, error) {
	cfg, err := f.poolConfig()
	if err != nil {
		return nil, err
	}
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to Postgres: %w", err)
	}
	if err := p.Ping(ctx); err != nil {
		p.Close()
		return nil, fmt.Errorf("connect to Postgres at %s: %w (is it running? start it with: bash infra/local/up.sh)", redactURL(f.databaseURL), err)
	}
	return p, nil
}

// brokerList validates the broker setting, and the NOTIFY_KAFKA_TLS_* and
// NOTIFY_KAFKA_SASL_* ones, which from then on apply to every Kafka client
// of the process (streams.UseSecurity): every path to Kafka passes here
// first, so a bad one fails the start naming the setting.
func (f *infraFlags) brokerList() ([]string, error) {
	b, err := streams.ParseBrokers(f.brokers)
	if err != nil {
		return nil, fmt.Errorf("invalid %s / --kafka-brokers: %w", envKafkaBrokers, err)
	}
	sec, err := streams.SecurityFromEnv(os.Getenv)
	if err != nil {
		return nil, err
	}
	streams.UseSecurity(sec)
	return b, nil
}

// topics returns the topic layout with the configured prefix.
func (f *infraFlags) topics() streams.Topics {
	return streams.DefaultTopics().WithPrefix(f.topicPrefix)
}

// kafkaAdmin opens a client and admin for one-shot administrative work.
func (f *infraFlags) kafkaAdmin(component string) (*kgo.Client, *kadm.Client, error) {
	brokers, err := f.brokerList()
	if err != nil {
		return nil, nil, err
	}
	cl, err := kgo.NewClient(streams.ClientOpts(brokers, component)...)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka client: %w", err)
	}
	return cl, kadm.NewClient(cl), nil
}

// redactURL hides a password in a connection URL before it is printed.
func redactURL(u string) string {
	cfg, err := pgx.ParseConfig(u)
	if err != nil {
		return "(unparseable URL)"
	}
	return fmt.Sprintf("%s@%s:%d/%s", cfg.User, cfg.Host, cfg.Port, cfg.Database)
}
