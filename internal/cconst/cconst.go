package cconst

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var (
	comments = regexp.MustCompile(`(?s)/\*.*?\*/|//[^\n]*`)
	enums    = regexp.MustCompile(`(?s)\benum\s*(?:\w+\s*)?\{(.*?)\}`)
	defines  = regexp.MustCompile(`(?m)^\s*#\s*define\s+([A-Z_][A-Z0-9_]*)\s+([^\n]+)$`)
	ident    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// File returns the constants of the C files at paths, read in order as
// if included one after the other (a later one may use an earlier one's).
func File(paths ...string) (map[string]int64, error) {
	m := map[string]int64{}
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("cconst: %w", err)
		}
		if err := parse(string(b), m); err != nil {
			return nil, fmt.Errorf("cconst: %s: %w", path, err)
		}
	}
	return m, nil
}

// Parse returns the constants of C source src: enum members and object-
// like #defines whose value it can evaluate (the others are skipped).
func Parse(src string) (map[string]int64, error) {
	m := map[string]int64{}
	if err := parse(src, m); err != nil {
		return nil, err
	}
	return m, nil
}

func parse(src string, m map[string]int64) error {
	src = comments.ReplaceAllString(src, " ")
	for _, d := range defines.FindAllStringSubmatch(src, -1) {
		if v, err := eval(strings.TrimSpace(d[2]), m); err == nil {
			m[d[1]] = v
		}
	}
	for _, e := range enums.FindAllStringSubmatch(src, -1) {
		next := int64(0)
		for _, item := range strings.Split(e[1], ",") {
			item = strings.TrimSpace(item)
			if item == "" {
				continue
			}
			name, expr, has := strings.Cut(item, "=")
			name = strings.TrimSpace(name)
			if !ident.MatchString(name) {
				return fmt.Errorf("enum member %q", item)
			}
			v := next
			if has {
				var err error
				if v, err = eval(strings.TrimSpace(expr), m); err != nil {
					return fmt.Errorf("enum member %s: %w", name, err)
				}
			}
			m[name] = v
			next = v + 1
		}
	}
	return nil
}

// eval evaluates a sum of literals and known names.
func eval(expr string, known map[string]int64) (int64, error) {
	expr = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(strings.TrimSpace(expr), "("), ")"))
	var sum int64
	sign := int64(1)
	for _, tok := range strings.Fields(strings.NewReplacer("+", " + ", "-", " - ").Replace(expr)) {
		switch tok {
		case "+":
			sign = 1
			continue
		case "-":
			sign = -1
			continue
		}
		tok = strings.TrimRight(tok, "uUlL")
		var v int64
		if n, err := strconv.ParseInt(tok, 0, 64); err == nil {
			v = n
		} else if k, ok := known[tok]; ok {
			v = k
		} else {
			return 0, fmt.Errorf("cannot evaluate %q in %q", tok, expr)
		}
		sum += sign * v
		sign = 1
	}
	return sum, nil
}

// Drift compares the constants c read from the C side (named source in
// the messages) with the values want holds for them, and says, in name
// order, which one the C side lacks or gives another value.
func Drift(c, want map[string]int64, source string) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(want)) {
		v, ok := c[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: not defined in %s", name, source))
		case v != want[name]:
			out = append(out, fmt.Sprintf("%s: %s says %d, the Go side %d", name, source, v, want[name]))
		}
	}
	return out
}
