package fcm

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/provider"
)

// Answers in FCM's own format and in the looser ones a stand-in may use;
// a 404 or 403 that does not name its code never makes a device gone.
func TestClassify(t *testing.T) {
	b, err := GenerateDevCredentials("https://oauth2.googleapis.com/token")
	if err != nil {
		t.Fatal(err)
	}
	creds, err := ParseCredentials(b)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	const fcmDetail = `"details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"%s"}]`
	for _, tc := range []struct {
		status     int
		retryAfter string
		body       string
		kind       provider.Kind
		code       string
		wait       time.Duration // RetryAfter, and the project's pause
	}{
		{200, "", `{"name":"projects/p/messages/1"}`, provider.Delivered, "", 0},
		{404, "", `{"error":{"code":404,"message":"Requested entity was not found.","status":"NOT_FOUND",` + fmt.Sprintf(fcmDetail, "UNREGISTERED") + `}}`, provider.Gone, "UNREGISTERED", 0},
		{404, "", `{"error":{"code":404,"status":"UNREGISTERED"}}`, provider.Gone, "UNREGISTERED", 0},
		{404, "", ``, provider.PermanentFailure, "", 0},
		{404, "", `<html>Not Found</html>`, provider.PermanentFailure, "", 0},
		{403, "", `{"error":{"code":403,"status":"PERMISSION_DENIED",` + fmt.Sprintf(fcmDetail, "SENDER_ID_MISMATCH") + `}}`, provider.Gone, "SENDER_ID_MISMATCH", 0},
		{403, "", `{"error":{"code":403,"status":"PERMISSION_DENIED"}}`, provider.PermanentFailure, "PERMISSION_DENIED", 0},
		{400, "", `{"error":{"code":400,"status":"INVALID_ARGUMENT",` + fmt.Sprintf(fcmDetail, "INVALID_ARGUMENT") + `}}`, provider.PermanentFailure, "INVALID_ARGUMENT", 0},
		{401, "", `{"error":{"code":401,"status":"UNAUTHENTICATED"}}`, provider.PermanentFailure, "UNAUTHENTICATED", 0},
		{429, "7", `{"error":{"code":429,"status":"RESOURCE_EXHAUSTED",` + fmt.Sprintf(fcmDetail, "QUOTA_EXCEEDED") + `}}`, provider.Retryable, "QUOTA_EXCEEDED", 7 * time.Second},
		{429, "", ``, provider.Retryable, "", DefaultQuotaPause},
		{503, "3", `{"error":{"code":503,"status":"UNAVAILABLE"}}`, provider.Retryable, "UNAVAILABLE", 3 * time.Second},
		{500, "", `{"error":{"code":500,"status":"INTERNAL"}}`, provider.Retryable, "INTERNAL", 0},
		{408, "", ``, provider.Retryable, "", 0},
	} {
		c, err := New(Config{Credentials: creds, Logger: slog.New(slog.DiscardHandler), Metrics: metrics.NewSet()})
		if err != nil {
			t.Fatal(err)
		}
		out := c.classify(tc.status, tc.retryAfter, []byte(tc.body), now)
		if out.Kind != tc.kind || out.Status != tc.status || out.RetryAfter != tc.wait {
			t.Errorf("%d %q: %v %d retry after %s, want %v after %s", tc.status, tc.body, out.Kind, out.Status, out.RetryAfter, tc.kind, tc.wait)
		}
		if fe, ok := out.Err.(*Error); tc.kind != provider.Delivered && (!ok || fe.Code != tc.code) {
			t.Errorf("%d %q: err %#v, want code %q", tc.status, tc.body, out.Err, tc.code)
		}
		if paused := c.PausedFor() > 0; paused != (tc.wait > 0) {
			t.Errorf("%d %q: project paused %v, want %v", tc.status, tc.body, paused, tc.wait > 0)
		}
	}
}
