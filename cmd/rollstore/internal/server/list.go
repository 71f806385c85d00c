package server

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"

	"github.com/rollstore/rollstore/engine"
)

// List page sizes: the default, and the most one page may hold. A larger
// limit is lowered to the maximum rather than refused (as AIP-158 advises),
// so clients can ask for "as many as you allow".
const (
	defaultListLimit = 100
	maxListLimit     = 1000
)

func (s *Server) listRollouts(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	opts := engine.ListOptions{
		RolloutID:     q.Get("rollout_id"),
		ProblemID:     q.Get("problem_id"),
		PolicyVersion: q.Get("policy_version"),
		Prefix:        q.Get("prefix"),
		StartAfter:    q.Get("start_after"),
		Limit:         defaultListLimit,
	}
	if q.Has("limit") {
		// A limit too large for an integer is lowered like any other.
		n, ok := parseDigits(q.Get("limit"))
		if !ok || n <= 0 {
			return badRequest("limit must be a positive integer, got %q", q.Get("limit"))
		}
		opts.Limit = int(min(n, maxListLimit))
	}
	v, err := versionParam(r)
	if err != nil {
		return err
	}
	opts.Version = v
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	bind := listingBinding(tb.Name(), opts)
	if opts.PageToken, err = unwrapPageToken(q.Get("page_token"), bind); err != nil {
		return err
	}
	page, err := tb.List(r.Context(), opts)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, struct {
		Records       []recordView `json:"records"`
		NextPageToken string       `json:"next_page_token,omitempty"`
	}{s.viewsOf(page.Records), wrapPageToken(page.NextPageToken, bind)})
	return nil
}

// A page token continues one listing: the engine's position, bound to the
// table, filters and pinned version it was issued for, so that a token
// replayed against another listing is refused instead of starting it
// somewhere in the middle. The binding is a checksum, not a secret: a
// position reveals only an id the caller was already shown.
const pageTokenPrefix = "p1."

func listingBinding(table string, o engine.ListOptions) string {
	h := sha256.New()
	fields := []string{table, o.RolloutID, o.ProblemID, o.PolicyVersion, strconv.FormatUint(o.Version, 10)}
	if o.Prefix != "" || o.StartAfter != "" {
		// Only then, so that tokens of listings without them, issued
		// before they existed, still continue their listings.
		fields = append(fields, o.Prefix, o.StartAfter)
	}
	for _, f := range fields {
		h.Write([]byte(strconv.Itoa(len(f))))
		h.Write([]byte{':'})
		h.Write([]byte(f))
	}
	return base64.RawURLEncoding.EncodeToString(h.Sum(nil)[:9])
}

func wrapPageToken(pos, bind string) string {
	if pos == "" {
		return ""
	}
	return pageTokenPrefix + bind + "." + pos
}

func unwrapPageToken(tok, bind string) (string, error) {
	if tok == "" {
		return "", nil
	}
	rest, ok := strings.CutPrefix(tok, pageTokenPrefix)
	b, pos, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || pos == "" {
		return "", badRequest("page_token is malformed: pass next_page_token from the previous page unchanged")
	}
	if b != bind {
		return "", badRequest("page_token belongs to another listing: the table, filters and version must be those of the page that returned it")
	}
	return pos, nil
}

// scan streams the table as an Arrow IPC stream. An error before the first
// byte is answered as JSON; after it, the connection is cut so the client
// sees a broken stream rather than a short one that looks complete.
func (s *Server) scan(w http.ResponseWriter, r *http.Request) error {
	v, err := versionParam(r)
	if err != nil {
		return err
	}
	opts := engine.ScanOptions{Version: v}
	if q := r.URL.Query(); q.Has("payloads") {
		if opts.WithPayloads, err = strconv.ParseBool(q.Get("payloads")); err != nil {
			return badRequest("payloads must be true or false, got %q", q.Get("payloads"))
		}
	}
	tb, err := s.table(r)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", mediaArrow)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	dw := s.newDownload(w)
	if err := tb.Scan(r.Context(), dw, opts); err != nil {
		w.Header().Del("Content-Type")
		if dw.cause != nil {
			return dw.cause
		}
		return err
	}
	return nil
}
