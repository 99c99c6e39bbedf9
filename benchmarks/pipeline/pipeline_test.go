package pipeline_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/notify-dev/notify/benchmarks/pipeline"
	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/internal/leaktest"
	"github.com/notify-dev/notify/schema/schematest"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/services/seed"
	"github.com/notify-dev/notify/streams/streamstest"
)

// TestMain removes the notify binary the tests share once all have run.
func TestMain(m *testing.M) {
	code := m.Run()
	notifytest.Cleanup()
	os.Exit(leaktest.Check(code))
}

// TestEndToEnd runs the real pipeline — every service a separate notify
// process on real Postgres and Kafka — for a small course, and checks the
// invariants the benchmark reports: every subscription delivered exactly
// once, nothing lost, every sampled message decrypts.
func TestEndToEnd(t *testing.T) {
	localtest.Short(t, "starts every service as a process")
	bin := notifytest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := pipeline.Run(ctx, pipeline.Config{
		Binary:      bin,
		DatabaseURL: schematest.ServerURL(),
		Brokers:     streamstest.Brokers(t),
		Users:       3000,
		Seed:        77, // its own database, apart from the demo's
		PushWorkers: 2,
		Latency:     10 * time.Millisecond,
		PushPort:    28443,
		LogDir:      t.TempDir(),
		Timeout:     3 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Notified != 3000 {
		t.Errorf("notified %d, want 3000", res.Notified)
	}
	if res.Delivered != res.Subscriptions || res.Lost != 0 || res.Gone != 0 || res.Failed != 0 {
		t.Errorf("delivered %d of %d (lost %d, gone %d, failed %d)", res.Delivered, res.Subscriptions, res.Lost, res.Gone, res.Failed)
	}
	if res.MockUnique != res.Subscriptions || res.Duplicates != 0 {
		t.Errorf("mock saw %d unique (%d duplicates), want %d and 0", res.MockUnique, res.Duplicates, res.Subscriptions)
	}
	if res.DecryptFailures != 0 {
		t.Errorf("%d sampled messages failed to decrypt", res.DecryptFailures)
	}
	if res.TotalSeconds <= 0 || res.FanoutSeconds <= 0 || res.PushCPUSeconds <= 0 {
		t.Errorf("timings not measured: %+v", res)
	}
	// Every process's CPU over the event, the servers' too: the tests'
	// Postgres and Kafka run on this machine (infra/local).
	for _, name := range []string{pipeline.CPUPostgres, pipeline.CPUKafka, "cdc", "fanout", "push-1", "push-2", "api"} {
		if _, ok := res.CPUSecondsByProcess[name]; !ok {
			t.Errorf("cpu_seconds_by_process has no %q: %v", name, res.CPUSecondsByProcess)
		}
	}
	if _, ok := res.CPUSecondsByProcess["pushmock"]; ok {
		t.Errorf("the mock is in cpu_seconds_by_process, want it apart: %v", res.CPUSecondsByProcess)
	}
	if res.CPUSecondsByProcess["push-1"]+res.CPUSecondsByProcess["push-2"] <= 0 || res.PipelineCPUUSPerDelivery <= 0 {
		t.Errorf("push workers' CPU over the event %v, pipeline µs/delivery %v; want > 0", res.CPUSecondsByProcess, res.PipelineCPUUSPerDelivery)
	}
	if res.CryptoOnlyUSPerMessage <= 0 || int64(res.CryptoOnlyMessages) != res.Subscriptions {
		t.Errorf("crypto-only reference: %v µs over %d messages; want > 0 over %d", res.CryptoOnlyUSPerMessage, res.CryptoOnlyMessages, res.Subscriptions)
	}
}

// TestEndToEndMix runs the pipeline with phones beside browsers: the mock
// serves Web Push, FCM and APNs with dev credentials and the push workers
// send each device through its platform's provider. Every platform's
// devices are delivered exactly once, by the database and by the mock.
func TestEndToEndMix(t *testing.T) {
	localtest.Short(t, "starts every service as a process")
	bin := notifytest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	mix, err := pipeline.ParseMix("webpush=1.1,fcm=0.5,apns=0.25")
	if err != nil {
		t.Fatal(err)
	}
	res, err := pipeline.Run(ctx, pipeline.Config{
		Binary:      bin,
		DatabaseURL: schematest.ServerURL(),
		Brokers:     streamstest.Brokers(t),
		Users:       1000,
		Seed:        78,
		Mix:         &mix,
		PushWorkers: 2,
		Latency:     10 * time.Millisecond,
		PushPort:    28444,
		LogDir:      t.TempDir(),
		Timeout:     3 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if !strings.Contains(res.Database, "_w1100_f500_a250") {
		t.Errorf("database %q does not name the mix", res.Database)
	}
	want := map[string]int64{pipeline.PlatformWebPush: 1100, pipeline.PlatformFCM: 500, pipeline.PlatformAPNs: 250}
	if len(res.Platforms) != len(want) {
		t.Fatalf("platforms %+v, want %v", res.Platforms, want)
	}
	for _, p := range res.Platforms {
		n := want[p.Platform]
		if p.Devices != n || p.Delivered != n || p.Gone != 0 || p.Failed != 0 || p.Lost != 0 {
			t.Errorf("%s: %d devices, delivered %d, gone %d, failed %d, lost %d; want %d delivered of %d", p.Platform, p.Devices, p.Delivered, p.Gone, p.Failed, p.Lost, n, n)
		}
		if p.MockUnique != n || p.Duplicates != 0 {
			t.Errorf("%s: the mock saw %d unique, %d duplicates; want %d and 0", p.Platform, p.MockUnique, p.Duplicates, n)
		}
	}
	if res.Subscriptions != 1850 || res.Delivered != 1850 || res.Lost != 0 || res.Duplicates != 0 || res.MockUnique != 1850 {
		t.Errorf("totals: %d devices, delivered %d, lost %d, mock unique %d, duplicates %d; want 1850, 1850, 0, 1850, 0",
			res.Subscriptions, res.Delivered, res.Lost, res.MockUnique, res.Duplicates)
	}
}

// TestEndToEndPreferences runs the pipeline with students' preferences
// (Config.Preferences, `bench e2e --preferences`) on phones and browsers:
// the muted and quiet students' pushes are held back, the run ends when
// every other device has its outcome, and nothing held reaches the mock.
// A run without preferences on the same seed then delivers every device:
// the seed keeps none behind.
func TestEndToEndPreferences(t *testing.T) {
	localtest.Short(t, "starts every service as a process")
	bin := notifytest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	mix, err := pipeline.ParseMix("webpush=1.1,fcm=0.5")
	if err != nil {
		t.Fatal(err)
	}
	prefs, err := seed.ParsePreferences("muted=0.2,quiet=0.3,type_rules=0.1")
	if err != nil {
		t.Fatal(err)
	}
	cfg := pipeline.Config{
		Binary:      bin,
		DatabaseURL: schematest.ServerURL(),
		Brokers:     streamstest.Brokers(t),
		Users:       2000,
		Seed:        79,
		Mix:         &mix,
		Latency:     10 * time.Millisecond,
		PushPort:    28445,
		Timeout:     3 * time.Minute,
	}
	with := cfg
	with.Preferences, with.LogDir = &prefs, t.TempDir()
	res, err := pipeline.Run(ctx, with)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.Seeded == nil || res.Seeded.Muted != 400 || res.Seeded.Quiet != 600 || res.HeldStudents != 1000 {
		t.Fatalf("seeded %+v, held %d students; want 400 muted and 600 quiet held", res.Seeded, res.HeldStudents)
	}
	if res.HeldDevices <= 0 || res.Delivered+res.HeldDevices != res.Subscriptions || res.Lost != 0 || res.Gone != 0 || res.Failed != 0 {
		t.Errorf("%d devices: delivered %d, held %d, lost %d, gone %d, failed %d; want delivered + held = devices", res.Subscriptions, res.Delivered, res.HeldDevices, res.Lost, res.Gone, res.Failed)
	}
	if res.MockReceived != res.Delivered || res.MockUnique != res.Delivered || res.Duplicates != 0 {
		t.Errorf("the mock received %d (%d unique, %d duplicates), want exactly the %d delivered", res.MockReceived, res.MockUnique, res.Duplicates, res.Delivered)
	}
	var held int64
	for _, p := range res.Platforms {
		if p.Held <= 0 || p.Delivered+p.Held != p.Devices || p.Lost != 0 {
			t.Errorf("%s: %d devices, delivered %d, held %d, lost %d", p.Platform, p.Devices, p.Delivered, p.Held, p.Lost)
		}
		held += p.Held
	}
	if held != res.HeldDevices || res.USPerDelivered <= 0 {
		t.Errorf("held per platform sums to %d of %d; µs per delivered %v", held, res.HeldDevices, res.USPerDelivered)
	}

	without := cfg
	without.LogDir = t.TempDir()
	plain, err := pipeline.Run(ctx, without)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Preferences != "" || plain.HeldDevices != 0 || plain.Delivered != plain.Subscriptions || plain.Lost != 0 {
		t.Errorf("without preferences on the same seed: %q, held %d, delivered %d of %d, lost %d", plain.Preferences, plain.HeldDevices, plain.Delivered, plain.Subscriptions, plain.Lost)
	}
}

// TestEndToEndRoster runs the pipeline on students that came from the
// platform's change stream (Config.Roster, `notify demo --roster`): the
// seed writes devices only, so every notification is of a student, and
// an enrollment, that a `notify run roster` process applied from
// Debezium records with integer ids.
func TestEndToEndRoster(t *testing.T) {
	localtest.Short(t, "starts every service as a process")
	bin := notifytest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	res, err := pipeline.Run(ctx, pipeline.Config{
		Binary:      bin,
		DatabaseURL: schematest.ServerURL(),
		Brokers:     streamstest.Brokers(t),
		Users:       1500,
		Seed:        79,
		Roster:      true,
		Latency:     10 * time.Millisecond,
		PushPort:    28445,
		LogDir:      t.TempDir(),
		Timeout:     3 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if !res.Roster || res.RosterSeconds <= 0 {
		t.Errorf("roster %v in %v s, want the students from the roster", res.Roster, res.RosterSeconds)
	}
	if res.Notified != 1500 {
		t.Errorf("notified %d, want the roster's 1500 students", res.Notified)
	}
	if res.Delivered != res.Subscriptions || res.Subscriptions == 0 || res.Lost != 0 || res.Duplicates != 0 {
		t.Errorf("delivered %d of %d (lost %d, duplicates %d)", res.Delivered, res.Subscriptions, res.Lost, res.Duplicates)
	}
	if _, ok := res.CPUSeconds["roster"]; !ok {
		t.Errorf("no roster process among %v", res.CPUSeconds)
	}
}

func TestParseMix(t *testing.T) {
	m, err := pipeline.ParseMix("webpush=1.097488,fcm=0.5,apns=0.25")
	if err != nil || m != (pipeline.Mix{WebPush: 1.097488, FCM: 0.5, APNs: 0.25}) {
		t.Fatalf("got %+v, %v", m, err)
	}
	if m, err := pipeline.ParseMix("fcm=1"); err != nil || m != (pipeline.Mix{FCM: 1}) {
		t.Fatalf("fcm only: got %+v, %v", m, err)
	}
	for _, bad := range []string{"", "webpush", "sms=1", "fcm=-1", "fcm=x", "fcm=1,fcm=1", "webpush=0"} {
		if _, err := pipeline.ParseMix(bad); err == nil {
			t.Errorf("ParseMix(%q): no error", bad)
		}
	}
}
