package server

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// InspectSocket returns the path of the inspection socket that goes with a CRI socket:
// "inspect.sock" in the same directory, with the same permissions.
func InspectSocket(criSocket string) string {
	return filepath.Join(filepath.Dir(criSocket), "inspect.sock")
}

// InspectHandler serves the journal's view for `crijournal inspect` while the daemon holds
// the file: GET /records (every record, JSON) and GET /check (bbolt's consistency check
// and the journal's invariants, JSON list of problems).
func (s *Server) InspectHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /records", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, s.journal.List(nil))
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
