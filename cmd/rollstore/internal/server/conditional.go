package server

import (
	"net/http"
	"net/textproto"
	"strings"
	"time"
)

// condition is what a payload request's conditional headers decide.
type condition int

const (
	condServe              condition = iota // serve, honouring Range
	condIgnoreRange                         // serve whole: If-Range does not hold
	condNotModified                         // 304
	condPreconditionFailed                  // 412
)

// evaluate decides a GET or HEAD of a payload with entity tag tag and
// modification time mod (zero if it has none that HTTP can express) the
// way net/http.ServeContent does, which follows RFC 9110 §13.2.2: If-Match,
// else If-Unmodified-Since (412 when false); then If-None-Match (304 when
// it matches), else If-Modified-Since (304 when not modified since); then
// If-Range, which only decides whether Range applies. Dates compare at
// whole seconds, as Last-Modified carries them.
func evaluate(h http.Header, tag string, mod time.Time) condition {
	mod = mod.Truncate(time.Second)
	ok := ifMatch(h.Get("If-Match"), tag)
	if ok == none && !mod.IsZero() {
		if t, err := http.ParseTime(h.Get("If-Unmodified-Since")); err == nil {
			ok = truth(!mod.After(t))
		}
	}
	if ok == no {
		return condPreconditionFailed
	}
	switch ifNoneMatch(h.Get("If-None-Match"), tag) {
	case no:
		return condNotModified
	case none:
		if t, err := http.ParseTime(h.Get("If-Modified-Since")); err == nil && !mod.IsZero() && !mod.After(t) {
			return condNotModified
		}
	}
	if ir := h.Get("If-Range"); ir != "" && h.Get("Range") != "" {
		if e, _ := scanETag(ir); e != "" {
			if !strongMatch(e, tag) {
				return condIgnoreRange
			}
		} else if t, err := http.ParseTime(ir); err != nil || mod.IsZero() || !t.Equal(mod) {
			return condIgnoreRange
		}
	}
	return condServe
}

// hasConditions reports whether h holds a header evaluate looks at.
func hasConditions(h http.Header) bool {
	for _, k := range []string{"If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range"} {
		if h.Get(k) != "" {
			return true
		}
	}
	return false
}

// tri is a condition header's result: absent, true or false.
type tri int

const (
	none tri = iota
	yes
	no
)

func truth(b bool) tri {
	if b {
		return yes
	}
	return no
}

// ifMatch: true if the list is "*" or names tag (strong comparison);
// false otherwise, a malformed list included.
func ifMatch(v, tag string) tri {
	if v == "" {
		return none
	}
	if listNames(v, func(e string) bool { return strongMatch(e, tag) }) {
		return yes
	}
	return no
}

// ifNoneMatch: false (the representation matches, so: not modified) if
// the list is "*" or names tag under weak comparison; true otherwise.
func ifNoneMatch(v, tag string) tri {
	if v == "" {
		return none
	}
	if listNames(v, func(e string) bool { return strings.TrimPrefix(e, "W/") == strings.TrimPrefix(tag, "W/") }) {
		return no
	}
	return yes
}

// listNames reports whether the entity-tag list v is "*" or holds a tag
// eq accepts, scanning as net/http does; a malformed list names nothing
// from the malformed entry on.
func listNames(v string, eq func(etag string) bool) bool {
	for {
		v = textproto.TrimString(v)
		switch {
		case v == "":
			return false
		case v[0] == ',':
			v = v[1:]
			continue
		case v[0] == '*':
			return true
		}
		e, rest := scanETag(v)
		if e == "" || eq(e) {
			return e != ""
		}
		v = rest
	}
}

// scanETag reads one entity tag, W/"…" or "…", from the start of s.
func scanETag(s string) (tag, rest string) {
	s = textproto.TrimString(s)
	start := 0
	if strings.HasPrefix(s, "W/") {
		start = 2
	}
	if len(s[start:]) < 2 || s[start] != '"' {
		return "", ""
	}
	for i := start + 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == 0x21 || c >= 0x23 && c <= 0x7e || c >= 0x80:
		case c == '"':
			return s[:i+1], s[i+1:]
		default:
			return "", ""
		}
	}
	return "", ""
}

func strongMatch(a, b string) bool { return a == b && a != "" && a[0] == '"' }
