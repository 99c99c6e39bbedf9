package connect

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/notify-dev/notify/streams"
)

// RoutedByValue is the placeholder in TopicTemplate replaced by the row's
// aggregatetype, as in Debezium's route.topic.replacement.
const RoutedByValue = "${routedByValue}"

// Defaults of the documented Config fields.
const (
	DefaultSlot             = "notify_outbox"
	DefaultPublication      = "notify_outbox"
	DefaultSchema           = "public"
	DefaultTable            = "outbox"
	DefaultTopicTemplate    = "outbox.event." + RoutedByValue
	DefaultMaxInFlight      = 10000
	DefaultLinger           = 5 * time.Millisecond
	DefaultStatusInterval   = time.Second
	DefaultReconnectMax     = 2 * time.Second
	DefaultStandbyRetry     = 2 * time.Second
	DefaultLagPollInterval  = 5 * time.Second
	DefaultCleanupBatch     = 2000
	DefaultKafkaBackoffMax  = 250 * time.Millisecond
	DefaultCompression      = "none"
	DefaultProducerClientID = "cdc"
)

// Config configures a Connector. Zero fields take the documented default.
type Config struct {
	// DatabaseURL is the Postgres connection string (URL or key=value). The
	// connector opens one replication connection (it adds
	// replication=database itself) and a pool of at most 2 connections for
	// setup, outbox cleanup and lag polling. Required.
	DatabaseURL string
	// Brokers are the Kafka seed brokers (host:port). Required.
	Brokers []string

	// Slot is the logical replication slot, created if missing. Slot names
	// are cluster-wide: two databases on one server need different slots.
	// Default "notify_outbox". Lower-case letters, digits and underscores.
	// What the connector confirmed on it is kept in the table
	// Schema.notify_cdc_slots, created on the first Start (the role needs
	// CREATE on Schema then, or create the table beforehand), so that a
	// lost or recreated slot is noticed and the outbox re-sent (package doc,
	// "A lost slot").
	Slot string
	// Publication is the publication on the outbox table, created if
	// missing with publish = 'insert'. Default "notify_outbox".
	Publication string
	// Schema and Table name the outbox table. Defaults "public", "outbox".
	Schema string
	Table  string

	// TopicTemplate names a row's topic; RoutedByValue ("${routedByValue}")
	// is replaced by its aggregatetype. Default "outbox.event.${routedByValue}";
	// tests use streams.Topics.RouteTemplate() to add their prefix.
	TopicTemplate string
	// StringPayload writes the value as Debezium does by default: the
	// payload JSON as a JSON string literal. Default false: an object
	// payload as compact JSON itself (Debezium's
	// table.expand.json.payload=true), which is what notify's consumers and
	// the DESIGN.md contract use; see the package doc for the details.
	StringPayload bool
	// PlainKey writes aggregateid as the bare key bytes. Default false: the
	// key is JSON-encoded with quotes, as Debezium's JsonConverter writes it.
	PlainKey bool

	// MaxInFlight bounds the records handed to the producer and not yet
	// acknowledged by Kafka. When it is reached the connector stops reading
	// WAL (the slot holds it) until acknowledgements come back. Default 10000.
	MaxInFlight int
	// Linger is how long the producer waits to fill a batch. Default 5ms.
	Linger time.Duration
	// Compression is the producer's batch compression: "none" or "lz4".
	// Default "none": on one machine the CPU costs more than the bytes save
	// (see notify bench cdc).
	Compression string
	// KafkaBackoffMax caps the producer's retry and reconnect backoff, which
	// bounds how long after a broker returns the first record flows.
	// Default 250ms.
	KafkaBackoffMax time.Duration
	// ClientID suffixes the Kafka client id ("notify-<ClientID>"). Default "cdc".
	ClientID string

	// StatusInterval is how often a standby status update is sent even when
	// the server asks for none (well under wal_sender_timeout, 60s by
	// default). Default 1s.
	StatusInterval time.Duration
	// ReconnectMax caps the exponential backoff between replication
	// connection attempts after an error. Default 2s.
	ReconnectMax time.Duration
	// StandbyRetry is how often a connector whose slot is in use by another
	// process tries to take it over. Default 2s.
	StandbyRetry time.Duration
	// LagPollInterval is how often slot lag in bytes is read from
	// pg_replication_slots. Default 5s.
	LagPollInterval time.Duration

	// KeepRows disables deleting published rows from the outbox. Default
	// false: rows are deleted, in batches of up to CleanupBatch, once Kafka
	// acknowledged every record of their transaction.
	KeepRows bool
	// CleanupBatch is the most row ids one DELETE carries. Default 2000.
	CleanupBatch int

	// Logger receives the connector's logs. Default slog.Default().
	Logger *slog.Logger
	// Metrics is the set the connector registers its metrics in. Default:
	// a new set, returned by Connector.Metrics; the caller decides whether
	// to expose it (metrics.RegisterSet).
	Metrics *metrics.Set
	// ObserveLatency, when set, is called for every acknowledged record
	// with the time from its transaction's commit to Kafka's
	// acknowledgement. It runs on the producer's callback goroutine and
	// must be fast. Benchmarks use it; the latency histogram is recorded
	// regardless.
	ObserveLatency func(time.Duration)
	// ObserveReceive, when set, is called once per streamed transaction
	// with the time from its commit to its Begin message reaching the
	// connector: the part of ObserveLatency spent in Postgres.
	ObserveReceive func(time.Duration)
}

var slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// withDefaults returns a copy with every zero field set to its default.
func (c Config) withDefaults() Config {
	def := func(s *string, d string) {
		if *s == "" {
			*s = d
		}
	}
	def(&c.Slot, DefaultSlot)
	def(&c.Publication, DefaultPublication)
	def(&c.Schema, DefaultSchema)
	def(&c.Table, DefaultTable)
	def(&c.TopicTemplate, DefaultTopicTemplate)
	def(&c.Compression, DefaultCompression)
	def(&c.ClientID, DefaultProducerClientID)
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.KafkaBackoffMax == 0 {
		c.KafkaBackoffMax = DefaultKafkaBackoffMax
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStatusInterval
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = DefaultReconnectMax
	}
	if c.StandbyRetry == 0 {
		c.StandbyRetry = DefaultStandbyRetry
	}
	if c.LagPollInterval == 0 {
		c.LagPollInterval = DefaultLagPollInterval
	}
	if c.CleanupBatch == 0 {
		c.CleanupBatch = DefaultCleanupBatch
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Metrics == nil {
		c.Metrics = metrics.NewSet()
	}
	return c
}

// validate reports the first bad setting by name.
func (c Config) validate() error {
	if c.DatabaseURL == "" {
		return fmt.Errorf("connect: DatabaseURL is required")
	}
	if _, err := pgconn.ParseConfig(c.DatabaseURL); err != nil {
		return fmt.Errorf("connect: DatabaseURL: %w", err)
	}
	if len(c.Brokers) == 0 {
		return fmt.Errorf("connect: Brokers is required")
	}
	if _, err := streams.ParseBrokers(strings.Join(c.Brokers, ",")); err != nil {
		return fmt.Errorf("connect: Brokers: %w", err)
	}
	// The slot name is spliced into START_REPLICATION (a replication
	// command takes no parameters), so only Postgres' own slot alphabet is
	// accepted.
	if !slotNameRE.MatchString(c.Slot) {
		return fmt.Errorf("connect: Slot %q must be 1-63 lower-case letters, digits or underscores", c.Slot)
	}
	// The publication name travels inside a quoted plugin argument.
	if !slotNameRE.MatchString(c.Publication) {
		return fmt.Errorf("connect: Publication %q must be 1-63 lower-case letters, digits or underscores", c.Publication)
	}
	for _, n := range []struct{ name, v string }{{"Schema", c.Schema}, {"Table", c.Table}} {
		if n.v == "" || len(n.v) > 63 || strings.ContainsRune(n.v, 0) {
			return fmt.Errorf("connect: %s %q is not a valid Postgres identifier", n.name, n.v)
		}
	}
	if c.TopicTemplate == "" || strings.ContainsAny(c.TopicTemplate, " /\\") {
		return fmt.Errorf("connect: TopicTemplate %q is empty or contains characters Kafka does not allow", c.TopicTemplate)
	}
	switch {
	case c.MaxInFlight < 1:
		return fmt.Errorf("connect: MaxInFlight must be positive, got %d", c.MaxInFlight)
	case c.Linger < 0 || c.Linger > time.Second:
		return fmt.Errorf("connect: Linger must be between 0 and 1s, got %s", c.Linger)
	case c.KafkaBackoffMax < 10*time.Millisecond:
		return fmt.Errorf("connect: KafkaBackoffMax must be at least 10ms, got %s", c.KafkaBackoffMax)
	case c.StatusInterval < 10*time.Millisecond || c.StatusInterval > 30*time.Second:
		return fmt.Errorf("connect: StatusInterval must be between 10ms and 30s (wal_sender_timeout is 60s by default), got %s", c.StatusInterval)
	case c.ReconnectMax < 10*time.Millisecond:
		return fmt.Errorf("connect: ReconnectMax must be at least 10ms, got %s", c.ReconnectMax)
	case c.StandbyRetry < 10*time.Millisecond:
		return fmt.Errorf("connect: StandbyRetry must be at least 10ms, got %s", c.StandbyRetry)
	case c.LagPollInterval < 10*time.Millisecond:
		return fmt.Errorf("connect: LagPollInterval must be at least 10ms, got %s", c.LagPollInterval)
	case c.CleanupBatch < 1 || c.CleanupBatch > 100000:
		return fmt.Errorf("connect: CleanupBatch must be between 1 and 100000, got %d", c.CleanupBatch)
	}
	switch c.Compression {
	case "none", "lz4":
	default:
		return fmt.Errorf("connect: Compression must be \"none\" or \"lz4\", got %q", c.Compression)
	}
	return nil
}
