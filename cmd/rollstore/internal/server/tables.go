package server

import (
	"net/http"
	"strconv"

	"github.com/rollstore/rollstore/engine"
)

// table opens the table named in the path. Names are validated by the
// engine's layout, whose alphabet keeps every key inside the table's root.
func (s *Server) table(r *http.Request) (*engine.Table, error) {
	return s.db.Table(r.Context(), r.PathValue("table"))
}

func (s *Server) listTables(w http.ResponseWriter, r *http.Request) error {
	names, err := s.db.ListTables(r.Context())
	if err != nil {
		return err
	}
	if names == nil {
		names = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"tables": names})
	return nil
}

func (s *Server) createTable(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("table")
	var opts engine.TableOptions
	if q := r.URL.Query(); q.Has("partitions") {
		n, err := strconv.Atoi(q.Get("partitions"))
		if err != nil || n < 1 || n > engine.MaxPartitions {
			return badRequest("partitions %q: want an integer from 1 to %d", q.Get("partitions"), engine.MaxPartitions)
		}
		opts.Partitions = n
	}
	if err := s.db.CreateTableWith(r.Context(), name, opts); err != nil {
		return err
	}
	if tb, err := s.db.Table(r.Context(), name); err == nil {
		_ = s.join(r.Context(), tb) // the others join within their join loop
	}
	w.Header().Set("Location", "/v1/tables/"+name)
	writeJSON(w, http.StatusCreated, map[string]string{"name": name})
	return nil
}

func (s *Server) tableStatus(w http.ResponseWriter, r *http.Request) error {
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	st, err := tb.Status(r.Context())
	if err != nil {
		return err
	}
	consumers, err := consumersOf(r.Context(), tb)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, tableStatusView{Status: st, Consumers: consumers})
	return nil
}

func (s *Server) dropTable(w http.ResponseWriter, r *http.Request) error {
	if err := s.db.DropTable(r.Context(), r.PathValue("table")); err != nil {
		return err
	}
	s.metrics.forgetTable(r.PathValue("table"))
	s.forgetConsumersOf(r.PathValue("table"))
	s.passLog.forget(r.PathValue("table"))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) versions(w http.ResponseWriter, r *http.Request) error {
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	vs, err := tb.Versions(r.Context())
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"versions": vs})
	return nil
}

// merge seals the open generation first, so that "merge now" merges what
// was written before the request, then runs one pass.
func (s *Server) merge(w http.ResponseWriter, r *http.Request) error {
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	if err := tb.Flush(r.Context()); err != nil {
		return err
	}
	res, err := s.mergeTable(r.Context(), tb, "api")
	if err != nil {
		return err
	}
	if res.Merged == nil {
		res.Merged = []engine.GenRef{}
	}
	if res.Reclaimed == nil {
		res.Reclaimed = []engine.GenRef{}
	}
	writeJSON(w, http.StatusOK, res)
	return nil
}
