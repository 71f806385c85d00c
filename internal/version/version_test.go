package version

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestResolve(t *testing.T) {
	vcs := func(rev, modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	for _, c := range []struct {
		name           string
		stampV, stampR string
		bi             *debug.BuildInfo
		want           Info
	}{
		{"stamped wins", "v1.2.3", "abc123", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v0.0.0-x"}, Settings: vcs("def", "false")},
			Info{"v1.2.3", "abc123", "go1.26.1"}},
		{"module version and vcs", "", "", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "v0.3.0"}, Settings: vcs("def456", "false")},
			Info{"v0.3.0", "def456", "go1.26.1"}},
		{"dirty tree", "", "", &debug.BuildInfo{GoVersion: "go1.26.1", Main: debug.Module{Version: "(devel)"}, Settings: vcs("def456", "true")},
			Info{"devel", "def456-dirty", "go1.26.1"}},
		{"nothing recorded", "", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			Info{"devel", "unknown", runtime.Version()}},
		{"no build info", "", "", nil, Info{"devel", "unknown", runtime.Version()}},
		{"stamped version only", "v2.0.0", "", &debug.BuildInfo{GoVersion: "go1.26.1", Settings: vcs("fff", "false")},
			Info{"v2.0.0", "fff", "go1.26.1"}},
	} {
		if got := resolve(c.stampV, c.stampR, c.bi); got != c.want {
			t.Errorf("%s: got %+v, want %+v", c.name, got, c.want)
		}
	}
}

func TestGet(t *testing.T) {
	// A test binary is not stamped: the fallback must still give values.
	i := Get()
	if i.Version == "" || i.Revision == "" || i.GoVersion != runtime.Version() {
		t.Fatalf("Get() = %+v", i)
	}
	if s := i.String(); s != "rollstore "+i.Version+" (revision "+i.Revision+", "+i.GoVersion+")" {
		t.Fatalf("String() = %q", s)
	}
}
