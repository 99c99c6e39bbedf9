package pipeline

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/notify-dev/notify/services/push/fcm"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/seed"
)

// Platforms of a run, in the order the seed numbers their devices (Web
// Push subscriptions first, then FCM, then APNs devices).
const (
	PlatformWebPush = "webpush"
	PlatformFCM     = "fcm"
	PlatformAPNs    = "apns"
)

// Mix is the devices per student of each platform a run seeds (seed.Options'
// SubsRatio, FCMRatio and APNsRatio).
type Mix struct {
	WebPush float64 `json:"webpush"`
	FCM     float64 `json:"fcm"`
	APNs    float64 `json:"apns"`
}

// DefaultMix is the seed's job: 1,097,488 Web Push subscriptions for 1M
// students and no phones.
func DefaultMix() Mix { return Mix{WebPush: seed.DefaultSubsRatio} }

// ParseMix reads "webpush=R,fcm=R,apns=R"; a platform left out has no
// devices. Ratios are seed's: Web Push 0–3, FCM and APNs 0–1.
func ParseMix(s string) (Mix, error) {
	var m Mix
	seen := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return m, fmt.Errorf("--mix %q: want platform=ratio pairs, e.g. webpush=1.1,fcm=0.5,apns=0.25", s)
		}
		r, err := strconv.ParseFloat(v, 64)
		if err != nil || math.IsNaN(r) || r < 0 {
			return m, fmt.Errorf("--mix %s=%s: the ratio must be a number ≥ 0", k, v)
		}
		if seen[k] {
			return m, fmt.Errorf("--mix names %s twice", k)
		}
		seen[k] = true
		switch k {
		case PlatformWebPush:
			m.WebPush = r
		case PlatformFCM:
			m.FCM = r
		case PlatformAPNs:
			m.APNs = r
		default:
			return m, fmt.Errorf("--mix: unknown platform %q (webpush, fcm or apns)", k)
		}
	}
	if m.WebPush+m.FCM+m.APNs == 0 {
		return m, fmt.Errorf("--mix %q: no devices at all", s)
	}
	return m, nil
}

// String is the mix as ParseMix reads it.
func (m Mix) String() string {
	f := func(r float64) string { return strconv.FormatFloat(r, 'f', -1, 64) }
	return "webpush=" + f(m.WebPush) + ",fcm=" + f(m.FCM) + ",apns=" + f(m.APNs)
}

// seedOptions are the seed of users students with this mix.
func (m Mix) seedOptions(users int, seedV int64, pushBaseURL string) seed.Options {
	return seed.Options{Users: users, Seed: seedV, PushBaseURL: pushBaseURL,
		SubsRatio: m.WebPush, NoSubscriptions: m.WebPush == 0, FCMRatio: m.FCM, APNsRatio: m.APNs,
		// The project of the dev credentials the mock writes.
		FCMToken: func(id int64) string { return pushmock.FCMToken(fcm.DevProjectID, id) }}
}

// devices are the seeded devices of each platform, in seed order.
type devices struct{ webpush, fcm, apns int64 }

func (d devices) total() int64 { return d.webpush + d.fcm + d.apns }

func (m Mix) devices(users int, seedV int64) devices {
	o := m.seedOptions(users, seedV, "")
	f, a := o.AppDevices()
	return devices{webpush: o.Subscriptions(), fcm: f, apns: a}
}

// databaseName is the run database of (users, seed, mix): the default mix
// keeps the name it always had, so its seed is reused; any other names its
// device counts, so different mixes never share (or reseed) one database.
func databaseName(users int, seedV int64, m Mix) string {
	name := fmt.Sprintf("notify_run_%d_s%d", users, seedV)
	if m == DefaultMix() {
		return name
	}
	d := m.devices(users, seedV)
	return fmt.Sprintf("%s_w%d_f%d_a%d", name, d.webpush, d.fcm, d.apns)
}

// PlatformResult is one platform's accounting in a run.
type PlatformResult struct {
	Platform  string `json:"platform"`
	Devices   int64  `json:"devices"`
	Delivered int64  `json:"delivered"`
	Gone      int64  `json:"gone"`
	Failed    int64  `json:"failed"`
	// Held is devices whose student's push the fan-out held back
	// (Config.Preferences): not expected to be sent in the run.
	Held int64 `json:"held"`
	// Lost is devices without a final outcome and not held.
	Lost int64 `json:"lost"`
	// MockReceived, MockUnique and Duplicates are the mock's side for the
	// platform: requests, distinct devices answered 2xx, and 2xx answers
	// for a device already answered.
	MockReceived int64 `json:"mock_received"`
	MockUnique   int64 `json:"mock_unique"`
	Duplicates   int64 `json:"duplicates"`
}
