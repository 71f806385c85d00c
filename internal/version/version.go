// Package version says which build of rollstore is running: the release
// version and source revision stamped at link time, or, for a plain `go
// build` or `go install`, what the Go toolchain recorded in the binary.
//
// The Makefile's build and the Dockerfile stamp both values:
//
//	go build -ldflags "-X github.com/rollstore/rollstore/internal/version.version=v1.2.3 \
//	  -X github.com/rollstore/rollstore/internal/version.revision=$(git rev-parse HEAD)" ./cmd/rollstore
package version

import (
	"runtime"
	"runtime/debug"
)

// Set with -ldflags -X (see the package comment); they are variables, not
// constants, only because the linker can set nothing else.
var (
	version  string
	revision string
)

// Info describes a build.
type Info struct {
	// Version is the release, e.g. v1.2.3; the module version when not
	// stamped (a pseudo-version for go install of a commit); else "devel".
	Version string
	// Revision is the source commit; "unknown" when neither stamped nor
	// recorded by the toolchain (e.g. -buildvcs=false).
	Revision string
	// GoVersion is the toolchain that built the binary.
	GoVersion string
}

// Get returns the running binary's build information.
func Get() Info {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return resolve(version, revision, bi)
}

// resolve prefers the stamped values and falls back to the build info.
func resolve(stampedVersion, stampedRevision string, bi *debug.BuildInfo) Info {
	info := Info{Version: stampedVersion, Revision: stampedRevision, GoVersion: runtime.Version()}
	if bi == nil {
		bi = &debug.BuildInfo{}
	}
	if bi.GoVersion != "" {
		info.GoVersion = bi.GoVersion
	}
	if info.Version == "" {
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		} else {
			info.Version = "devel"
		}
	}
	if info.Revision == "" {
		var rev string
		var modified bool
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		switch {
		case rev == "":
			info.Revision = "unknown"
		case modified:
			info.Revision = rev + "-dirty"
		default:
			info.Revision = rev
		}
	}
	return info
}

// String is the one-line form `rollstore version` prints.
func (i Info) String() string {
	return "rollstore " + i.Version + " (revision " + i.Revision + ", " + i.GoVersion + ")"
}
