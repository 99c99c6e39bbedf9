package provider

import "fmt"

// Platform is a device's push platform: push_subscriptions.platform
// (migration 0007_devices), the API's "platform" field and the label of
// every provider series.
type Platform string

// The platforms.
const (
	WebPush Platform = "webpush"
	FCM     Platform = "fcm"
	APNs    Platform = "apns"
)

// Platforms lists every platform, in the order reports show them.
func Platforms() []Platform { return []Platform{WebPush, FCM, APNs} }

// ParsePlatform accepts the name of a platform.
func ParsePlatform(s string) (Platform, error) {
	for _, p := range Platforms() {
		if string(p) == s {
			return p, nil
		}
	}
	return "", fmt.Errorf("platform %q: want webpush, fcm or apns", s)
}

func (p Platform) String() string { return string(p) }
