package main

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
)

// envName is the environment variable of a flag: ROLLSTORE_ and the name
// in upper case with '-' as '_'.
func envName(flagName string) string {
	return "ROLLSTORE_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

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
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil {
			return
		}
		name := envOf(f.Name)
		if v, ok := lookup(name); ok {
			if serr := f.Value.Set(v); serr != nil {
				err = fmt.Errorf("%s=%q: %w", name, v, serr)
			}
		}
	})
	return err
}

// byteSize is a flag.Value for sizes: a number of bytes with an optional
// binary suffix (KiB, MiB, GiB, TiB; K, M, G, T mean the same).
type byteSize struct{ p *int64 }

var sizeUnits = []struct {
	suffix string
	shift  uint
}{{"tib", 40}, {"gib", 30}, {"mib", 20}, {"kib", 10}, {"t", 40}, {"g", 30}, {"m", 20}, {"k", 10}, {"b", 0}}

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
		return 0, fmt.Errorf("invalid size %q: want bytes, optionally with KiB, MiB, GiB or TiB", s)
	}
	return n << shift, nil
}
