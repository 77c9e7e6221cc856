package server

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"time"
)

// InspectHandler serves the journal's view for `crijournal inspect` while the daemon holds
// the file: GET /records (every record, JSON), GET /watch (every record, then again after
// each change: one JSON list per line, until the client goes away) and GET /check (bbolt's
// consistency check and the journal's invariants, JSON list of problems).
func (s *Server) InspectHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /records", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.journal.List(nil))
	})
	mux.HandleFunc("GET /watch", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/jsonl")
		enc := json.NewEncoder(w)
		flusher, _ := w.(http.Flusher)
		for {
			records, changed := s.journal.WatchAll(nil)
			if err := enc.Encode(records); err != nil {
				return // the client went away
			}
			if flusher != nil {
				flusher.Flush()
			}
			select {
			case <-changed:
			case <-r.Context().Done():
				return
			}
			// A burst of changes (one creation is several) makes one snapshot.
			select {
			case <-time.After(watchCoalesce):
			case <-r.Context().Done():
				return
			}
		}
	})
	mux.HandleFunc("GET /check", func(w http.ResponseWriter, r *http.Request) {
		problems := []string{}
		for _, p := range s.journal.Check() {
			problems = append(problems, p.Error())
		}
		writeJSON(w, problems)
	})
	return mux
}

// watchCoalesce is how long GET /watch lets changes gather before its next snapshot.
const watchCoalesce = 50 * time.Millisecond

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}

// ServeInspect serves InspectHandler on the unix socket at path until ctx ends.
func (s *Server) ServeInspect(ctx context.Context, path string) error {
	lis, err := Listen(path)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: s.InspectHandler(), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(lis)
	go func() {
		<-ctx.Done()
		srv.Close()
		os.Remove(path)
	}()
	return nil
}
