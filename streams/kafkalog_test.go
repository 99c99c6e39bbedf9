package streams_test

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/streams"
)

// TestKafkaLogger: franz-go's info chatter is not asked for, warnings and
// errors reach slog with component=kafka, and a repeated message is logged
// once per KafkaLogEvery.
func TestKafkaLogger(t *testing.T) {
	var b bytes.Buffer
	l := streams.KafkaLogger(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if l.Level() != kgo.LogLevelWarn {
		t.Fatalf("level %v, want warn", l.Level())
	}
	l.Log(kgo.LogLevelInfo, "heartbeat")
	for range 5 {
		l.Log(kgo.LogLevelWarn, "unable to dial", "broker", "1")
	}
	l.Log(kgo.LogLevelError, "produce failed", "err", "boom")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines, want the warning once and the error:\n%s", len(lines), b.String())
	}
	for i, want := range []string{`level=WARN msg="unable to dial" component=kafka broker=1`, `level=ERROR msg="produce failed" component=kafka err=boom`} {
		if !strings.Contains(lines[i], want) {
			t.Errorf("line %q does not contain %q", lines[i], want)
		}
	}

	quiet := streams.KafkaLogger(slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelError})))
	if quiet.Level() != kgo.LogLevelError {
		t.Fatalf("level under an error-only logger %v, want error", quiet.Level())
	}
}
