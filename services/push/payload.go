package push

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/notifications"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/receipts"
	"github.com/notify-dev/notify/streams"
)

// pushPayload is what the browser's service worker receives.
//
// A material's payload is what it always was ({title, url?, event_id,
// course_id}); a notification's adds its type, body, data and collapse
// key (the service worker's tag), and has no course_id when it went to a
// list of users.
type pushPayload struct {
	Title       string          `json:"title"`
	Body        string          `json:"body,omitempty"`
	URL         string          `json:"url,omitempty"`
	EventID     string          `json:"event_id"`
	CourseID    string          `json:"course_id,omitempty"`
	Type        string          `json:"type,omitempty"`
	Data        json.RawMessage `json:"data,omitempty"`
	CollapseKey string          `json:"collapse_key,omitempty"`
	// Receipt is the device's receipt token (package receipts), with
	// which the service worker reports the push shown and clicked. Last,
	// so each device's token replaces the placeholder at a known place.
	Receipt string `json:"receipt,omitempty"`
}

// commandTexts are a command's deliveries, built once per command — once
// per rendered locale for a templated event — and shared by its devices.
type commandTexts struct {
	locales       map[string]streams.LocaleText
	defaultLocale string
	deliveries    map[string]*provider.Delivery
	// minter mints each device's receipt token; the shared payloads then
	// end in a placeholder of its length (receiptPlaceholder).
	minter   receipts.Minter
	receipts bool
}

// newCommandTexts builds cmd's deliveries; with a receipt key (nil: none)
// each device's gets its own receipt token, minted at now.
func newCommandTexts(cmd streams.PushCommand, key *receipts.Key, now time.Time) commandTexts {
	t := commandTexts{locales: cmd.Locales, defaultLocale: cmd.DefaultLocale, deliveries: map[string]*provider.Delivery{}}
	if key != nil {
		t.minter, t.receipts = key.Minter(cmd.EventID, now), true
	}
	add := func(tag string, c streams.PushCommand) {
		d := newDelivery(c)
		if t.receipts {
			d.Payload = buildPayloadReceipt(c, receiptPlaceholder)
		}
		t.deliveries[tag] = &d
	}
	if len(cmd.Locales) == 0 {
		add("", cmd)
		return t
	}
	for tag, lt := range cmd.Locales {
		c := cmd
		c.Title, c.Body = lt.Title, lt.Body
		add(tag, c)
	}
	if _, ok := cmd.Locales[cmd.DefaultLocale]; !ok {
		// Not from this pipeline (the planner refuses it); the command's
		// own title and body stand in.
		add(cmd.DefaultLocale, cmd)
	}
	return t
}

// of is rc's delivery: its student's locale's (read-only, shared).
func (t commandTexts) of(rc recipient) *provider.Delivery {
	if len(t.locales) == 0 {
		return t.deliveries[""]
	}
	return t.deliveries[notifications.PickLocale(rc.locale, t.locales, t.defaultLocale)]
}

// deliveryOf is rc's delivery, a copy it may own: with receipts on, its
// own token in Receipt and at the end of its payload.
func (t commandTexts) deliveryOf(rc recipient) provider.Delivery {
	d := *t.of(rc)
	if !t.receipts {
		return d
	}
	tok := t.minter.Token(rc.user, rc.platform)
	if tok == "" {
		return d
	}
	d.Receipt = tok
	if at := len(d.Payload) - len(receiptPlaceholder) - len(`"}`); at > 0 && string(d.Payload[at:at+len(receiptPlaceholder)]) == receiptPlaceholder {
		p := make([]byte, len(d.Payload))
		copy(p, d.Payload)
		copy(p[at:], tok)
		d.Payload = p
	}
	return d
}

// receiptPlaceholder stands for the device's token in a command's shared
// payload: as long as every token, of characters JSON does not escape, so
// the payload's size is final before any token is minted.
var receiptPlaceholder = strings.Repeat("0", receipts.TokenLen)

// defaultTitle is shown when the command carries no title.
const defaultTitle = "New course material"

// ellipsis ends a shortened title.
const ellipsis = "…"

// buildPayload encodes the message once per command so it fits one Web Push
// record (webpush.MaxPayload). It is encoded without HTML escaping: the
// payload is never embedded in HTML, and escaping turns each & < > into six
// bytes, enough to push a legal URL over the limit. When it does not fit,
// the longer optional field, judged by its encoded size, gives way first:
// the URL is dropped (a cut URL is a wrong URL), the title is shortened to
// fit and ends with "…". The required ids are never touched; if they alone
// do not fit, the payload is returned as is and the sender records it as a
// permanent failure (payload too large).
func buildPayload(cmd streams.PushCommand) []byte { return buildPayloadReceipt(cmd, "") }

// buildPayloadReceipt is buildPayload with a receipt (never shortened:
// it is one of the required fields).
func buildPayloadReceipt(cmd streams.PushCommand, receipt string) []byte {
	p := pushPayload{Title: cmd.Title, Body: cmd.Body, URL: cmd.URL, EventID: cmd.EventID, CourseID: cmd.CourseID, CollapseKey: cmd.CollapseKey,
		Receipt: receipt}
	if cmd.Type != streams.TypeMaterial {
		p.Type = cmd.Type
	}
	if len(cmd.Data) > 0 {
		p.Data = compactJSON(cmd.Data)
	}
	if p.Title == "" {
		p.Title = defaultTitle
	}
	full := p.Title // p.Title is full[:keep] + ellipsis once shortened
	keep := len(full)
	for {
		b := encodeJSON(p)
		excess := len(b) - webpush.MaxPayload
		if excess <= 0 {
			return b
		}
		title, url := len(encodeJSON(p.Title)), len(encodeJSON(p.URL))
		switch {
		case p.URL != "" && url >= title:
			p.URL = ""
		case keep > 0:
			// Every byte cut from the raw title shortens its encoding by at
			// least one byte (escapes only lengthen), so one cut of the
			// excess, plus room for the ellipsis when it is new, is enough
			// unless the cut lands inside a rune or an escape; the loop
			// checks again. The title is cut no shorter than the URL: then
			// the URL is the longer field and gives way next.
			cut := excess
			if keep == len(full) {
				cut += len(ellipsis)
			}
			if p.URL != "" {
				cut = max(1, min(cut, title-url))
			}
			keep = max(0, keep-cut)
			for keep > 0 && !utf8.RuneStart(full[keep]) {
				keep--
			}
			p.Title = full[:keep] + ellipsis
		case p.URL != "":
			p.URL = ""
		default:
			return b
		}
	}
}

// encodeJSON encodes v as JSON without HTML escaping (and without the
// encoder's trailing newline). The values encoded here always encode.
func encodeJSON(v any) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

// compactJSON is b without insignificant white space (jsonb's text form
// has a space after every : and ,); b itself if it is not JSON.
func compactJSON(b []byte) json.RawMessage {
	var buf bytes.Buffer
	if json.Compact(&buf, b) != nil {
		return b
	}
	return buf.Bytes()
}

// collapseTopic is the RFC 8030 Topic of a notification's collapse key:
// the first 16 bytes of its SHA-256 in base64url (22 characters; a Topic
// is at most 32 of the base64url alphabet, which a key need not be), so
// the newest notification of a key replaces an undelivered older one.
func collapseTopic(key string) string {
	h := sha256.Sum256([]byte(key))
	return base64.RawURLEncoding.EncodeToString(h[:16])
}

// pushTopic is the command's Topic: its collapse key's, else its event's.
func pushTopic(cmd streams.PushCommand) string {
	if cmd.CollapseKey != "" {
		return collapseTopic(cmd.CollapseKey)
	}
	return eventTopic(cmd.EventID)
}

// eventTopic is the RFC 8030 Topic of an event's pushes: the event id's 16
// bytes in base64url, 22 characters (32 are allowed). A push service keeps
// only the newest undelivered message per topic and subscription, so a
// resend of the same event (a retry, a redelivery after a crash) replaces
// a copy that has not reached an offline browser yet instead of adding
// one. The shipped service worker collapses what was delivered the same
// way (tag = event id). An id that is not a uuid (never, after
// DecodePushCommand) gets no Topic.
func eventTopic(eventID string) string {
	if !streams.IsUUID(eventID) {
		return ""
	}
	u, err := uuid.Parse(eventID)
	if err != nil {
		return ""
	}
	return base64.RawURLEncoding.EncodeToString(u[:])
}
