package endpoint

import (
	"errors"
	"testing"
)

// TestCanonicalSpellingsAgree: spellings of one endpoint that reach the
// same push-service resource give one canonical string, so an ownership
// check by endpoint cannot be sidestepped by spelling it differently.
func TestCanonicalSpellingsAgree(t *testing.T) {
	const want = "https://fcm.googleapis.com/fcm/send/cAbC:APA91b-x_y~z"
	for _, raw := range []string{
		want,
		"HTTPS://FCM.GoogleAPIs.COM/fcm/send/cAbC:APA91b-x_y~z",          // scheme and host case
		"https://fcm.googleapis.com:443/fcm/send/cAbC:APA91b-x_y~z",      // default port
		"https://fcm.googleapis.com/fcm/./x/../send/cAbC:APA91b-x_y~z",   // dot segments
		"https://fcm.googleapis.com/fcm/send/%63AbC:APA91b%2Dx%5Fy%7ez",  // unreserved percent-encoded, lower-case hex
		"https://fcm.googleapis.com/fcm/send/cAbC:APA91b-x_y~z?#",        // empty query and fragment
		"https://FCM.googleapis.com.:443/fcm/%2E/send/cAbC:APA91b-x_y~z", // trailing dot, encoded dot segment
	} {
		got, err := Canonical(raw)
		if err != nil {
			t.Errorf("Canonical(%q): %v", raw, err)
			continue
		}
		if got != want {
			t.Errorf("Canonical(%q) = %q, want %q", raw, got, want)
		}
	}
}

// TestCanonicalKeepsWhatDiffers: what the push service does see stays
// apart — the path's case, reserved characters kept encoded (with
// upper-case hex), a port other than 443, a non-empty query.
func TestCanonicalKeepsWhatDiffers(t *testing.T) {
	for raw, want := range map[string]string{
		"https://push.example.com/A/b":         "https://push.example.com/A/b",
		"https://push.example.com/a%2fb":       "https://push.example.com/a%2Fb",
		"https://push.example.com:8443/x":      "https://push.example.com:8443/x",
		"https://push.example.com:08443/x":     "https://push.example.com:8443/x",
		"https://push.example.com/x?a=1&b=%7e": "https://push.example.com/x?a=1&b=~",
		"https://push.example.com":             "https://push.example.com/",
		"https://push.example.com/a b":         "https://push.example.com/a%20b",
		"https://[2001:DB8::1]:443/x":          "https://[2001:db8::1]/x",
		"https://push.example.com/../../x":     "https://push.example.com/x",
	} {
		got, err := Canonical(raw)
		if err != nil || got != want {
			t.Errorf("Canonical(%q) = %q, %v; want %q", raw, got, err, want)
		}
	}
}

// TestCanonicalRefuses: what Check refuses as a shape is refused here too,
// with the same reasons.
func TestCanonicalRefuses(t *testing.T) {
	for raw, wantReason := range map[string]string{
		"http://push.example.com/x":        ReasonInvalid,
		"https://user:pw@push.example.com": ReasonUserInfo,
		"https://@push.example.com/x":      ReasonUserInfo,
		"https:///x":                       ReasonInvalid,
		"push.example.com/x":               ReasonInvalid,
		"https://push.example.com:0/x":     ReasonInvalidPort,
		"https://push.example.com:99999/":  ReasonInvalidPort,
		"https://push.example.com/%zz":     ReasonInvalid,
		"https://push.example.com/%4":      ReasonInvalid,
	} {
		got, err := Canonical(raw)
		var e *Error
		if !errors.As(err, &e) || e.Reason != wantReason || !errors.Is(err, ErrRefused) {
			t.Errorf("Canonical(%q) = %q, %v; want a refusal %s", raw, got, err, wantReason)
		}
	}
}
