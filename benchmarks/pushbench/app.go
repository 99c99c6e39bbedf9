package pushbench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"time"

	vm "github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/benchmarks/benchkit"
	"github.com/notify-dev/notify/services/push/apns"
	pushendpoint "github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/seed"
)

// The app message every FCM and APNs send carries: what a push worker
// sends for a published material (the fields of payload).
const (
	appTitle    = "New material: Week 7 — Dynamic programming"
	appEventID  = "0195f3a2-7c1e-7d4a-9b8e-2f6c1a9e4b77"
	appCourseID = "4f1c2b7e-1d3a-4c5b-8e9f-0a1b2c3d4e5f"
	appURL      = "https://learn.example.com/courses/4f1c/materials/9a2e"
)

// runApp measures the FCM or the APNs client (services/push/fcm,
// services/push/apns) as the push worker hosts it: the mock process serves
// the platform with the dev credentials it writes into the run's directory,
// and device i's token is the one `notify seed` gives device i, made as it
// is sent so memory stays flat whatever N. There is no per-message crypto
// on these platforms, so there is no crypto-only reference.
func runApp(ctx context.Context, cfg Config) (Result, error) {
	n := cfg.Subscriptions
	res := Result{Platform: cfg.Platform, Subscriptions: n, Concurrency: cfg.Concurrency, LoadAvg: loadAvg(),
		LatencyMS: float64(cfg.Latency) / 1e6, GOMAXPROCS: runtime.GOMAXPROCS(0), GoVersion: runtime.Version(), Outcomes: map[string]int64{}}
	cfg.Say("%s benchmark: %d devices, mock latency %s, concurrency %d, GOMAXPROCS %d",
		cfg.Platform, n, cfg.Latency, cfg.Concurrency, res.GOMAXPROCS)

	tmp, err := os.MkdirTemp("", "notify-bench-"+cfg.Platform+"-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(tmp)
	var faults []string
	if cfg.Rate429 > 0 {
		faults = []string{"--rate-429", strconv.FormatFloat(cfg.Rate429, 'f', -1, 64)}
		if cfg.RetryAfter > 0 {
			faults = append(faults, "--retry-after", cfg.RetryAfter.String())
		}
	}
	mock, err := benchkit.StartMock(ctx, benchkit.MockConfig{Binary: cfg.Binary, Dir: tmp, Latency: cfg.Latency,
		Seed: cfg.Seed, MaxStreams: cfg.MaxStreams, Flags: faults, Env: []string{"NOTIFY_LOG_FORMAT=text"}})
	if err != nil {
		return res, err
	}
	defer mock.Stop(10 * time.Second) //nolint:errcheck // best effort at exit
	cfg.Say("mock push service: pid %d at %s", mock.Pid(), mock.URL)
	roots, err := webpush.LoadCAFile(mock.CertFile)
	if err != nil {
		return res, err
	}

	var sendOne func(ctx context.Context, i int64) provider.Outcome
	var closeClient func()
	switch cfg.Platform {
	case PlatformFCM:
		creds, err := fcm.LoadCredentials(mock.FCMCredentialsFile)
		if err != nil {
			return res, fmt.Errorf("the mock's dev FCM credentials: %w", err)
		}
		c, err := fcm.New(fcm.Config{Credentials: creds, Endpoint: mock.URL, MaxInFlight: cfg.Concurrency,
			RootCAs: roots, Dev: true, Logger: cfg.Logger, Metrics: vm.NewSet()})
		if err != nil {
			return res, err
		}
		closeClient = c.Close
		sendOne = func(ctx context.Context, i int64) provider.Outcome {
			return c.Send(ctx, fcm.Message{Token: pushmock.FCMToken(creds.ProjectID, i+1), Title: appTitle,
				EventID: appEventID, CourseID: appCourseID, URL: appURL})
		}
	case PlatformAPNs:
		key, _, err := apns.EnsureDevKey(mock.APNsDevDir)
		if err != nil {
			return res, fmt.Errorf("the mock's dev APNs key: %w", err)
		}
		priv, err := apns.LoadPrivateKey(key.KeyFile)
		if err != nil {
			return res, fmt.Errorf("the mock's dev APNs key: %w", err)
		}
		policy, err := pushendpoint.New(pushendpoint.Options{Dev: true})
		if err != nil {
			return res, err
		}
		c, err := apns.New(apns.Config{Key: priv, KeyID: key.KeyID, TeamID: key.TeamID, Topic: key.Topic,
			Endpoint: mock.URL, RootCAs: roots, Dial: policy.Dialer(30 * time.Second), Logger: cfg.Logger, Metrics: vm.NewSet()})
		if err != nil {
			return res, err
		}
		closeClient = c.Close
		data := map[string]string{"course_id": appCourseID, "url": appURL}
		sendOne = func(ctx context.Context, i int64) provider.Outcome {
			return c.Send(ctx, apns.Notification{DeviceToken: seed.APNsToken(i + 1), EventID: appEventID, Title: appTitle, Data: data})
		}
	}
	defer closeClient()

	// The GC target a push worker sends with (unless GOGC is set).
	restoreGC := webpush.RaiseGCPercent()
	defer restoreGC()
	res.GCPercent = debug.SetGCPercent(-1)
	debug.SetGCPercent(res.GCPercent)
	if err := drive(ctx, cfg, &res, int64(n), sendOne); err != nil {
		return res, err
	}

	st, err := mock.Stats(ctx)
	if err != nil {
		return res, fmt.Errorf("read the mock's stats: %w", err)
	}
	res.Mock = st
	_ = mock.Stop(10 * time.Second)
	res.MockCPUSeconds = mock.CPUSeconds()
	unique, dups, auth := st.FCM.Unique, st.FCM.Duplicates, st.FCM.AuthFailures+st.FCM.AssertionFailures
	if cfg.Platform == PlatformAPNs {
		unique, dups, auth = st.APNs.Unique, st.APNs.Duplicates, st.APNs.AuthFailures
	}
	res.Checks = []Check{
		{"every device delivered once (mock unique == N)", unique == int64(n) && dups == 0 && res.Deliveries == int64(n),
			fmt.Sprintf("delivered %d, unique %d, duplicates %d", res.Deliveries, unique, dups), false},
		{"no authentication rejections", auth == 0, fmt.Sprintf("%d", auth), false},
		{"no retry before its Retry-After", st.FCM.EarlyRetries == 0, fmt.Sprintf("%d", st.FCM.EarlyRetries), false},
		{"≥ 1,000 requests in flight", res.MaxInFlight >= int64(min(1000, cfg.Concurrency, n)),
			fmt.Sprintf("%d", res.MaxInFlight), true},
		{"≥ 40,000 deliveries per CPU-second", res.PerCPUSecond >= 40000, fmt.Sprintf("%.0f", res.PerCPUSecond), true},
	}
	return res, nil
}
