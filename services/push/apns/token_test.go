package apns

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestSignAndVerifyToken(t *testing.T) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	iat := time.Unix(1_800_000_000, 0)
	jwt, err := SignToken(key, "ABC123DEFG", "DEF123GHIJ", iat)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(jwt, ".")
	hb, _ := b64.DecodeString(parts[0])
	cb, _ := b64.DecodeString(parts[1])
	sig, _ := b64.DecodeString(parts[2])
	if string(hb) != `{"alg":"ES256","kid":"ABC123DEFG"}` || string(cb) != `{"iss":"DEF123GHIJ","iat":1800000000}` || len(sig) != 64 {
		t.Fatalf("header %s, claims %s, signature %d bytes", hb, cb, len(sig))
	}
	tok, err := VerifyToken(jwt, &key.PublicKey, "ABC123DEFG", "DEF123GHIJ", iat.Add(59*time.Minute), time.Hour)
	if err != nil || !tok.IssuedAt.Equal(iat) {
		t.Fatalf("verify: %+v, %v", tok, err)
	}
	other, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for name, c := range map[string]struct {
		jwt, kid, iss string
		pub           *ecdsa.PublicKey
		now           time.Time
		want          error
	}{
		"expired":   {jwt, "ABC123DEFG", "DEF123GHIJ", &key.PublicKey, iat.Add(61 * time.Minute), ErrExpiredProviderToken},
		"future":    {jwt, "ABC123DEFG", "DEF123GHIJ", &key.PublicKey, iat.Add(-2 * time.Minute), ErrInvalidProviderToken},
		"wrong kid": {jwt, "OTHERKEYID", "DEF123GHIJ", &key.PublicKey, iat, ErrInvalidProviderToken},
		"wrong iss": {jwt, "ABC123DEFG", "OTHERTEAM0", &key.PublicKey, iat, ErrInvalidProviderToken},
		"wrong key": {jwt, "ABC123DEFG", "DEF123GHIJ", &other.PublicKey, iat, ErrInvalidProviderToken},
		"tampered":  {parts[0] + "." + b64.EncodeToString([]byte(`{"iss":"DEF123GHIJ","iat":1800000001}`)) + "." + parts[2], "ABC123DEFG", "DEF123GHIJ", &key.PublicKey, iat, ErrInvalidProviderToken},
		"not a JWT": {"abc", "ABC123DEFG", "DEF123GHIJ", &key.PublicKey, iat, ErrInvalidProviderToken},
		"DER sig":   {parts[0] + "." + parts[1] + "." + b64.EncodeToString(append(sig, 0)), "ABC123DEFG", "DEF123GHIJ", &key.PublicKey, iat, ErrInvalidProviderToken},
	} {
		if _, err := VerifyToken(c.jwt, c.pub, c.kid, c.iss, c.now, time.Hour); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

func TestAppendBodyIsJSON(t *testing.T) {
	n := Notification{
		Title: "quote \" backslash \\ nl \n tab \t ctl \x01 <&> é \u2028", Body: "bad utf8 \xff end",
		EventID: "e1", Data: map[string]string{"url": "/c/1?a=1&b=2", "course_id": "7"},
	}
	b, err := appendBody(nil, n)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		APS struct {
			Alert struct{ Title, Body string } `json:"alert"`
		} `json:"aps"`
		EventID  string `json:"event_id"`
		URL      string `json:"url"`
		CourseID string `json:"course_id"`
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	if got.APS.Alert.Title != n.Title || got.APS.Alert.Body != "bad utf8 \ufffd end" || got.EventID != "e1" || got.URL != n.Data["url"] || got.CourseID != "7" {
		t.Fatalf("round trip: %+v from %s", got, b)
	}
	if !strings.HasPrefix(string(b), `{"aps":{"alert":{"title":`) || !strings.Contains(string(b), `"course_id":"7","url":`) {
		t.Fatalf("shape: %s", b)
	}
}

func TestValidateDeviceToken(t *testing.T) {
	for tok, ok := range map[string]bool{
		strings.Repeat("ab", 32):  true,
		strings.Repeat("AB", 32):  true,
		strings.Repeat("0f", 100): true,
		strings.Repeat("0f", 101): false,
		strings.Repeat("a", 63):   false,
		strings.Repeat("a", 65):   false,
		strings.Repeat("ag", 32):  false,
		"":                        false,
	} {
		if err := ValidateDeviceToken(tok); (err == nil) != ok {
			t.Errorf("%q: %v", tok, err)
		}
	}
}
