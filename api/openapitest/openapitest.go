// Package openapitest checks HTTP traffic against rollstore's OpenAPI
// description (api/openapi.yaml) for tests.
//
// A Validator's Transport wraps the RoundTripper a test's client uses, so
// every request the test sends and every response it gets is checked, and
// a drift between the server and the file fails the test:
//
//   - a request the file calls valid is answered with a status the file
//     documents for it, headers and (for JSON) a body matching the
//     response's schema, and a content type the file lists;
//   - a request the file calls invalid (a test sending bad input on
//     purpose) must be refused with a 4xx, since a server that accepts
//     what the contract forbids has drifted too;
//   - a request for which the file has no operation must get a 4xx in the
//     JSON error envelope, or a redirect (to a cleaned path).
//
// Bodies are never consumed or held up: a request body is checked only if
// it is already in memory (http.Request.GetBody), payload and Arrow bodies
// (format: binary) are not read at all, and only JSON response bodies are
// buffered (and NDJSON ones), so streaming tests still stream.
package openapitest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/rollstore/rollstore/api"
)

// maxJSONBody bounds the JSON response bodies buffered for checking.
const maxJSONBody = 16 << 20

const mediaNDJSON = "application/x-ndjson"

var registerOnce sync.Once

// Validator checks traffic against the OpenAPI file and counts the
// operations and statuses it saw.
type Validator struct {
	doc    *openapi3.T
	router routers.Router
	// public are the operations the file declares with no security
	// requirement: they must never answer 401.
	public map[*openapi3.Operation]bool

	mu   sync.Mutex
	seen map[string]map[int]int // "GET /v1/tables" → status → count
}

// New loads and validates api/openapi.yaml.
func New() (*Validator, error) {
	registerOnce.Do(func() {
		// NDJSON has no decoder in kin-openapi; the file describes one
		// line, and every line is checked against that schema.
		openapi3filter.RegisterBodyDecoder(mediaNDJSON, ndjsonDecoder)
	})
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		return nil, fmt.Errorf("openapitest: loading api/openapi.yaml: %w", err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		return nil, fmt.Errorf("openapitest: api/openapi.yaml is not valid OpenAPI: %w", err)
	}
	// Tests talk to servers on any address: match paths only.
	doc.Servers = nil
	v := &Validator{doc: doc, public: map[*openapi3.Operation]bool{}, seen: map[string]map[int]int{}}
	for _, path := range doc.Paths.InMatchingOrder() {
		for _, op := range doc.Paths.Value(path).Operations() {
			if op.Security != nil && len(*op.Security) == 0 {
				v.public[op] = true
			}
			// kin-openapi reads the whole request body to check security
			// requirements, which would buffer streamed uploads; the
			// bearer token is checked by the server's own tests, and
			// public routes by the 401 check in this package.
			op.Security = &openapi3.SecurityRequirements{}
		}
	}
	if v.router, err = gorillamux.NewRouter(doc); err != nil {
		return nil, fmt.Errorf("openapitest: %w", err)
	}
	return v, nil
}

// Operations lists every operation of the file as "METHOD /path".
func (v *Validator) Operations() []string {
	var ops []string
	for _, path := range v.doc.Paths.InMatchingOrder() {
		for method := range v.doc.Paths.Value(path).Operations() {
			ops = append(ops, method+" "+path)
		}
	}
	sort.Strings(ops)
	return ops
}

// ErrorCodes lists the codes the file's Error schema, the envelope of
// every error answer, allows.
func (v *Validator) ErrorCodes() []string {
	var codes []string
	ref := v.doc.Components.Schemas["Error"]
	if ref == nil || ref.Value == nil {
		return nil
	}
	env := ref.Value.Properties["error"]
	if env == nil || env.Value == nil || env.Value.Properties["code"] == nil || env.Value.Properties["code"].Value == nil {
		return nil
	}
	for _, c := range env.Value.Properties["code"].Value.Enum {
		if s, ok := c.(string); ok {
			codes = append(codes, s)
		}
	}
	sort.Strings(codes)
	return codes
}

// DocumentsError reports whether some operation of the file documents an
// error answer of status with code: a response of that status whose JSON
// schema accepts the error envelope with that code.
func (v *Validator) DocumentsError(status int, code string) bool {
	body := map[string]any{"error": map[string]any{"code": code, "message": "m", "request_id": "r"}}
	for _, path := range v.doc.Paths.InMatchingOrder() {
		for _, op := range v.doc.Paths.Value(path).Operations() {
			ref := op.Responses.Status(status)
			if ref == nil || ref.Value == nil {
				continue
			}
			mt := ref.Value.Content.Get("application/json")
			if mt == nil || mt.Schema == nil || mt.Schema.Value == nil {
				continue
			}
			if mt.Schema.Value.VisitJSON(body, openapi3.VisitAsResponse()) == nil {
				return true
			}
		}
	}
	return false
}

// Seen reports the statuses seen per operation ("METHOD /path").
func (v *Validator) Seen() map[string][]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string][]int{}
	for op, st := range v.seen {
		for s := range st {
			out[op] = append(out[op], s)
		}
		sort.Ints(out[op])
	}
	return out
}

// Unexercised lists the operations no checked request reached.
func (v *Validator) Unexercised() []string {
	seen := v.Seen()
	var out []string
	for _, op := range v.Operations() {
		if len(seen[op]) == 0 {
			out = append(out, op)
		}
	}
	return out
}

func (v *Validator) note(op string, status int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen[op] == nil {
		v.seen[op] = map[int]int{}
	}
	v.seen[op][status]++
}

// Transport returns a RoundTripper that sends through base (nil means
// http.DefaultTransport) and calls report with every disagreement between
// the traffic and the file. Responses are returned as they came.
func (v *Validator) Transport(base http.RoundTripper, report func(error)) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return &transport{v: v, base: base, report: report}
}

type transport struct {
	v      *Validator
	base   http.RoundTripper
	report func(error)
}

// CloseIdleConnections lets httptest.Server.Close and http.Client reach
// the wrapped transport.
func (t *transport) CloseIdleConnections() {
	if c, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	what := req.Method + " " + req.URL.EscapedPath()
	route, params, routeErr := t.v.router.FindRoute(req)
	var in *openapi3filter.RequestValidationInput
	var reqErr error
	if routeErr == nil {
		in, reqErr = t.v.checkRequest(req, route, params)
	}

	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	var errs []error
	if routeErr != nil {
		errs = t.v.checkUnrouted(resp)
	} else {
		op := route.Method + " " + route.Path
		t.v.note(op, resp.StatusCode)
		if reqErr != nil && (resp.StatusCode < 400 || resp.StatusCode > 499) {
			errs = append(errs, fmt.Errorf("the file refuses this request (%v), but the server answered %d", reqErr, resp.StatusCode))
		}
		errs = append(errs, t.v.checkResponse(resp, route, in)...)
	}
	for _, e := range errs {
		t.report(fmt.Errorf("OpenAPI drift: %s → %d: %w", what, resp.StatusCode, e))
	}
	return resp, nil
}

// checkRequest validates req against its operation without consuming its
// body.
func (v *Validator) checkRequest(req *http.Request, route *routers.Route, raw map[string]string) (*openapi3filter.RequestValidationInput, error) {
	// The router matches the escaped path (an id's %2F stays inside its
	// segment) and hands out escaped values; parameters are checked as
	// the server sees them, decoded.
	params := make(map[string]string, len(raw))
	for k, s := range raw {
		d, err := url.PathUnescape(s)
		if err != nil {
			d = s
		}
		params[k] = d
	}
	opts := &openapi3filter.Options{
		MultiError:            true,
		IncludeResponseStatus: true,
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		SkipSettingDefaults:   true,
		ExcludeRequestBody:    true, // unless the body is in memory, below
	}
	check := req
	if rb := route.Operation.RequestBody; rb != nil && rb.Value != nil {
		mt := rb.Value.Content.Get(req.Header.Get("Content-Type"))
		switch {
		case mt != nil && isBinary(mt.Schema):
			// Opaque bytes (a payload, an Arrow stream): nothing to check
			// but the media type, and reading them would stall streams.
		case req.GetBody != nil || req.Body == nil || req.Body == http.NoBody:
			check = req.Clone(req.Context())
			if req.GetBody != nil {
				b, err := req.GetBody()
				if err != nil {
					return nil, err
				}
				check.Body = b
			}
			opts.ExcludeRequestBody = false
		}
		if mt == nil && opts.ExcludeRequestBody {
			// A media type the file does not list, on a streamed body.
			return nil, fmt.Errorf("request Content-Type %q is not one the file lists", req.Header.Get("Content-Type"))
		}
	}
	in := &openapi3filter.RequestValidationInput{Request: check, PathParams: params, Route: route, Options: opts}
	err := openapi3filter.ValidateRequest(req.Context(), in)
	// Responses are matched against the original request.
	in.Request = req
	return in, err
}

// checkResponse validates a response to a routed request.
func (v *Validator) checkResponse(resp *http.Response, route *routers.Route, in *openapi3filter.RequestValidationInput) []error {
	var errs []error
	op := route.Operation
	if resp.StatusCode == http.StatusUnauthorized && v.public[op] {
		errs = append(errs, errors.New("a route the file declares public answered 401"))
	}
	ref := op.Responses.Status(resp.StatusCode)
	if ref == nil || ref.Value == nil {
		return append(errs, fmt.Errorf("status %d is not documented for %s %s", resp.StatusCode, route.Method, route.Path))
	}
	ct := resp.Header.Get("Content-Type")
	mt, _, _ := mime.ParseMediaType(ct)
	// NDJSON answers (the feed's) are checked line by line, like NDJSON
	// request bodies.
	isJSON := mt == "application/json" || strings.HasSuffix(mt, "+json") || mt == mediaNDJSON
	if len(ref.Value.Content) > 0 && resp.StatusCode != http.StatusNotModified && resp.Request.Method != http.MethodHead &&
		ref.Value.Content.Get(ct) == nil {
		errs = append(errs, fmt.Errorf("response Content-Type %q is not one the file lists for %d", ct, resp.StatusCode))
	}
	opts := *in.Options
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                &opts,
	}
	if isJSON {
		body, err := bufferBody(resp)
		if err != nil {
			return append(errs, err)
		}
		out.SetBodyBytes(body)
	} else {
		opts.ExcludeResponseBody = true
		out.Body = io.NopCloser(bytes.NewReader(nil))
	}
	if err := openapi3filter.ValidateResponse(resp.Request.Context(), out); err != nil {
		errs = append(errs, err)
	}
	return errs
}

// checkUnrouted checks the answer to a request the file has no operation
// for: a redirect, or a 4xx in the error envelope.
func (v *Validator) checkUnrouted(resp *http.Response) []error {
	switch {
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		if resp.Header.Get("Location") == "" {
			return []error{errors.New("no operation in the file; a redirect without Location")}
		}
		return nil
	case resp.StatusCode < 400 || resp.StatusCode > 499:
		return []error{fmt.Errorf("no operation in the file matches, yet the server answered %d", resp.StatusCode)}
	}
	schema := "Error"
	switch resp.StatusCode {
	case http.StatusNotFound:
		schema = "ErrorNotFound"
	case http.StatusMethodNotAllowed:
		schema = "ErrorMethodNotAllowed"
		if resp.Header.Get("Allow") == "" {
			return []error{errors.New("405 without Allow")}
		}
	}
	if resp.Request.Method == http.MethodHead {
		return nil
	}
	body, err := bufferBody(resp)
	if err != nil {
		return []error{err}
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" {
		return []error{fmt.Errorf("error answered as %q, not JSON: %q", resp.Header.Get("Content-Type"), snippet(body))}
	}
	return v.checkJSON(schema, body)
}

// checkJSON validates a JSON document against a schema of the file.
func (v *Validator) checkJSON(schema string, body []byte) []error {
	ref := v.doc.Components.Schemas[schema]
	if ref == nil {
		return []error{fmt.Errorf("openapitest: no schema %s in the file", schema)}
	}
	var val any
	if err := json.Unmarshal(body, &val); err != nil {
		return []error{fmt.Errorf("body is not JSON (%v): %q", err, snippet(body))}
	}
	if err := ref.Value.VisitJSON(val, openapi3.MultiErrors(), openapi3.VisitAsResponse()); err != nil {
		return []error{fmt.Errorf("body does not match %s: %w", schema, err)}
	}
	return nil
}

// bufferBody reads a JSON response body (bounded) and puts it back, with
// the read error, if any, replayed after the bytes.
func bufferBody(resp *http.Response) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJSONBody+1))
	resp.Body.Close()
	var rest io.Reader = bytes.NewReader(body)
	if err != nil {
		rest = io.MultiReader(rest, errReader{err})
	}
	resp.Body = io.NopCloser(rest)
	if err != nil {
		return nil, fmt.Errorf("reading the JSON body: %w", err)
	}
	if len(body) > maxJSONBody {
		return nil, fmt.Errorf("JSON body larger than %d bytes", maxJSONBody)
	}
	return body, nil
}

type errReader struct{ err error }

func (r errReader) Read([]byte) (int, error) { return 0, r.err }

func isBinary(s *openapi3.SchemaRef) bool {
	return s != nil && s.Value != nil && s.Value.Type.Is("string") && s.Value.Format == "binary"
}

func snippet(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "…"
	}
	return string(b)
}

// ndjsonDecoder checks every non-blank line of an NDJSON body against the
// schema the file gives for one line, and returns the first line for
// kin-openapi's own check of the body.
func ndjsonDecoder(body io.Reader, _ http.Header, schema *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	var first any
	n := 0
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		var val any
		if err := json.Unmarshal(b, &val); err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if schema != nil && schema.Value != nil {
			if err := schema.Value.VisitJSON(val); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
		}
		if n == 0 {
			first = val
		}
		n++
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("no record in the batch")
	}
	return first, nil
}
