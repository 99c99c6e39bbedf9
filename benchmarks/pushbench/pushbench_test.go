package pushbench_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/notify-dev/notify/benchmarks/pushbench"
	"github.com/notify-dev/notify/infra/local/localtest"
	"github.com/notify-dev/notify/internal/leaktest"
	"github.com/notify-dev/notify/services/notify/notifytest"
	"github.com/notify-dev/notify/services/push/webpush"
)

func TestMain(m *testing.M) {
	code := m.Run()
	notifytest.Cleanup()
	os.Exit(leaktest.Check(code))
}

// A small run against the mock process delivers every push once, every
// sampled message decrypts and nothing is rejected — the checks a figure
// of the benchmark stands on (its speed is not asserted).
func TestRunSmall(t *testing.T) {
	localtest.Short(t, "starts the mock push service as a process")
	key, err := webpush.GenerateVAPIDKey()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := pushbench.Run(ctx, pushbench.Config{
		Binary:        notifytest.Binary(t),
		VAPID:         webpush.VAPIDConfig{Key: key, Subject: "mailto:bench@example.com"},
		Subscriptions: 300,
		Latency:       time.Millisecond,
		Concurrency:   50,
		DecryptSample: 0.2,
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Failed(); c != nil {
		t.Fatalf("check %q failed: %s", c.Name, c.Got)
	}
	if res.Deliveries != 300 || res.Mock.Unique != 300 || res.Mock.Decrypted == 0 {
		t.Fatalf("delivered %d, mock unique %d, decrypted %d; want 300, 300, > 0", res.Deliveries, res.Mock.Unique, res.Mock.Decrypted)
	}
	if res.MockCPUSeconds <= 0 {
		t.Errorf("mock CPU not measured: %v", res.MockCPUSeconds)
	}
}

// A small FCM and APNs run through the real clients against the mock
// process's sides for them delivers every device once with nothing
// refused for its credentials, and reports its platform.
func TestRunSmallApp(t *testing.T) {
	localtest.Short(t, "starts the mock push service as a process")
	for _, platform := range []string{pushbench.PlatformFCM, pushbench.PlatformAPNs} {
		t.Run(platform, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			res, err := pushbench.Run(ctx, pushbench.Config{
				Binary:        notifytest.Binary(t),
				Platform:      platform,
				Subscriptions: 300,
				Latency:       time.Millisecond,
				Concurrency:   50,
			})
			if err != nil {
				t.Fatal(err)
			}
			if c := res.Failed(); c != nil {
				t.Fatalf("check %q failed: %s", c.Name, c.Got)
			}
			unique := res.Mock.FCM.Unique
			if platform == pushbench.PlatformAPNs {
				unique = res.Mock.APNs.Unique
			}
			if res.Platform != platform || res.Deliveries != 300 || unique != 300 || res.PerCPUSecond <= 0 {
				t.Fatalf("platform %q, delivered %d, mock unique %d, per CPU-second %v; want %q, 300, 300, > 0",
					res.Platform, res.Deliveries, unique, res.PerCPUSecond, platform)
			}
		})
	}
}
