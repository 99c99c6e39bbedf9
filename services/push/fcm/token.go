package fcm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/notify-dev/notify/services/push/provider"
)

// accessToken is an OAuth 2.0 access token and when to replace it.
type accessToken struct {
	header string // "Bearer …", the Authorization value
	// sendHeader is the messages:send request header with this token,
	// shared read-only by every request that uses it (a RoundTripper must
	// not modify a request).
	sendHeader http.Header
	refreshAt  time.Time // from here on one caller fetches the next while the rest keep using this one
	expires    time.Time // from here on nobody uses it
}

// refresh is one token exchange in progress; done closes when tok or err
// is set.
type refresh struct {
	done chan struct{}
	tok  *accessToken
	err  error
}

// tokenSource caches the access token. Sends read it without a lock; when
// it is due for renewal exactly one caller exchanges the assertion while
// the others keep using the current token, or, once it has expired, wait
// for the exchange.
type tokenSource struct {
	creds         *Credentials
	client        *http.Client
	refreshBefore time.Duration
	timeout       time.Duration
	onExchange    func(err error)
	now           func() time.Time // the client's clock

	cur atomic.Pointer[accessToken]
	mu  sync.Mutex
	inf *refresh // the exchange in progress, nil when none
	// After a failed exchange none is tried before failedUntil: sends
	// keep the current token while it is valid, and get the failure
	// otherwise, so an unreachable or refusing token endpoint sees one
	// exchange per exchangeBackoff, not one per message.
	failedUntil time.Time
	failErr     error
}

// defaultTokenLifetime is assumed when the token endpoint gives no
// expires_in.
const defaultTokenLifetime = time.Hour

// exchangeBackoff is how long a failed exchange stands for the next ones.
const exchangeBackoff = time.Second

// ErrTokenExchange is wrapped by the errors of sends whose access token
// could not be obtained.
var ErrTokenExchange = errors.New("FCM access token exchange failed")

// exchangeError is a refused exchange: the credentials are wrong, which no
// retry fixes.
type exchangeError struct {
	status int
	msg    string
}

func (e *exchangeError) Error() string {
	return fmt.Sprintf("%s: token endpoint answered %d: %s", ErrTokenExchange.Error(), e.status, e.msg)
}

func (e *exchangeError) Unwrap() error { return ErrTokenExchange }

// permanent reports whether the token endpoint refused the credentials
// (4xx other than 408 and 429) rather than failing for now.
func (e *exchangeError) permanent() bool {
	return e.status >= 400 && e.status < 500 && e.status != http.StatusRequestTimeout && e.status != http.StatusTooManyRequests
}

// get returns a token valid now.
func (ts *tokenSource) get(ctx context.Context) (*accessToken, error) {
	for {
		now := ts.now()
		if t := ts.cur.Load(); t != nil && now.Before(t.refreshAt) {
			return t, nil
		}
		ts.mu.Lock()
		t := ts.cur.Load()
		if t != nil && now.Before(t.refreshAt) {
			ts.mu.Unlock()
			return t, nil
		}
		r := ts.inf
		if r == nil && now.Before(ts.failedUntil) {
			err := ts.failErr
			ts.mu.Unlock()
			if t != nil && now.Before(t.expires) {
				return t, nil
			}
			return nil, err
		}
		if r == nil {
			r = &refresh{done: make(chan struct{})}
			ts.inf = r
			ts.mu.Unlock()
			ts.exchange(ctx, r)
			if r.err != nil {
				if t != nil && ts.now().Before(t.expires) {
					return t, nil // renewal failed early: the current token still serves
				}
				return nil, r.err
			}
			return r.tok, nil
		}
		ts.mu.Unlock()
		if t != nil && now.Before(t.expires) {
			return t, nil // still good while the one caller renews it
		}
		select {
		case <-r.done:
			if r.err != nil {
				if t != nil && ts.now().Before(t.expires) {
					return t, nil
				}
				return nil, r.err
			}
			// Fresh from the exchange: used even when its lifetime is so
			// short it is already due again (the next caller renews it).
			return r.tok, nil
		case <-ctx.Done():
			return nil, fmt.Errorf("waiting for the FCM access token: %w", ctx.Err())
		}
	}
}

// invalidate drops t after the push service refused it (401), unless a
// newer token has replaced it already: of many sends refused with the same
// token, only one causes an exchange.
func (ts *tokenSource) invalidate(t *accessToken) {
	ts.mu.Lock()
	if ts.cur.Load() == t {
		ts.cur.Store(nil)
	}
	ts.mu.Unlock()
}

// exchange runs the one exchange of r and publishes its result. It is not
// bound to the caller's cancellation: the callers waiting on it are not
// all the caller.
func (ts *tokenSource) exchange(ctx context.Context, r *refresh) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ts.timeout)
	defer cancel()
	tok, err := ts.fetch(ctx)
	ts.onExchange(err)
	ts.mu.Lock()
	if err == nil {
		ts.cur.Store(tok)
		ts.failedUntil, ts.failErr = time.Time{}, nil
	} else {
		ts.failedUntil, ts.failErr = ts.now().Add(exchangeBackoff), err
	}
	r.tok, r.err = tok, err
	ts.inf = nil
	ts.mu.Unlock()
	close(r.done)
}

func (ts *tokenSource) fetch(ctx context.Context) (*accessToken, error) {
	now := ts.now()
	assertion, err := ts.creds.Assertion(now)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokenExchange, err)
	}
	form := url.Values{"grant_type": {assertionGrant}, "assertion": {assertion}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ts.creds.TokenURI, strings.NewReader(form))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokenExchange, err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := ts.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrTokenExchange, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("%w: read answer: %w", ErrTokenExchange, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error       string `json:"error"`
			Description string `json:"error_description"`
		}
		msg := provider.Sanitize(body, 200)
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			msg = e.Error
			if e.Description != "" {
				msg += ": " + e.Description
			}
		}
		return nil, &exchangeError{status: resp.StatusCode, msg: msg}
	}
	var t struct {
		AccessToken string  `json:"access_token"`
		ExpiresIn   float64 `json:"expires_in"`
		TokenType   string  `json:"token_type"`
	}
	if err := json.Unmarshal(body, &t); err != nil || t.AccessToken == "" {
		return nil, fmt.Errorf("%w: answer has no access_token", ErrTokenExchange)
	}
	if t.TokenType != "" && !strings.EqualFold(t.TokenType, "Bearer") {
		return nil, fmt.Errorf("%w: token_type %q, want Bearer", ErrTokenExchange, t.TokenType)
	}
	// The lifetime counts from before the request, so the token is never
	// used past its real expiry; renewal starts refreshBefore ahead, or at
	// half the lifetime for short-lived tokens.
	life := time.Duration(t.ExpiresIn * float64(time.Second))
	if t.ExpiresIn <= 0 || t.ExpiresIn > 1e6 {
		// Not said (it is only RECOMMENDED, RFC 6749 §5.1) or absurd:
		// Google's hour, and a 401 renews it sooner if need be. Never a
		// token per message.
		life = defaultTokenLifetime
	}
	ahead := min(ts.refreshBefore, life/2)
	header := "Bearer " + t.AccessToken
	return &accessToken{
		header:     header,
		sendHeader: http.Header{"Authorization": {header}, "Content-Type": {"application/json; charset=utf-8"}},
		expires:    now.Add(life),
		refreshAt:  now.Add(life - ahead),
	}, nil
}
