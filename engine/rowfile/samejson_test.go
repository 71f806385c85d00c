package rowfile

import "testing"

// Metadata is compared as a JSON value: numbers by their exact decimal
// value (however a client's serialiser spelled them), object keys in any
// order; nothing is rounded through float64.
func TestSameJSONComparesNumbersByValue(t *testing.T) {
	same := [][2]string{
		{`{"a":1}`, `{"a":1.0}`},
		{`{"a":1}`, `{"a":1e0}`},
		{`{"a":100}`, `{"a":1E2}`},
		{`{"a":100}`, `{"a":1.00e+2}`},
		{`{"a":0.5}`, `{"a":5e-1}`},
		{`{"a":0}`, `{"a":-0.0}`},
		{`{"a":0}`, `{"a":0e99999999999999999999}`},
		{`{"a":9007199254740993}`, `{"a":9007199254740993.000}`},
		{`{"a":123456789012345678901234567890}`, `{"a":1.23456789012345678901234567890e29}`},
		{`{"a":1,"b":[1.5,{"c":2}]}`, `{"b":[15e-1,{"c":2.0}],"a":1.0}`},
		{`[1,2]`, `[1.0,2.0]`},
		{`1e400`, `10e399`},
		{`null`, ``},
	}
	for _, c := range same {
		if !sameJSON([]byte(c[0]), []byte(c[1])) {
			t.Errorf("%s and %s are not the same value", c[0], c[1])
		}
	}
	different := [][2]string{
		{`{"a":1}`, `{"a":1.5}`},
		{`{"a":1}`, `{"a":-1}`},
		{`{"a":1}`, `{"a":"1"}`},
		{`{"a":1}`, `{"a":true}`},
		{`{"a":1}`, `{"a":null}`},
		{`{"a":1}`, `{"a":1,"b":1}`},
		{`{"a":9007199254740993}`, `{"a":9007199254740992}`},
		{`{"a":9007199254740993}`, `{"a":9007199254740992.0}`},
		{`{"a":0.1}`, `{"a":0.10000000000000001}`},
		{`{"a":1e400}`, `{"a":1e401}`},
		{`{"a":10}`, `{"a":1}`},
		{`[1,2]`, `[2,1]`},
		{`{"a":{}}`, `{"a":[]}`},
		{`{}`, `null`},
	}
	for _, c := range different {
		if sameJSON([]byte(c[0]), []byte(c[1])) {
			t.Errorf("%s and %s are the same value", c[0], c[1])
		}
	}
	for _, c := range [][2]string{{"1", "1e0"}, {"-0", "0"}, {"120", "1.2e2"}, {"0.012", "12e-3"}} {
		x, _ := canonicalNumber(c[0])
		y, _ := canonicalNumber(c[1])
		if x != y {
			t.Errorf("%s → %s, %s → %s", c[0], x, c[1], y)
		}
	}
}
