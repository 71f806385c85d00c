package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// envName is the environment variable of a flag: ROLLSTORE_ and the name
// in upper case with '-' as '_'.
func envName(flagName string) string {
	return "ROLLSTORE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// optName names a setting the way errors name it: the flag and its
// variable, e.g. "--azure-account / ROLLSTORE_AZURE_ACCOUNT", so the user
// finds it whichever way they set it.
func optName(flagName string, envOf func(string) string) string {
	return "--" + flagName + " / " + envOf(flagName)
}

// opt is optName for the flags with serve's variables (serve's own and the
// store flags every command shares).
func opt(flagName string) string { return optName(flagName, envName) }

// withEnvNames appends each flag's environment variable, as envOf names
// it, to its usage, so --help documents both.
func withEnvNames(fs *flag.FlagSet, envOf func(flagName string) string) {
	fs.VisitAll(func(f *flag.Flag) {
		f.Usage += " [$" + envOf(f.Name) + "]"
	})
}

// applyEnv sets every flag whose environment variable (as envOf names it)
// is set. It runs before parsing, so the command line wins.
func applyEnv(fs *flag.FlagSet, envOf func(flagName string) string, lookup func(string) (string, bool)) error {
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		name := envOf(f.Name)
		if v, ok := lookup(name); ok {
			if err := f.Value.Set(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q (--%s): %w", name, v, f.Name, err))
			}
		}
	})
	return errors.Join(errs...)
}

// flagGroups sorts a command's flags into the sections of its --help. A
// flag belongs to the section most recently started when it was defined:
//
//	g.start("Limits")
//	fs.Var(byteSize{&c.max}, "max-body", "...") // in Limits
//
// so a new flag lands in the section it is written in, with no list to
// keep in step.
type flagGroups struct {
	fs      *flag.FlagSet
	titles  []string
	of      map[string]string // flag name -> section title
	current string
}

func newFlagGroups(fs *flag.FlagSet) *flagGroups {
	return &flagGroups{fs: fs, of: map[string]string{}}
}

// start begins a section: flags defined from now on belong to it.
func (g *flagGroups) start(title string) {
	g.settle()
	g.current = title
	if !slices.Contains(g.titles, title) {
		g.titles = append(g.titles, title)
	}
}

// settle assigns the flags defined since the last call to the current
// section.
func (g *flagGroups) settle() {
	g.fs.VisitAll(func(f *flag.Flag) {
		if _, ok := g.of[f.Name]; !ok {
			g.of[f.Name] = g.current
		}
	})
}

// section returns the title of a flag's section ("" for a flag defined
// before the first start).
func (g *flagGroups) section(name string) string {
	g.settle()
	return g.of[name]
}

// print writes the flags section by section, each as flag.PrintDefaults
// would, and any flag outside every section last, under "Other".
func (g *flagGroups) print(w io.Writer) {
	g.settle()
	titles := g.titles
	for _, t := range g.of {
		if t == "" {
			titles = append(slices.Clone(g.titles), "")
			break
		}
	}
	for _, title := range titles {
		sub := flag.NewFlagSet("", flag.ContinueOnError)
		g.fs.VisitAll(func(f *flag.Flag) {
			if g.of[f.Name] == title {
				sub.Var(f.Value, f.Name, f.Usage)
				sub.Lookup(f.Name).DefValue = f.DefValue // not the value parsed so far
			}
		})
		if title == "" {
			title = "Other"
		}
		fmt.Fprintf(w, "%s:\n", title)
		var buf strings.Builder
		sub.SetOutput(&buf)
		sub.PrintDefaults()
		// Go's flag package reads -name and --name alike but prints
		// -name; the documentation writes --name, and so does the help.
		for line := range strings.SplitAfterSeq(buf.String(), "\n") {
			if strings.HasPrefix(line, "  -") {
				line = "  --" + line[len("  -"):]
			}
			fmt.Fprint(w, line)
		}
		fmt.Fprintln(w)
	}
}

// byteSize is a flag.Value for sizes: a number of bytes with an optional
// binary suffix: KiB, MiB, GiB, TiB; Ki, Mi, Gi, Ti as Kubernetes writes
// them; K, M, G, T mean the same. Case is ignored.
type byteSize struct{ p *int64 }

var sizeUnits = []struct {
	suffix string
	shift  uint
}{
	{"tib", 40}, {"gib", 30}, {"mib", 20}, {"kib", 10},
	{"ti", 40}, {"gi", 30}, {"mi", 20}, {"ki", 10},
	{"t", 40}, {"g", 30}, {"m", 20}, {"k", 10}, {"b", 0},
}

func (b byteSize) String() string {
	if b.p == nil {
		return "0"
	}
	n := *b.p
	for _, u := range sizeUnits[:4] {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatInt(n>>u.shift, 10) + strings.ToUpper(u.suffix[:1]) + "iB"
		}
	}
	return strconv.FormatInt(n, 10)
}

func (b byteSize) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*b.p = n
	return nil
}

func parseSize(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	shift := uint(0)
	for _, u := range sizeUnits {
		if num, ok := strings.CutSuffix(t, u.suffix); ok {
			t, shift = strings.TrimSpace(num), u.shift
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || (shift > 0 && n > (1<<62)>>shift) {
		return 0, fmt.Errorf("invalid size %q: want bytes, optionally with KiB, MiB, GiB or TiB (or Ki, Mi, Gi, Ti)", s)
	}
	return n << shift, nil
}

// harnessEnv are ROLLSTORE_* variables that rollstore itself does not read
// but its test and benchmark harness sets for everything it runs (make
// test, make fixture), so they are not warned about.
var harnessEnv = []string{
	"ROLLSTORE_AZURITE_CONNECTION_STRING",
	"ROLLSTORE_REQUIRE_AZURITE",
	"ROLLSTORE_ARROWJS_DIR",
	"ROLLSTORE_REQUIRE_ARROWJS",
	"ROLLSTORE_LOCAL_LEASE_HELPER",
}

// unknownEnv returns the ROLLSTORE_* variables of environ that are not in
// known, each with the closest known name if one is close enough to be a
// likely typo ("" otherwise), sorted by name.
func unknownEnv(environ []string, known map[string]bool) (unknown, suggest []string) {
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "ROLLSTORE_") && !known[name] && !slices.Contains(harnessEnv, name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	candidates := make([]string, 0, len(known))
	for k := range known {
		candidates = append(candidates, k)
	}
	slices.Sort(candidates) // ties go to the first in order, deterministically
	for _, name := range names {
		best, bestD := "", -1
		for _, k := range candidates {
			if d := editDistance(name, k); bestD < 0 || d < bestD {
				best, bestD = k, d
			}
		}
		// A typo changes a few characters; beyond that a suggestion is noise.
		if bestD < 0 || bestD > max(2, (len(name)-len("ROLLSTORE_"))/3) {
			best = ""
		}
		unknown, suggest = append(unknown, name), append(suggest, best)
	}
	return unknown, suggest
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
