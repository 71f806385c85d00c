package server

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rollstore/rollstore/engine"
	"github.com/rollstore/rollstore/internal/version"
)

// The status page: GET /ui, a page of plain HTML whose script polls GET
// /v1/ui/state and redraws the tables in place. Everything it needs is
// embedded (ui/): no build step, nothing fetched from elsewhere.
//
// Auth: with tokens configured, the page and its state need the bearer
// token like the API, or the session cookie POST /ui/login sets for a
// browser (which cannot put a bearer token on a page load). The cookie is
// no copy of the token: it is an expiry signed with a key derived from the
// token (HMAC-SHA256), so it is good on every process that has the token,
// stops working when the token is removed from --auth-token-file, and
// opens only the read-only UI routes, never the API.

//go:embed ui/index.html ui/login.html ui/app.js ui/style.css
var uiFiles embed.FS

const (
	uiCookieName = "rollstore_ui"
	// uiSessionMax is how long a login lasts.
	uiSessionMax = 12 * time.Hour
	// uiMaxTables bounds the tables one state answer describes (each costs
	// a status, i.e. store requests); uiStatusParallelism how many
	// statuses are asked for at once.
	uiMaxTables         = 100
	uiStatusParallelism = 8
	// uiLoginMaxBytes bounds the login form.
	uiLoginMaxBytes = 8 << 10
)

// uiCSP lets the page load its own script and stylesheet and fetch its
// own state, and nothing else (no inline script, no framing).
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; " +
	"form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

var uiLoginTemplate = template.Must(template.ParseFS(uiFiles, "ui/login.html"))

// uiRoutes registers the status page's routes unless Config.DisableUI.
// They are registered public: each checks the token or the session cookie
// itself (uiAuthorized), since the API's check takes only the bearer
// token.
func (s *Server) uiRoutes() {
	if s.cfg.DisableUI {
		return
	}
	s.handle("GET /ui", s.uiPage, public)
	s.handle("GET /ui/static/{file}", s.uiStatic, public)
	s.handle("POST /ui/login", s.uiLogin, public)
	s.handle("POST /ui/logout", s.uiLogout, public)
	s.handle("GET /v1/ui/state", s.uiState, public)
}

// uiKeys are the session-signing keys, one per token, derived once.
type uiKeys struct {
	once sync.Once
	keys [][]byte
}

func (s *Server) uiSessionKeys() [][]byte {
	s.uiKeys.once.Do(func() {
		for _, t := range s.cfg.AuthTokens {
			m := hmac.New(sha256.New, []byte(t))
			m.Write([]byte("rollstore ui session key v1"))
			s.uiKeys.keys = append(s.uiKeys.keys, m.Sum(nil))
		}
	})
	return s.uiKeys.keys
}

func uiSign(key []byte, expiry int64) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("session\x00" + strconv.FormatInt(expiry, 10)))
	return m.Sum(nil)
}

// uiAuthorized says whether r may see the page and its state: no tokens
// configured, a valid bearer token, or a valid session cookie.
func (s *Server) uiAuthorized(r *http.Request) bool {
	return len(s.tokens) == 0 || s.authorized(r) || s.uiSessionValid(r, time.Now())
}

// uiSessionValid checks the session cookie: "v1.<expiry>.<signature>",
// unexpired and signed with the key of one of the tokens (every key is
// tried, in constant time, as authorized does).
func (s *Server) uiSessionValid(r *http.Request, now time.Time) bool {
	c, err := r.Cookie(uiCookieName)
	if err != nil {
		return false
	}
	parts := strings.Split(c.Value, ".")
	if len(parts) != 3 || parts[0] != "v1" {
		return false
	}
	expiry, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || expiry <= now.Unix() || expiry > now.Add(uiSessionMax+time.Minute).Unix() {
		return false
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return false
	}
	match := 0
	for _, k := range s.uiSessionKeys() {
		match |= subtle.ConstantTimeCompare(sig, uiSign(k, expiry))
	}
	return match == 1
}

// uiTokenIndex returns which configured token tok is, or -1, comparing
// every token in constant time.
func (s *Server) uiTokenIndex(tok string) int {
	sum := sha256.Sum256([]byte(tok))
	found := -1
	for i, t := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], t[:]) == 1 {
			found = i
		}
	}
	return found
}

// uiCookie is the session cookie (value "" with MaxAge -1 clears it).
// Secure when the request came over TLS, directly or through a proxy that
// says so; HttpOnly (the page's script never sees it); SameSite=Strict
// (another site's page cannot make the browser send it).
func uiCookie(r *http.Request, value string, maxAge int) *http.Cookie {
	return &http.Cookie{
		Name: uiCookieName, Value: value, Path: "/", MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https"),
	}
}

// uiHeaders are the headers of every HTML answer of the UI.
func uiHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func (s *Server) uiPage(w http.ResponseWriter, r *http.Request) error {
	if !s.uiAuthorized(r) {
		return s.uiLoginPage(w, "")
	}
	page, err := uiFiles.ReadFile("ui/index.html")
	if err != nil {
		return err
	}
	uiHeaders(w)
	w.Header().Set("Content-Length", strconv.Itoa(len(page)))
	_, _ = w.Write(page)
	return nil
}

// uiLoginPage answers 401 with the login form, and msg above it.
func (s *Server) uiLoginPage(w http.ResponseWriter, msg string) error {
	var buf bytes.Buffer
	if err := uiLoginTemplate.Execute(&buf, map[string]string{"Message": msg}); err != nil {
		return err
	}
	uiHeaders(w)
	w.Header().Set("WWW-Authenticate", `Bearer realm="rollstore"`)
	w.Header().Set("Content-Length", strconv.Itoa(buf.Len()))
	w.WriteHeader(http.StatusUnauthorized)
	_, _ = w.Write(buf.Bytes())
	return nil
}

// uiStatic serves the page's script and stylesheet. They hold no data, so
// they need no token (the login form uses the stylesheet).
func (s *Server) uiStatic(w http.ResponseWriter, r *http.Request) error {
	var ctype string
	switch name := r.PathValue("file"); name {
	case "app.js":
		ctype = "text/javascript; charset=utf-8"
	case "style.css":
		ctype = "text/css; charset=utf-8"
	default:
		return newError(http.StatusNotFound, codeRouteNotFound, "no file %q in the status page", name)
	}
	b, err := uiFiles.ReadFile("ui/" + r.PathValue("file"))
	if err != nil {
		return err
	}
	h := w.Header()
	h.Set("Content-Type", ctype)
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h.Set("X-Content-Type-Options", "nosniff")
	// Revalidated on every load, so a new binary's page never runs an old
	// script.
	h.Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
	return nil
}

// uiLogin takes the form of the login page: a valid token sets the
// session cookie and sends the browser to the page (303); anything else
// shows the form again (401).
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request) error {
	if len(s.tokens) == 0 {
		w.Header().Set("Location", "/ui")
		w.WriteHeader(http.StatusSeeOther)
		return nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, uiLoginMaxBytes)
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return err
		}
		return badRequest("the login form: %v", err)
	}
	i := s.uiTokenIndex(strings.TrimSpace(r.PostForm.Get("token")))
	if i < 0 {
		return s.uiLoginPage(w, "That is not a token of this server.")
	}
	expiry := time.Now().Add(uiSessionMax).Unix()
	value := "v1." + strconv.FormatInt(expiry, 10) + "." + base64.RawURLEncoding.EncodeToString(uiSign(s.uiSessionKeys()[i], expiry))
	http.SetCookie(w, uiCookie(r, value, int(uiSessionMax/time.Second)))
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Location", "/ui")
	w.WriteHeader(http.StatusSeeOther)
	return nil
}

// uiLogout clears the session cookie and sends the browser to the page
// (which, with auth on, is the login form again).
func (s *Server) uiLogout(w http.ResponseWriter, r *http.Request) error {
	http.SetCookie(w, uiCookie(r, "", -1))
	w.Header().Set("Location", "/ui")
	w.WriteHeader(http.StatusSeeOther)
	return nil
}

// uiStateBody is the answer of GET /v1/ui/state: what the page shows.
type uiStateBody struct {
	Time time.Time `json:"time"`
	// Version is the server's build; Shard the writer shard this process
	// owns ("" for a reader or a merger).
	Version string `json:"version"`
	Shard   string `json:"shard"`
	// Auth: tokens are configured (the page offers to log out).
	Auth   bool      `json:"auth"`
	Merger uiMerger  `json:"merger"`
	Tables []uiTable `json:"tables"`
	// MoreTables counts the tables beyond the first uiMaxTables, which are
	// not described.
	MoreTables int `json:"more_tables"`
}

type uiMerger struct {
	// Interval is the in-process merger's period; 0 when this process
	// runs none (role writer or reader, or --merge-interval 0).
	Interval time.Duration `json:"interval_ns"`
	// Passes counts the merger's passes since the process started;
	// LastPass is the latest (null before the first).
	Passes   int     `json:"passes"`
	LastPass *uiPass `json:"last_pass"`
}

type uiTable struct {
	Name string `json:"name"`
	// Status is GET /v1/tables/{table}'s answer, or Error why there is
	// none.
	Status *engine.Status `json:"status,omitempty"`
	Error  *uiError       `json:"error,omitempty"`
	// Consumers are the table's consumer groups with their lag (as in
	// the table's status).
	Consumers []groupView `json:"consumers"`
	// Merges are the table's recent merges by this process, newest first.
	Merges []uiMerge `json:"merges"`
}

type uiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (s *Server) uiState(w http.ResponseWriter, r *http.Request) error {
	if !s.uiAuthorized(r) {
		return newError(http.StatusUnauthorized, codeUnauthorized, "missing or invalid bearer token or session cookie")
	}
	names, err := s.db.ListTables(r.Context())
	if err != nil {
		return err
	}
	body := uiStateBody{Time: time.Now().UTC(), Version: version.Get().Version, Shard: s.db.Config().Shard,
		Auth: len(s.tokens) > 0, Tables: []uiTable{}}
	if len(names) > uiMaxTables {
		body.MoreTables = len(names) - uiMaxTables
		names = names[:uiMaxTables]
	}
	passes, last, merges := s.passLog.snapshot()
	body.Merger = uiMerger{Passes: passes, LastPass: last}
	if s.cfg.MergeInterval > 0 {
		body.Merger.Interval = s.cfg.MergeInterval
	}

	tables := make([]uiTable, len(names))
	sem := make(chan struct{}, uiStatusParallelism)
	var wg sync.WaitGroup
	for i, name := range names {
		tables[i] = uiTable{Name: name, Merges: merges(name), Consumers: []groupView{}}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			st, consumers, err := s.uiTableStatus(r, name)
			if err != nil {
				o := classify(err)
				tables[i].Error = &uiError{Code: o.code, Message: err.Error()}
				return
			}
			tables[i].Status, tables[i].Consumers = &st, consumers
		})
	}
	wg.Wait()
	if err := r.Context().Err(); err != nil {
		return err
	}
	for _, t := range tables {
		if t.Error != nil && t.Error.Code == codeTableNotFound {
			continue // dropped since the listing
		}
		body.Tables = append(body.Tables, t)
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, body)
	return nil
}

func (s *Server) uiTableStatus(r *http.Request, name string) (engine.Status, []groupView, error) {
	tb, err := s.db.Table(r.Context(), name)
	if err != nil {
		return engine.Status{}, nil, err
	}
	st, err := tb.Status(r.Context())
	if err != nil {
		return engine.Status{}, nil, err
	}
	consumers, err := consumersOf(r.Context(), tb)
	return st, consumers, err
}
