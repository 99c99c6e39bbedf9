package api

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/auth"
)

// principal is who a request acts for, resolved once per request from its
// bearer token: a user, or a service with scopes. Exactly one of User and
// Service is set.
type principal struct {
	// User is the user's uuid: the token's subject after ids mapping.
	// Zero for a service.
	User UUID
	// Service is the service's name (the subject service:NAME). "" for a
	// user.
	Service string
	// Scopes are the service's scopes; a user has none.
	Scopes []auth.Scope
}

// IsService reports whether p is a service credential.
func (p principal) IsService() bool { return p.Service != "" }

// Has reports whether p is a service holding scope.
func (p principal) Has(scope auth.Scope) bool {
	return p.IsService() && slices.Contains(p.Scopes, scope)
}

// String is p for logs: the user's uuid or service:NAME.
func (p principal) String() string {
	if p.IsService() {
		return auth.ServicePrefix + p.Service
	}
	return p.User.String()
}

// key is the uuid p's per-caller state is kept under: the rate limiter's
// bucket and the Idempotency-Key records of its publishes. A service's is
// derived from its name, so it is the same on every replica and never a
// user's.
func (p principal) key() UUID {
	if p.IsService() {
		return serviceKey(p.Service)
	}
	return p.User
}

// serviceKeys is the namespace of services' derived uuids (a fixed random
// uuid: it must never change, or services' stored Idempotency-Keys would
// be forgotten).
var serviceKeys = uuid.MustParse("3d0c7a4e-5b1f-4c8e-9f2a-6e7d8c9b0a1f")

func serviceKey(name string) UUID {
	return UUID(uuid.NewSHA1(serviceKeys, []byte(auth.ServicePrefix+name)))
}

type principalCtxKey struct{}

// authorize resolves the request's principal — once per request: a
// principal resolved earlier in the same request is reused — and checks
// it holds scope. It writes the error itself and returns false: 401 (no
// token, or one that does not verify or names no user), 429 (rate
// limited), 503 (the user lookup failed) or 403 (scope missing). scope ""
// asks for any authenticated principal; the route then decides, as the
// publish route does for a course's instructor.
//
// A route that also lets users in on their own resources (an instructor
// on their course) calls authorize with "" and checks Has itself.
func (s *Server) authorize(w http.ResponseWriter, r *http.Request, scope auth.Scope) (principal, bool) {
	p, ok := r.Context().Value(principalCtxKey{}).(principal)
	if !ok {
		if p, ok = s.resolve(w, r); !ok {
			return principal{}, false
		}
	}
	if scope != "" && !p.Has(scope) {
		writeError(w, newError(http.StatusForbidden, errForbidden, "this needs a service credential with scope %s", scope))
		return principal{}, false
	}
	return p, true
}

// withPrincipal wraps a handler that serves users and services alike: it
// resolves the principal and hands it on (the handler checks the rights).
func (s *Server) withPrincipal(h func(http.ResponseWriter, *http.Request, principal)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p, ok := s.resolve(w, r)
		if !ok {
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalCtxKey{}, p)), p)
	}
}

// authed wraps a handler of a user's own resources (/v1/me/…): a service
// credential has none, and is refused with 403.
func (s *Server) authed(h func(http.ResponseWriter, *http.Request, UUID)) http.HandlerFunc {
	return s.withPrincipal(func(w http.ResponseWriter, r *http.Request, p principal) {
		if p.IsService() {
			writeError(w, newError(http.StatusForbidden, errForbidden, "a service credential has no /v1/me resources: this route takes a user's token"))
			return
		}
		h(w, r, p.User)
	})
}

// resolve authenticates the request and applies the caller's rate limit,
// recording the caller for the access log; on failure it writes the
// answer and returns false.
func (s *Server) resolve(w http.ResponseWriter, r *http.Request) (principal, bool) {
	p, e := s.authenticate(r)
	if e != nil {
		if e.Status == http.StatusUnauthorized {
			challenge := `Bearer realm="notify"`
			if e.Code != errUnauthorized || r.Header.Get("Authorization") != "" {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
		}
		writeError(w, e)
		return principal{}, false
	}
	if sw, ok := w.(*statusWriter); ok {
		sw.who = p.String()
	}
	lim, rate, burst, who := s.limiter, s.cfg.RateLimit, s.cfg.RateBurst, "user"
	if p.IsService() {
		lim, rate, burst, who = s.serviceLimiter, s.cfg.ServiceRateLimit, s.cfg.ServiceRateBurst, "service"
	}
	if lim != nil {
		if ok, wait := lim.allow(p.key(), s.cfg.Now()); !ok {
			s.m.rateLimited.Inc()
			writeRateLimited(w, wait, rate, who, burst)
			return principal{}, false
		}
	}
	return p, true
}

// writeRateLimited answers 429 rate_limited with Retry-After.
func writeRateLimited(w http.ResponseWriter, wait time.Duration, rate float64, who string, burst int) {
	secs := retryAfterSeconds(wait)
	w.Header().Set("Retry-After", strconv.Itoa(secs))
	writeError(w, newError(http.StatusTooManyRequests, errRateLimited,
		"too many requests: at most %g per second per %s (bursts of %d); retry after %d s", rate, who, burst, secs))
}

// tokenErrorMessages tell a client why its token was refused; none of them
// helps someone without the secret.
var tokenErrorMessages = []struct {
	err error
	msg string
}{
	{auth.ErrExpired, "token expired"},
	{auth.ErrNotYetValid, "token not valid yet (iat or nbf in the future)"},
	{auth.ErrIssuer, "token issuer not accepted"},
	{auth.ErrAudience, "token audience not accepted"},
	{auth.ErrLifetime, "token lifetime longer than this API accepts"},
	{auth.ErrUnknownSubject, "token subject is not a user"},
}

func (s *Server) authenticate(r *http.Request) (principal, *Error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return principal{}, newError(http.StatusUnauthorized, errUnauthorized, "missing bearer token")
	}
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return principal{}, newError(http.StatusUnauthorized, errUnauthorized, "Authorization must be: Bearer <token>")
	}
	now := s.cfg.Now()
	c, cached := s.tokens.Lookup(tok, now)
	if !cached {
		// A token the cache does not hold costs a signature check and a
		// user lookup: bounded per client address before either.
		if s.authLimiter != nil {
			if ok, wait := s.authLimiter.allow(clientKey(r), now); !ok {
				s.m.authRateLimited.Inc()
				secs := retryAfterSeconds(wait)
				e := newError(http.StatusTooManyRequests, errRateLimited,
					"too many new tokens from this address: at most %g per second (bursts of %d); retry after %d s", s.cfg.AuthRateLimit, s.cfg.AuthRateBurst, secs)
				e.RetryAfter = secs
				return principal{}, e
			}
		}
		var err error
		c, err = s.tokens.Verify(r.Context(), tok, now)
		if errors.Is(err, auth.ErrCheckFailed) {
			// The user lookup failed, not the token.
			if r.Context().Err() == nil {
				s.log.Error("authenticate: look up the token's user", "err", err)
			}
			return principal{}, newError(http.StatusServiceUnavailable, errUnavailable, "cannot check the token's user right now")
		}
		if err != nil {
			msg := "invalid token"
			for _, m := range tokenErrorMessages {
				if errors.Is(err, m.err) {
					msg = m.msg
					break
				}
			}
			s.log.Debug("token refused", "err", err, "remote", r.RemoteAddr)
			return principal{}, newError(http.StatusUnauthorized, errUnauthorized, "%s", msg)
		}
	}
	if name, ok := c.Service(); ok {
		if auth.CheckServiceName(name) != nil {
			return principal{}, newError(http.StatusUnauthorized, errUnauthorized, "token subject is not a valid service name")
		}
		return principal{Service: name, Scopes: c.Scopes}, nil
	}
	u, err := s.cfg.IDs.Map(c.Subject)
	if err != nil {
		// The subject check maps it too, so only a token verified before
		// the mapping changed can get here.
		return principal{}, newError(http.StatusUnauthorized, errUnauthorized, "token subject is not a user id")
	}
	return principal{User: UUID(u)}, nil
}

// clientKey is the rate limiter's key of the request's client address
// (the TCP peer; a proxy's X-Forwarded-For is not trusted).
func clientKey(r *http.Request) UUID {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	h := sha256.Sum256([]byte("client\x00" + host))
	return UUID(h[:16])
}

const sqlUserExists = `SELECT EXISTS (SELECT 1 FROM users WHERE id = $1)`

// userExists is the token cache's subject check, for user subjects (a
// service credential names no user): a token speaks for a user only while
// the subject, mapped to a uuid, is a row of users.
func (s *Server) userExists(ctx context.Context, c auth.Claims) error {
	u, err := s.cfg.IDs.Map(c.Subject)
	if err != nil {
		return fmt.Errorf("%w: %w", auth.ErrUnknownSubject, err)
	}
	s.m.userLookups.Inc()
	var ok bool
	if err := s.pool.QueryRow(ctx, sqlUserExists, UUID(u)).Scan(&ok); err != nil {
		return fmt.Errorf("look up user %s: %w", u, err)
	}
	if !ok {
		return fmt.Errorf("%w: %s", auth.ErrUnknownSubject, u)
	}
	return nil
}

// mapID maps a user or course id given from outside (a path param or a
// body field, named by what) to its uuid, or answers 400 invalid_id
// naming the problem (not a uuid and no namespace set, too long, …).
func (s *Server) mapID(raw, what string) (UUID, *Error) {
	u, err := s.cfg.IDs.Map(raw)
	if err != nil {
		return UUID{}, newError(http.StatusBadRequest, errInvalidID, "%s: %v", what, err)
	}
	return UUID(u), nil
}
