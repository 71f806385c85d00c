package rowfile

import (
	"strings"
	"testing"
	"time"
)

func TestValidateCreatedAtRange(t *testing.T) {
	for _, at := range []time.Time{
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", -14*3600)), // year 10000 in UTC
		time.Date(0, 12, 31, 23, 59, 59, 0, time.UTC),
		time.UnixMicro(9e18).UTC(),
		time.UnixMicro(-9e18).UTC(),
	} {
		r := Record{ID: "a", RolloutID: "r", CreatedAt: at}
		if err := r.Validate(); err == nil || !strings.Contains(err.Error(), "created_at") {
			t.Errorf("created_at %v: %v, want an error naming created_at", at, err)
		}
	}
	for _, at := range []time.Time{MinCreatedAt, MaxCreatedAt, time.Date(9999, 12, 31, 23, 59, 59, 0, time.FixedZone("", 3600))} {
		r := Record{ID: "a", RolloutID: "r", CreatedAt: at}
		if err := r.Validate(); err != nil {
			t.Errorf("created_at %v refused: %v", at, err)
		}
	}
}

func TestCheckJSON(t *testing.T) {
	for _, bad := range []string{
		`{"a":1,"a":2}`,
		`{"x":{"a":1,"b":{"c":1,"c":1}}}`,
		`[{"k":1,"k":1}]`,
		`{"a":1,"\u0061":2}`, // the same key, escaped
		`"\ud800"`,
		`"\udc00"`,
		`{"a":"x\ud83dy"}`,
		`{"a":"\ud83d\u0041"}`,
		`{"\ud800":1}`,
		"\"\xff\"",
		`{"a":`,
		`{} {}`,
	} {
		if err := CheckJSON([]byte(bad), nil); err == nil {
			t.Errorf("%s accepted", bad)
		}
	}
	for _, good := range []string{
		`{}`, `[]`, `1`, `-0.5e10`, `null`, `"\ud83d\ude00"`, `"\\ud800"`, `{"a":{"a":1},"b":[{"a":1},{"a":2}]}`,
		` { "a" : [ 1 , "x\"y" , true ] , "b" : null } `, `"ü"`,
	} {
		if err := CheckJSON([]byte(good), nil); err != nil {
			t.Errorf("%s refused: %v", good, err)
		}
	}
	var keys []string
	err := CheckJSON([]byte(`{"Rollout_ID":1,"x\u0041":{"inner":1}}`), func(k string) error { keys = append(keys, k); return nil })
	if err != nil || strings.Join(keys, ",") != "Rollout_ID,xA" {
		t.Fatalf("top-level keys %q, %v", keys, err)
	}
}

func TestSameContentIsExact(t *testing.T) {
	base := Record{ID: "a", RolloutID: "r", Metadata: []byte(`{"n":9007199254740993,"s":"x","l":[1,2]}`)}
	same := base
	same.Metadata = []byte(` {"l":[1, 2], "s":"\u0078", "n":9007199254740993 } `)
	if !SameContent(&base, &same) {
		t.Fatal("the same document, reformatted, is not the same content")
	}
	for _, m := range []string{
		`{"n":9007199254740992,"s":"x","l":[1,2]}`,
		`{"n":9007199254740993.5,"s":"x","l":[1,2]}`,
		`{"n":9007199254740993,"s":"X","l":[1,2]}`,
		`{"n":9007199254740993,"s":"x","l":[2,1]}`,
	} {
		other := base
		other.Metadata = []byte(m)
		if SameContent(&base, &other) {
			t.Errorf("%s is the same content as %s", m, base.Metadata)
		}
	}
	zero, negZero := 0.0, 0.0
	negZero = -negZero
	a, b := base, base
	a.Reward, b.Reward = &zero, &negZero
	if SameContent(&a, &b) {
		t.Error("reward -0 is the same content as 0")
	}
}
