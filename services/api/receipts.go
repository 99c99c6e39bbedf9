package api

import (
	"errors"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/notify-dev/notify/services/receipts"
)

// Receipts (package receipts): the service worker reports a push it
// showed and one the student clicked, authenticated by the receipt token
// of that push rather than the student's login, which a service worker
// does not have. The inbox's mark-read counts the third kind, 'read'.

// Error codes of the receipts endpoint.
const (
	errReceiptTokenInvalid   = "receipt_token_invalid"
	errReceiptTokenExpired   = "receipt_token_expired"
	errReceiptTokenForeign   = "receipt_token_foreign"
	errInvalidReceiptKind    = "invalid_receipt_kind"
	errReceiptsNotConfigured = "receipts_not_configured"
)

// receiptScheme is the Authorization scheme of a receipt token.
const receiptScheme = "Receipt"

// ReceiptRequest is the body of POST /v1/me/notifications/{event_id}/receipts.
type ReceiptRequest struct {
	Kind string `json:"kind"`
}

// ReceiptResponse says whether the receipt counted: false when the
// student's receipt of that kind was counted before (another device, a
// replay), which is not an error.
type ReceiptResponse struct {
	Counted bool `json:"counted"`
}

func (s *Server) handleReceipt(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Receipts == nil {
		writeError(w, newError(http.StatusServiceUnavailable, errReceiptsNotConfigured, "receipts are not configured on this server (%s)", receipts.EnvKey))
		return
	}
	ev, e := pathUUID(r, "event_id", errNotificationNotFound, "notification")
	if e != nil {
		writeError(w, e)
		return
	}
	claims, e := s.receiptClaims(w, r, ev)
	if e != nil {
		writeError(w, e)
		return
	}
	user := UUID(claims.UserID)
	if sw, ok := w.(*statusWriter); ok {
		sw.who = claims.UserID.String()
	}
	if s.limiter != nil {
		if ok, wait := s.limiter.allow(user, s.cfg.Now()); !ok {
			s.m.rateLimited.Inc()
			writeRateLimited(w, wait, s.cfg.RateLimit, "user", s.cfg.RateBurst)
			return
		}
	}
	var req ReceiptRequest
	if e := readStrictJSON(w, r, &req); e != nil {
		writeError(w, e)
		return
	}
	if req.Kind != receipts.KindShown && req.Kind != receipts.KindClicked {
		writeError(w, newError(http.StatusBadRequest, errInvalidReceiptKind, `kind must be "shown" or "clicked" (reads are counted by POST /v1/me/notifications/{event_id}/read)`))
		return
	}
	counted, err := receipts.Record(r.Context(), s.pool, uuid.UUID(ev), claims.UserID, req.Kind, claims.Platform)
	switch {
	case errors.Is(err, receipts.ErrNoNotification):
		writeError(w, newError(http.StatusNotFound, errNotificationNotFound, "no such notification"))
		return
	case err != nil:
		s.internalError(w, r, "record receipt", err)
		return
	}
	writeJSON(w, http.StatusOK, ReceiptResponse{Counted: counted})
}

// receiptClaims verifies the request's receipt token for ev: 401 when it
// is missing, not notify's or expired, 403 when it is notify's for another
// event.
func (s *Server) receiptClaims(w http.ResponseWriter, r *http.Request, ev UUID) (receipts.Claims, *Error) {
	unauthorized := func(code, msg string) (receipts.Claims, *Error) {
		w.Header().Set("WWW-Authenticate", receiptScheme+` realm="notify", error="invalid_token"`)
		return receipts.Claims{}, newError(http.StatusUnauthorized, code, "%s", msg)
	}
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, receiptScheme) {
		return unauthorized(errReceiptTokenInvalid, `give the push's receipt token: Authorization: Receipt <token>`)
	}
	c, err := s.cfg.Receipts.Verify(token, uuid.UUID(ev), s.cfg.Now())
	switch {
	case errors.Is(err, receipts.ErrExpired):
		return unauthorized(errReceiptTokenExpired, "the receipt token expired")
	case errors.Is(err, receipts.ErrForeign):
		return receipts.Claims{}, newError(http.StatusForbidden, errReceiptTokenForeign, "the receipt token is for another notification")
	case err != nil:
		return unauthorized(errReceiptTokenInvalid, "the receipt token is not valid")
	}
	return c, nil
}
