package gateway

import (
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"strconv"
	"time"
)

//go:embed console
var consoleFiles embed.FS

// consoleInfo is GET /admin/console.
type consoleInfo struct {
	// JaegerUIURL is admin.jaeger_ui_url; empty means no links.
	JaegerUIURL string `json:"jaeger_ui_url"`
	// Traces says whether rejected traces are kept (tracing is on).
	Traces bool `json:"traces"`
	// Started is when the server started.
	Started time.Time `json:"started"`
}

// consoleRoutes serves the console on mux, the admin listener's: a page
// (GET /) that polls the admin JSON API once a second. Everything it needs
// is embedded (consoleFiles); it loads nothing from elsewhere.
//
// The JSON API (documented in docs/observability.md, "Console"):
//
//	GET /admin/tenants        every tenant's state (admission.TenantState), and
//	                          the rejections of requests without a valid key
//	GET /admin/tenants/{id}   one tenant's
//	GET /admin/pools          the pools, the adaptive limit, the shed thresholds
//	GET /admin/rejections     the latest rejections, newest first (?limit=N, at most admin.recent_rejections)
//	GET /admin/traces/{id}    a kept rejected trace, by trace ID or request ID
//	GET /admin/history        every tenant's and pool's last 15 minutes, in 10 s samples (?tenant=ID: that tenant's alone)
//	GET /admin/console        what the console needs to know of the server
//
// The latest rejections are kept whether or not anyone looks (the last
// admin.recent_rejections, 1,000 by default), so whoever opens the console
// after an alert sees the flood that raised it; so is the history
// (admission.History, sampled from New to Close), which the page draws as
// sparklines.
func (s *Server) consoleRoutes(mux *http.ServeMux) {
	static, _ := fs.Sub(consoleFiles, "console")
	files := http.FileServerFS(static)
	mux.Handle("GET /{$}", files)
	mux.Handle("GET /console/", http.StripPrefix("/console/", files))
	mux.HandleFunc("GET /admin/console", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, consoleInfo{JaegerUIURL: s.cfg.Load().Admin.JaegerUIURL, Traces: s.traces != nil, Started: s.started})
	})
	mux.HandleFunc("GET /admin/tenants", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, map[string]any{"tenants": s.gate.TenantStates(),
			"unauthenticated_rejections_last_minute": s.gate.UnauthenticatedRejections()})
	})
	mux.HandleFunc("GET /admin/tenants/{id}", func(w http.ResponseWriter, r *http.Request) {
		st, ok := s.gate.TenantState(r.PathValue("id"))
		if !ok {
			writeJSONError(w, http.StatusNotFound, "unknown tenant")
			return
		}
		writeJSON(w, st)
	})
	mux.HandleFunc("GET /admin/pools", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.gate.PoolsState())
	})
	mux.HandleFunc("GET /admin/rejections", func(w http.ResponseWriter, r *http.Request) {
		limit := 50
		if n, err := strconv.Atoi(r.URL.Query().Get("limit")); err == nil && n > 0 {
			limit = n
		}
		writeJSON(w, map[string]any{"rejections": s.gate.RecentRejections(limit)})
	})
	mux.HandleFunc("GET /admin/history", func(w http.ResponseWriter, r *http.Request) {
		writeCompactJSON(w, s.history.h.View(r.URL.Query().Get("tenant")))
	})
	mux.HandleFunc("GET /admin/traces/{id}", func(w http.ResponseWriter, r *http.Request) {
		if s.traces == nil {
			writeJSONError(w, http.StatusNotFound, "tracing is off: no traces are kept")
			return
		}
		t, ok := s.traces.Find(r.PathValue("id"))
		if !ok {
			writeJSONError(w, http.StatusNotFound, "no kept rejected trace with that trace ID or request ID")
			return
		}
		writeJSON(w, t)
	})
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// writeCompactJSON is writeJSON without the indentation, for long arrays
// of numbers (the history's series), which it would put one to a line.
func writeCompactJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	json.NewEncoder(w).Encode(v)
}

func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
