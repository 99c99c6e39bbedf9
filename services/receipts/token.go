package receipts

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/google/uuid"
)

// EnvKey names the environment variable holding the receipt secret.
const EnvKey = "NOTIFY_RECEIPT_KEY"

// DevKey is the secret used in dev mode when EnvKey is unset. It is public
// (it is in this file), so tokens minted with it prove nothing: KeyFromEnv
// refuses it outside dev mode.
const DevKey = "notify-dev-receipt-key-not-for-production-use-0123456789"

// MinKeyBytes is the shortest accepted secret: the HMAC-SHA256 hash size.
const MinKeyBytes = 32

// DefaultTTL is how long a token is accepted after it was minted: longer
// than a push service keeps an undelivered message (Web Push and FCM at
// most 28 days), so a notification shown when its device comes back
// online still counts.
const DefaultTTL = 30 * 24 * time.Hour

// Platforms a token is minted for (provider.Platform's spellings), and
// the inbox's, whose reads need no token.
const (
	PlatformWebPush = "webpush"
	PlatformFCM     = "fcm"
	PlatformAPNs    = "apns"
	PlatformInbox   = "inbox"
)

// Kinds of receipt.
const (
	KindShown   = "shown"
	KindClicked = "clicked"
	KindRead    = "read"
)

// platformCodes is a platform's byte in a token; 0 is none.
var platformCodes = map[string]byte{PlatformWebPush: 1, PlatformFCM: 2, PlatformAPNs: 3}

func platformOf(code byte) string {
	for p, c := range platformCodes {
		if c == code {
			return p
		}
	}
	return ""
}

// Token layout, before base64url without padding (TokenLen characters):
//
//	version  1 byte   1
//	user    16 bytes  the student's uuid
//	event   16 bytes  the event's uuid
//	platform 1 byte   1 webpush, 2 fcm, 3 apns
//	expires  4 bytes  Unix seconds, big-endian
//	mac     16 bytes  HMAC-SHA256(key, "notify receipt" ‖ the 38 bytes above), first half
//
// The event is in the token, not only in the MAC, so a valid token posted
// for another event is told apart (403) from a forged one (401). 128 bits
// of MAC are far beyond guessing over HTTP; the whole token adds 72 bytes
// to a payload of at most 4078.
const (
	tokenVersion = 1
	bodyLen      = 1 + 16 + 16 + 1 + 4
	macLen       = 16
	rawLen       = bodyLen + macLen
)

// TokenLen is the length of every token.
var TokenLen = base64.RawURLEncoding.EncodedLen(rawLen)

// macContext separates these MACs from any other use of the key.
const macContext = "notify receipt"

// Verification failures. ErrForged and ErrExpired are 401s (get a new
// push); ErrForeign is a 403: the token is notify's, for another event.
var (
	ErrForged  = errors.New("receipt token is not one notify minted")
	ErrExpired = errors.New("receipt token expired")
	ErrForeign = errors.New("receipt token is for another event")
)

// Key mints and verifies tokens. It is safe for concurrent use.
type Key struct {
	secret []byte
	ttl    time.Duration
	// macs are keyed HMACs to reuse: Reset restores the keyed state, so a
	// token costs two SHA-256 compressions, not the key schedule too (the
	// push worker mints one per device).
	macs sync.Pool
}

// NewKey makes a key from secret (at least MinKeyBytes) whose tokens are
// valid for ttl (0: DefaultTTL).
func NewKey(secret []byte, ttl time.Duration) (*Key, error) {
	if len(secret) < MinKeyBytes {
		return nil, fmt.Errorf("receipt key: %s must be at least %d bytes, got %d", EnvKey, MinKeyBytes, len(secret))
	}
	if ttl == 0 {
		ttl = DefaultTTL
	}
	if ttl < time.Minute || ttl > 365*24*time.Hour {
		return nil, fmt.Errorf("receipt key: token lifetime must be between 1m and 365 days, got %s", ttl)
	}
	k := &Key{secret: append([]byte(nil), secret...), ttl: ttl}
	k.macs.New = func() any { return hmac.New(sha256.New, k.secret) }
	return k, nil
}

// KeyFromEnv reads EnvKey. Outside dev mode it must be set, and must not
// be DevKey: anyone could count receipts for anyone with the public one.
// In dev mode an unset key falls back to DevKey, with a warning on log.
func KeyFromEnv(log *slog.Logger, dev bool) (*Key, error) {
	s := os.Getenv(EnvKey)
	switch {
	case s == "" && !dev:
		return nil, fmt.Errorf("%s is not set: give the receipt secret (at least %d bytes, e.g. openssl rand -base64 48; the same for the API and the push workers), or run in dev mode (--dev or NOTIFY_DEV=1) on a local machine", EnvKey, MinKeyBytes)
	case s == DevKey && !dev:
		return nil, fmt.Errorf("%s is the public dev key: set a secret of your own, or run in dev mode (--dev or NOTIFY_DEV=1) on a local machine", EnvKey)
	case s == "":
		if log != nil {
			log.Warn("dev mode: " + EnvKey + " is not set, minting receipt tokens with the PUBLIC dev key")
		}
		s = DevKey
	}
	return NewKey([]byte(s), 0)
}

// Minter mints the tokens of one event's pushes, all with one expiry:
// the push worker makes one per command and one token per device.
type Minter struct {
	key     *Key
	event   uuid.UUID
	expires uint32
	ok      bool
}

// Minter returns the minter of eventID's tokens minted at now. An event
// id that is not a uuid (never, after streams.DecodePushCommand) mints
// nothing.
func (k *Key) Minter(eventID string, now time.Time) Minter {
	ev, err := uuid.Parse(eventID)
	if err != nil {
		return Minter{}
	}
	return Minter{key: k, event: ev, expires: uint32(now.Add(k.ttl).Unix()), ok: true}
}

// Token is the token of userID's push on platform; "" when either is not
// one a token can name.
func (m Minter) Token(userID, platform string) string {
	code := platformCodes[platform]
	if !m.ok || code == 0 {
		return ""
	}
	u, err := uuid.Parse(userID)
	if err != nil {
		return ""
	}
	var b [rawLen]byte
	b[0] = tokenVersion
	copy(b[1:17], u[:])
	copy(b[17:33], m.event[:])
	b[33] = code
	binary.BigEndian.PutUint32(b[34:38], m.expires)
	copy(b[bodyLen:], m.key.mac(b[:bodyLen]))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

func (k *Key) mac(body []byte) []byte {
	h := k.macs.Get().(hash.Hash)
	h.Reset()
	h.Write([]byte(macContext))
	h.Write(body)
	var sum [sha256.Size]byte
	out := h.Sum(sum[:0])[:macLen]
	k.macs.Put(h)
	return out
}

// Claims are what a verified token says.
type Claims struct {
	UserID   uuid.UUID
	Platform string
	Expires  time.Time
}

// Verify checks token for eventID at now: ErrForged when it is not
// notify's (bad encoding, length, version or MAC), ErrForeign when it is
// notify's for another event, ErrExpired when its time has passed.
func (k *Key) Verify(token string, eventID uuid.UUID, now time.Time) (Claims, error) {
	if len(token) != TokenLen {
		return Claims{}, ErrForged
	}
	b, err := base64.RawURLEncoding.Strict().DecodeString(token)
	if err != nil || len(b) != rawLen || b[0] != tokenVersion {
		return Claims{}, ErrForged
	}
	if !hmac.Equal(b[bodyLen:], k.mac(b[:bodyLen])) {
		return Claims{}, ErrForged
	}
	platform := platformOf(b[33])
	if platform == "" {
		return Claims{}, ErrForged // minted by no version of this code
	}
	if !hmac.Equal(b[17:33], eventID[:]) {
		return Claims{}, ErrForeign
	}
	c := Claims{Platform: platform, Expires: time.Unix(int64(binary.BigEndian.Uint32(b[34:38])), 0).UTC()}
	copy(c.UserID[:], b[1:17])
	if !now.Before(c.Expires) {
		return Claims{}, ErrExpired
	}
	return c, nil
}
