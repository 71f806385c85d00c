package server

import (
	"fmt"
	"strings"
)

// validateMediaType checks a content type against RFC 9110's media-type
// grammar (section 8.3.1): type "/" subtype, then parameters of token
// names with token or quoted-string values, in ASCII only. The empty
// string is valid: such a payload is served as application/octet-stream.
// A payload's content type is served back verbatim, so what a browser or
// a proxy would parse in some other way than the writer meant is refused
// at the door.
func validateMediaType(ct string) error {
	if ct == "" {
		return nil
	}
	bad := func(why string) error {
		return fmt.Errorf("content type %q is not a media type (type/subtype[; name=value]…, ASCII): %s", ct, why)
	}
	s := ct
	typ, rest := cutToken(s)
	if typ == "" {
		return bad("no type")
	}
	if !strings.HasPrefix(rest, "/") {
		return bad("no \"/\" after the type")
	}
	sub, rest := cutToken(rest[1:])
	if sub == "" {
		return bad("no subtype")
	}
	for {
		rest = strings.TrimLeft(rest, " \t")
		if rest == "" {
			return nil
		}
		if rest[0] != ';' {
			return bad(fmt.Sprintf("unexpected %q", rest[0]))
		}
		rest = strings.TrimLeft(rest[1:], " \t")
		if rest == "" || rest[0] == ';' {
			continue // empty parameters are allowed by the grammar
		}
		var name string
		name, rest = cutToken(rest)
		if name == "" || !strings.HasPrefix(rest, "=") {
			return bad("a parameter is not name=value")
		}
		rest = rest[1:]
		if strings.HasPrefix(rest, "\"") {
			var ok bool
			if rest, ok = cutQuoted(rest); !ok {
				return bad("an unterminated or non-ASCII quoted string")
			}
			continue
		}
		var val string
		if val, rest = cutToken(rest); val == "" {
			return bad("a parameter has no value")
		}
	}
}

// cutToken splits s after its leading RFC 9110 token (1*tchar).
func cutToken(s string) (tok, rest string) {
	i := 0
	for i < len(s) && isTChar(s[i]) {
		i++
	}
	return s[:i], s[i:]
}

func isTChar(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// cutQuoted consumes a quoted-string at the start of s (which begins with
// a double quote), refusing obs-text: the content type is ASCII.
func cutQuoted(s string) (rest string, ok bool) {
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"':
			return s[i+1:], true
		case c == '\\':
			if i+1 >= len(s) || !(s[i+1] == '\t' || s[i+1] >= 0x20 && s[i+1] < 0x7f) {
				return "", false
			}
			i++
		case c == '\t' || c >= 0x20 && c < 0x7f:
		default:
			return "", false
		}
	}
	return "", false
}
