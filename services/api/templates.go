package api

import (
	"errors"
	"net/http"

	"github.com/notify-dev/notify/services/auth"
	"github.com/notify-dev/notify/services/notifications"
)

// Templates are the platform's, not a course's: only services manage
// them, with scope templates:write or notifications:send (a sender may
// define what it sends). Reading takes either too.
func (s *Server) templateAccess(w http.ResponseWriter, p principal) bool {
	if p.Has(auth.ScopeTemplatesWrite) || p.Has(auth.ScopeNotificationsSend) {
		return true
	}
	writeError(w, newError(http.StatusForbidden, errForbidden, "templates need a service credential with scope %s or %s", auth.ScopeTemplatesWrite, auth.ScopeNotificationsSend))
	return false
}

func templateType(r *http.Request) (string, *Error) {
	t := r.PathValue("type")
	if notifications.CheckType(t) != nil {
		return "", newError(http.StatusBadRequest, errInvalidType, "%q is not a notification type: 1–64 of a-z 0-9 . _ -, starting with a letter or digit", t)
	}
	return t, nil
}

// handlePutTemplate serves PUT /v1/templates/{type}: 201 created, 200
// replaced; the body is the stored template.
func (s *Server) handlePutTemplate(w http.ResponseWriter, r *http.Request, p principal) {
	if !s.templateAccess(w, p) {
		return
	}
	typ, e := templateType(r)
	if e != nil {
		writeError(w, e)
		return
	}
	body, e := readJSONBody(w, r)
	if e != nil {
		writeError(w, e)
		return
	}
	if e := checkJSON(body, &notifications.Template{}); e != nil {
		writeError(w, e)
		return
	}
	t, err := notifications.DecodeTemplate(body)
	if err != nil {
		writeError(w, notificationError(err))
		return
	}
	stored, created, err := notifications.PutTemplate(r.Context(), s.pool, typ, t, p.String())
	if err != nil {
		if e := notificationError(err); e.Status != http.StatusInternalServerError {
			writeError(w, e)
			return
		}
		s.internalError(w, r, "store template", err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	s.log.Info("template stored", "type", typ, "by", p.String(), "created", created)
	writeJSON(w, status, stored)
}

func (s *Server) handleGetTemplate(w http.ResponseWriter, r *http.Request, p principal) {
	if !s.templateAccess(w, p) {
		return
	}
	typ, e := templateType(r)
	if e != nil {
		writeError(w, e)
		return
	}
	t, err := notifications.GetTemplate(r.Context(), s.pool, typ)
	if errors.Is(err, notifications.ErrNoTemplate) {
		writeError(w, newError(http.StatusNotFound, errTemplateNotFound, "no template for type %s", typ))
		return
	}
	if err != nil {
		s.internalError(w, r, "read template", err)
		return
	}
	writeJSON(w, http.StatusOK, t)
}

func (s *Server) handleDeleteTemplate(w http.ResponseWriter, r *http.Request, p principal) {
	if !s.templateAccess(w, p) {
		return
	}
	typ, e := templateType(r)
	if e != nil {
		writeError(w, e)
		return
	}
	err := notifications.DeleteTemplate(r.Context(), s.pool, typ)
	if errors.Is(err, notifications.ErrNoTemplate) {
		writeError(w, newError(http.StatusNotFound, errTemplateNotFound, "no template for type %s", typ))
		return
	}
	if err != nil {
		s.internalError(w, r, "delete template", err)
		return
	}
	s.log.Info("template deleted", "type", typ, "by", p.String())
	w.WriteHeader(http.StatusNoContent)
}
